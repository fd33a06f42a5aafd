// Process-level entry points of `kvcanary-engine serve` and
// `kvcanary-engine up`: start a node role in this process, or start the
// whole topology (router + prefill + decode) as separate processes.
#ifndef KVCANARY_ENGINE_NODES_SERVE_H_
#define KVCANARY_ENGINE_NODES_SERVE_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/tls.h"
#include "engine/core/engine.h"
#include "engine/core/faults.h"
#include "engine/core/trace_bus.h"
#include "engine/nodes/access_log.h"
#include "engine/nodes/openai_request.h"
#include "engine/nodes/prefill_node.h"
#include "engine/transfer/kv_admission.h"
#include "engine/transfer/kv_sender.h"

namespace kvcanary::engine {

struct ServeOptions {
  std::string role;  // router, prefill or decode
  std::string host = "127.0.0.1";
  int port = 0;
  int kv_port = 0;             // decode
  int kv_listen_fd = -1;       // decode: an inherited KV listener (up)
  std::string model_path;      // llama2.c or GGUF; empty: the default
  std::string tokenizer_path;  // empty: the GGUF's own (or the default's)
  int context = 0;             // 0: the model's (engine/model_loader.h)
  std::string tenants_path;    // router
  // router: the model's name in /v1/models and requests' "model"; "":
  // DefaultServedModelName(model_path).
  std::string served_model_name;
  std::vector<std::string> prefill_urls;  // router
  std::vector<std::string> decode_urls;   // router
  std::vector<std::string> decode_kv;     // prefill: NAME=HOST:PORT
  std::string node_name = "decode-0";     // decode
  std::string internal_secret_file;       // every role (up: generated if "")
  std::string trace_token_file;           // nodes (up: generated if "")
  int max_trace_readers = 8;              // nodes
  tls::Files tls;         // every role: mutual TLS between nodes ({}: plain)
  bool up_tls = false;    // up: mutual TLS (certificates generated if no files)
  int metrics_port = -1;  // every role: -1 = on its port
  int max_prompt_tokens = 0;  // nodes; 0 = role default
  int max_waiting = 256;
  EngineOptions engine;
  TransferDamage damage = TransferDamage::kNone;        // prefill, tests only
  absl::Duration test_receive_delay;                    // decode, tests only
  int64_t test_receive_bytes_per_s = 0;                 // decode, tests only
  absl::Duration transfer_timeout = absl::Seconds(30);  // nodes
  int metadata_slots = 16;                              // decode
  FaultSet faults;                                      // every role
  NodeTraceOptions trace;                               // nodes
  int max_in_flight = 256;                              // router
  int node_pool_idle = 32;                              // router
  std::string tenant_header;                            // router
  ChatTemplate chat_template = ChatTemplate::kPlain;    // router
  AccessLogOptions access_log;                          // router
  std::string up_status_file;  // router: the status file of the `up` above
  // prefill and up: the KV cache event stream (docs/nodes.md, "KV cache
  // events"), tcp://HOST:PORT; "": none.
  std::string kv_events;
  std::string kv_events_replay;  // "": kv_events' host, any port; "off"
  std::string kv_events_topic;
  int kv_events_buffer = 10000;       // batches kept for replay
  int test_kv_events_lose_every = 0;  // tests only: lose every Nth batch
  // What operators tune (docs/nodes.md, "Tuning"): every role's HTTP
  // listener's share of unoccupied connections per address; the decode
  // node's KV port (caps on unauthenticated connections, the pool reserved
  // for the prefill nodes, idle sessions); the prefill node's tries of a
  // transfer refused before its claim.
  int http_max_unoccupied_per_address = 32;
  KvAdmissionOptions kv_admission;
  int kv_send_attempts = KvSender::kDefaultSendAttempts;
};

// The name a model is served under without --served-model-name: the model
// file's name without its directory and extension ("stories260K" for
// ../shared/models/stories260K.bin), or "kvcanary-synthetic" for the
// embedded model (`model_path` "").
std::string DefaultServedModelName(const std::string& model_path);

// The publisher options the kv_events flags ask for (the password and
// block size are the node's). kInvalidArgument for a bad endpoint or
// buffer, or without a prefix cache. REQUIRES: !options.kv_events.empty().
absl::StatusOr<KvEventPublisherOptions> KvEventsOptionsFor(
    const ServeOptions& options);

// Starts the role, prints "ready role=R http=PORT [metrics=PORT] [kv=PORT]
// [kv_events=tcp://H:P [kv_events_replay=tcp://H:P]]" on stdout, and
// serves until SIGINT or SIGTERM; then stops cleanly.
absl::Status RunServe(const ServeOptions& options);

// Starts prefill, decode, then router as child processes of this binary
// (`serve --role=...`, with `node_args` passed to the two nodes, and
// options.faults and options.access_log to the router), prints
// "router http://...", "prefill http://...", "decode http://... kv=PORT",
// "trace-token-file PATH" and, with kv_events, "kv-events tcp://H:P
// replay=tcp://H:P|off" once all are ready, restarts any that dies on the same
// ports (engine/supervisor.h: the others keep serving; one line per exit and
// restart on stdout; the state in a status file the router serves), and stops
// them all on SIGINT/SIGTERM. Fails only if the first start of a role fails.
// `kvcanary-engine up <args>` started from this binary as a child process,
// with the URLs it printed.
struct UpProcess {
  pid_t pid = -1;
  std::string router, prefill, decode;
  std::string trace_token_file;  // GET /v1/trace's admin token
};
absl::StatusOr<UpProcess> StartUpProcess(const std::vector<std::string>& args);
// SIGTERM, then waits for it (and so for its nodes).
void StopUpProcess(UpProcess& up);

absl::Status RunUp(const ServeOptions& options,
                   const std::vector<std::string>& node_args);

}  // namespace kvcanary::engine

#endif  // KVCANARY_ENGINE_NODES_SERVE_H_
