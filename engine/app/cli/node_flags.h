// The flags of the nodes, which serve (one node) and up (all three) both
// read: where to listen, the tenants and secrets, mutual TLS, the engine's
// limits, the access log and the KV cache event stream, declared once
// (node_flags.cc), into ServeOptions (engine/nodes/serve.h).
#ifndef KVCANARY_ENGINE_APP_CLI_NODE_FLAGS_H_
#define KVCANARY_ENGINE_APP_CLI_NODE_FLAGS_H_

#include <string>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/status/status.h"
#include "engine/nodes/serve.h"

// up passes these to both nodes as given.
ABSL_DECLARE_FLAG(int, num_pages);
ABSL_DECLARE_FLAG(int, max_waiting);
ABSL_DECLARE_FLAG(int, max_prompt_tokens);
ABSL_DECLARE_FLAG(int, transfer_timeout_ms);
ABSL_DECLARE_FLAG(int, metadata_slots);
ABSL_DECLARE_FLAG(uint32_t, trace_read_sample);
ABSL_DECLARE_FLAG(int, test_kv_receive_delay_ms);
ABSL_DECLARE_FLAG(int64_t, test_kv_receive_bytes_per_s);
ABSL_DECLARE_FLAG(std::string, test_transfer_damage);

namespace kvcanary::engine::cli {

// The flags a prefill or decode node reads; `up` passes them to both nodes.
std::vector<std::string> NodeFlagNames();

// The access log's flags: serve --role=router and up.
std::vector<std::string> AccessLogFlagNames();

// The KV cache event stream's flags: serve --role=prefill and up.
std::vector<std::string> KvEventsFlagNames();

// Every flag serve and up share into `o`, checked before any process
// starts: --port (`default_port` when it is -1), --host, the tenants and
// secrets, TLS, the nodes' and the access log's flags, the KV event
// stream's. Leaves the fields only serve's flags set (role, its peers,
// --metrics-port, ...) as they are, and checks o->max_in_flight with
// --max-waiting.
absl::Status NodeOptionsFromFlags(int default_port, ServeOptions* o);

}  // namespace kvcanary::engine::cli

#endif  // KVCANARY_ENGINE_APP_CLI_NODE_FLAGS_H_
