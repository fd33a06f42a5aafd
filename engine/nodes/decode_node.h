// The decode node: reserves pages for a request, asks a prefill node to fill
// them, has the K/V received over the KV transfer protocol on its KV port
// (KvReceiver, engine/transfer/kv_receiver.h: counts, CRCs, stamps, against
// the reservations this node offers it), then decodes with continuous
// batching and streams tokens back to the router.
//
// Internal HTTP API (docs/nodes.md):
//   POST /internal/v1/generate   one request; streams NDJSON lines (what
//                                the prefill node reported, tokens, the end)
//   GET  /internal/v1/limits     the node's settings (engine/node_settings.h)
//   GET  /health, GET /metrics
// and a TCP port for KV transfers.
//
// Thread-safe; owns its threads.
#ifndef KVCANARY_ENGINE_NODES_DECODE_NODE_H_
#define KVCANARY_ENGINE_NODES_DECODE_NODE_H_

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/http_server.h"
#include "engine/core/engine_loop.h"
#include "engine/core/faults.h"
#include "engine/core/trace_bus.h"
#include "engine/nodes/accepted_requests.h"
#include "engine/nodes/hangup_watch.h"
#include "engine/nodes/node_common.h"
#include "engine/nodes/node_metrics.h"
#include "engine/transfer/kv_admission.h"
#include "engine/transfer/kv_connection.h"
#include "engine/transfer/kv_receiver.h"

namespace kvcanary::engine {

struct DecodeNodeOptions {
  // This node's name, as the prefill nodes' configuration lists its KV
  // port (PrefillNodeOptions::kv_peers); sent to them with each request.
  std::string name = "decode-0";
  // The prefill nodes this node asks to fill its reservations, round-robin
  // (http://host:port). Configuration only: no request names an address.
  std::vector<std::string> prefill_urls;
  // The internal secret (mandatory), the trace token, the trace reader cap.
  NodeCredentials creds;
  // The KV port: transfer slots, the caps on unauthenticated connections,
  // the deadline from accept to Auth (the prefill nodes' addresses are
  // resolved from prefill_urls at start).
  KvAdmissionOptions kv_admission;
  // /metrics on a listener of its own (0: any free port); -1: on the
  // node's HTTP port.
  int metrics_port = -1;
  std::string host = "127.0.0.1";
  int http_port = 0;  // 0: any free port
  int kv_port = 0;
  // A listening socket to adopt for KV transfers instead of binding
  // kv_port (`up` passes the one it bound); -1: none.
  int kv_listen_fd = -1;
  int max_prompt_tokens = 0;  // 0: context - 1
  int max_waiting = 256;
  int http_threads = 96;
  // The HTTP listener's share of unoccupied connections per address
  // (http::Options::max_unoccupied_per_address).
  int http_max_unoccupied_per_address = 32;
  absl::Duration transfer_timeout = absl::Seconds(30);
  // Tests only: the receiver waits this long after the metadata frame, so a
  // test can kill the node in the middle of a transfer.
  absl::Duration test_receive_delay = absl::ZeroDuration();
  // Tests only: a slow link. Each transfer is received at most this many
  // bytes per second (0: no limit).
  int64_t test_receive_bytes_per_s = 0;
  // Metadata slots: where the receiver leaves a finished transfer (first
  // token, staged K/V, the request id echoed) for the request's handler.
  int metadata_slots = 16;
  FaultSet faults;
  NodeTraceOptions trace;
  EngineOptions engine;
};

// What a prefill node answered for a request, passed on to the router.
struct PrefillAnswer {
  nlohmann::json outcome = nullptr;  // null until it answered
  int cached_tokens = 0;             // prompt tokens from its prefix cache
  // The first token's log-probabilities (one position, as
  // engine/nodes/logprobs_wire.h writes it) and the prompt's (an array);
  // null when not asked for or not sent.
  nlohmann::json first_logprobs = nullptr;
  nlohmann::json prompt_logprobs = nullptr;
};

class DecodeNode {
 public:
  DecodeNode(const Model* model, const DecodeNodeOptions& options);
  ~DecodeNode();

  absl::Status Start();
  void Stop();
  int http_port() const { return http_port_; }
  int metrics_port() const { return metrics_port_; }  // -1: on http_port
  int kv_port() const { return kv_port_; }

 private:
  // Reservations and their metadata slots (decode_node_reservations.cc).
  //
  // A request whose pages are reserved, as this node keeps it for the KV
  // receiver.
  struct PendingTransfer {
    KvReservation reservation;           // what the transfer must match
    std::vector<PageRef> block_table;    // the reserved pages
    int slot = -1;                       // its metadata slot
    TransferToken token{};               // the prefill node must present it
    bool claimed = false;                // a receiver took it
    bool cancelled = false;              // the generate handler gave up
    std::optional<absl::Status> result;  // the receiver's verdict, once done
  };
  // One reservation a receiver claimed (KvClaim).
  class ClaimedTransfer;
  // A finished transfer, handed from the receiver to the request's handler.
  struct MetadataSlot {
    bool in_use = false;  // held from reservation until consumed
    RequestId request;    // echoed by the receiver
    int first_token = -1;
    int computed_tokens = 0;
    std::vector<kv::Page> pages;  // staged K/V (none if written directly)
  };
  // A slot for a new reservation, held until ReleaseSlot; waits for one up
  // to `timeout`. Under metadata-slot-reuse: the next one round-robin,
  // owned or not.
  absl::StatusOr<int> AcquireSlot(absl::Duration timeout);
  void ReleaseSlot(int slot);
  // The reservation a Metadata frame names, claimed for this connection if
  // its transfer token matches and nobody claimed it; nullptr for every
  // refusal (unknown id, wrong token, taken), so a refusal reveals nothing.
  std::unique_ptr<KvClaim> Claim(const kv::Metadata& meta);
  // Leaves a claimed reservation's verified transfer in the request's
  // metadata slot, unless its handler gave up.
  absl::Status HandOver(PendingTransfer* pending, KvDelivery delivery);
  // Submits the request, waits for its pages and a metadata slot, and
  // registers the reservation (with a fresh transfer token) for the
  // receiver.
  absl::StatusOr<std::shared_ptr<PendingTransfer>> Reserve(
      const NodeRequest& request,
      const std::shared_ptr<RequestChannel>& channel);
  // Withdraws the reservation from the receiver and decides the transfer's
  // verdict from the prefill node's answer and the receiver's.
  absl::Status SettleTransfer(RequestId id, PendingTransfer& pending,
                              absl::Status transfer, bool prefill_gone);
  // Takes the transfer from its metadata slot (releasing the slot) and
  // installs the K/V; `transfer` is the verdict so far.
  absl::Status InstallFromSlot(RequestId id, const PendingTransfer& pending,
                               absl::Status transfer);
  // stale-transfer-ref: a failed transfer installed anyway, over the
  // reserved pages as found, from the first token the metadata slot kept
  // from its previous request; `transfer` (the failure) if even that fails.
  absl::Status InstallStale(RequestId id, const PendingTransfer& pending,
                            absl::Status transfer);
  std::shared_ptr<PendingTransfer> FindPending(RequestId id);

  // The node's life and its generate handler (decode_node.cc).
  void HandleGenerate(const http::Request& req, http::Response& res);
  // Asks a prefill node to fill the reservation; what it answered into
  // *answer (its outcome, when it answered with an error). kCancelled as
  // soon as `router_gone` says the router hung up (the client gave up): the
  // request is then aborted while its K/V may still be arriving.
  absl::Status RequestPrefill(const NodeRequest& request,
                              const PendingTransfer& pending,
                              const std::function<bool()>& router_gone,
                              PrefillAnswer* answer);
  // The KV port's gate, its pre-auth pool reserved for the addresses of
  // the prefill nodes.
  absl::Status StartKvGate();
  // The KV receiver's view of this node (KvReceiverHost).
  class ReceiverHost;

  // The KV port's accept loop (decode_node_kv_port.cc).
  void AcceptLoop();
  // One accepted KV connection, on its own thread: authenticated by
  // `deadline` (its place in `hold`), then its transfer.
  void ServeTransfer(std::unique_ptr<kv::FrameConnection> conn,
                     std::unique_ptr<KvAdmission::Hold> hold,
                     absl::Time deadline);

  // The NDJSON stream (decode_node_stream.cc): the request's lines as it
  // decodes.
  void StreamDecoding(http::Response& res,
                      std::shared_ptr<RequestChannel> channel, RequestId id,
                      int prompt_tokens, const PrefillAnswer& prefill);

  const Model* model_;
  DecodeNodeOptions options_;
  TraceBus trace_;  // before loop_: the engine emits into it
  std::unique_ptr<TraceFileWriter> trace_file_;
  EngineLoop loop_;
  NodeMetrics metrics_;
  std::unique_ptr<http::Server> metrics_server_;
  int metrics_port_ = -1;
  std::unique_ptr<http::Server> server_;
  std::unique_ptr<ReceiverHost> receiver_host_;
  std::unique_ptr<KvReceiver> receiver_;  // every KV connection's
  std::unique_ptr<KvGate> kv_gate_;       // admission up to authentication
  std::unique_ptr<kv::FrameListener> listener_;
  std::thread accept_thread_;
  int http_port_ = 0;
  int kv_port_ = 0;

  // Guards these, and the PendingTransfer fields claimed, cancelled and
  // result (which live behind shared pointers the analysis cannot follow).
  absl::Mutex mu_;
  absl::flat_hash_map<RequestId, std::shared_ptr<PendingTransfer>> pending_
      ABSL_GUARDED_BY(mu_);
  // Receiver threads, each with a flag it sets when done (reaped on accept).
  std::vector<std::pair<std::thread, std::shared_ptr<std::atomic<bool>>>>
      transfer_threads_ ABSL_GUARDED_BY(mu_);
  std::vector<MetadataSlot> slots_ ABSL_GUARDED_BY(mu_);
  uint64_t next_slot_ ABSL_GUARDED_BY(mu_) = 0;  // metadata-slot-reuse
  std::atomic<uint64_t> next_prefill_{0};
  HangupWatch hangups_;  // routers that give up while a prompt is prefilled
  // The request ids accepted lately: a resent one gets 409 and no work.
  AcceptedRequests accepted_;
};

}  // namespace kvcanary::engine

#endif  // KVCANARY_ENGINE_NODES_DECODE_NODE_H_
