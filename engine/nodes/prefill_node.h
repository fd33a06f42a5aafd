// The prefill node: computes a prompt's K/V and first token (PrefillQueue ->
// Scheduler -> ModelRunner), then ships the pages to the decode node that
// reserved them (KvSender), and frees them once decode acked or the transfer
// failed: never while a write into them could still be in flight.
//
// Internal HTTP API (docs/nodes.md):
//   POST /internal/v1/prefill    compute and transfer; 200 once decode acked,
//                                with the prompt tokens its prefix cache served
//   GET  /internal/v1/limits     the node's settings (engine/node_settings.h)
//   GET  /health, GET /metrics
//
// With options.kv_events set, its prefix cache's block events also go out
// on a ZMQ PUB socket as vLLM's do (engine/kv_events/kv_event_publisher.h;
// docs/nodes.md, "KV cache events"), the trace token their password.
//
// Thread-safe; owns its threads.
#ifndef KVCANARY_ENGINE_NODES_PREFILL_NODE_H_
#define KVCANARY_ENGINE_NODES_PREFILL_NODE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/http_server.h"
#include "engine/core/engine_loop.h"
#include "engine/core/faults.h"
#include "engine/core/trace_bus.h"
#include "engine/kv_events/kv_event_publisher.h"
#include "engine/nodes/node_common.h"
#include "engine/nodes/node_metrics.h"
#include "engine/transfer/kv_sender.h"

namespace kvcanary::engine {

struct PrefillNodeOptions {
  // Where this node may send K/V: the decode nodes' KV ports, by name.
  // Configuration only: a request names a peer, never an address.
  std::vector<KvPeer> kv_peers;
  // The internal secret (mandatory), the trace token, the trace reader cap.
  NodeCredentials creds;
  // /metrics on a listener of its own (0: any free port); -1: on the
  // node's HTTP port.
  int metrics_port = -1;
  std::string host = "127.0.0.1";
  int http_port = 0;
  // Longest prompt this node accepts; 0: half the model's context (as the
  // incident's prefill tier: below the model's context).
  int max_prompt_tokens = 0;
  int max_waiting = 256;
  int http_threads = 64;
  // The HTTP listener's share of unoccupied connections per address
  // (http::Options::max_unoccupied_per_address).
  int http_max_unoccupied_per_address = 32;
  // Tries of a KV transfer refused before the decode node claimed it
  // (KvSender::set_send_attempts).
  int kv_send_attempts = KvSender::kDefaultSendAttempts;
  absl::Duration transfer_timeout = absl::Seconds(30);
  TransferDamage damage = TransferDamage::kNone;
  FaultSet faults;
  NodeTraceOptions trace;
  EngineOptions engine;
  // The KV cache event stream; endpoint "": none. Its password and block
  // size are the node's (creds.trace, engine.page_tokens). Needs the
  // prefix cache and the trace token.
  KvEventPublisherOptions kv_events;
};

class PrefillNode {
 public:
  PrefillNode(const Model* model, const PrefillNodeOptions& options);
  ~PrefillNode();

  absl::Status Start();
  void Stop();
  int http_port() const { return http_port_; }
  int metrics_port() const { return metrics_port_; }  // -1: on http_port
  // The KV event sockets as bound, tcp://HOST:PORT; "" when there are none.
  std::string kv_events_endpoint() const;
  std::string kv_events_replay_endpoint() const;
  // Adds (or replaces, by name) a KV peer: for a process that starts the
  // decode node after this one and learns its KV port then.
  void AddKvPeer(const KvPeer& peer);

 private:
  // Where and as what a request's K/V go: the reservation's size, its
  // transfer token, the configured peer it names.
  struct TransferTarget {
    uint64_t reserved_pages = 0;
    TransferToken token{};
    KvPeer peer;
  };
  absl::StatusOr<TransferTarget> ParseTransferTarget(
      const nlohmann::json& body);
  // The configured peer a request names; with one peer, an unnamed
  // request goes to it. kFailedPrecondition for an unknown name.
  absl::StatusOr<KvPeer> FindKvPeer(const std::string& name);
  void HandlePrefill(const http::Request& req, http::Response& res);
  // The prefill scheduler's own admission check. Its verdict belongs in
  // `status`. With admission-abort-lost the rejection goes to
  // `abort_reason`, a field nothing downstream reads (the incident's bug),
  // and the request goes on with a one-token placeholder in place of the
  // prompt this node could not take.
  struct Admission {
    absl::Status status;
    absl::Status abort_reason;
  };
  Admission Admit(std::vector<int>* prompt) const;
  // Prefills `request` (the first token only), its events on `channel`:
  // *prefilled once done, or why it was not.
  absl::Status RunPrefill(const NodeRequest& request,
                          std::shared_ptr<RequestChannel> channel,
                          RequestEvent* prefilled);
  kv::Metadata MetadataFor(const NodeRequest& request,
                           const TransferTarget& target) const;
  // After the transfer's verdict: waits for the request to finish here,
  // counting what its pages were found to hold.
  void AwaitFinished(RequestChannel& channel);
  // KvSender: one transfer to the decode node; returns decode's verdict.
  absl::Status SendKv(const KvPeer& peer, const kv::Metadata& meta,
                      const std::vector<PageRef>& block_table, int first_token,
                      uint64_t* bytes_sent);
  // Starts the KV event stream, if configured: kFailedPrecondition without
  // the prefix cache or the trace token.
  absl::Status StartKvEvents();

  const Model* model_;
  PrefillNodeOptions options_;
  TraceBus trace_;  // before loop_: the engine emits into it
  std::unique_ptr<TraceFileWriter> trace_file_;
  std::unique_ptr<KvEventPublisher> kv_events_;  // before loop_: its sink
  EngineLoop loop_;
  NodeMetrics metrics_;
  std::unique_ptr<http::Server> metrics_server_;
  int metrics_port_ = -1;
  std::unique_ptr<http::Server> server_;
  int http_port_ = 0;
  absl::Mutex peers_mu_;
  std::vector<KvPeer> peers_ ABSL_GUARDED_BY(peers_mu_);
  // The transfers, over sessions kept between them (after options_: it
  // holds the secret and the TLS context from there).
  KvSender sender_;
};

}  // namespace kvcanary::engine

#endif  // KVCANARY_ENGINE_NODES_PREFILL_NODE_H_
