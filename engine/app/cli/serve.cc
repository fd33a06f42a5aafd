// kvcanary-engine serve: one node, --role=router, prefill or decode, in
// this process (engine/nodes/serve.h).
#include "engine/nodes/serve.h"

#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "common/status_macros.h"
#include "engine/app/cli/commands.h"
#include "engine/app/cli/node_flags.h"
#include "engine/app/cli/shared_flags.h"

ABSL_FLAG(std::string, role, "", "The node to run: router, prefill or decode.");
ABSL_FLAG(int, kv_port, 0,
          "Decode role: port for incoming KV transfers (0: any free port).");
ABSL_FLAG(int, kv_listen_fd, -1,
          "Decode role: an inherited listening socket to take KV transfers "
          "on instead of binding --kv_port (set by up); -1: none.");
ABSL_FLAG(std::vector<std::string>, prefill, {},
          "Router and decode roles: base URLs of the prefill nodes, "
          "comma-separated (the decode node calls them; no request names "
          "an address).");
ABSL_FLAG(std::vector<std::string>, decode, {},
          "Router role: base URLs of the decode nodes, comma-separated.");
ABSL_FLAG(std::vector<std::string>, decode_kv, {},
          "Prefill role: the decode nodes' KV ports it may send to, as "
          "NAME=HOST:PORT, comma-separated.");
ABSL_FLAG(std::string, name, "decode-0",
          "Decode role: this node's name in the prefill nodes' --decode-kv.");
ABSL_FLAG(int, metrics_port, -1,
          "serve, every role: serve /metrics (and /health) on this port of "
          "its own (0: any free port; the ready line names it), off the API "
          "listener; -1: on the node's HTTP port.");
ABSL_FLAG(int, max_in_flight, 256,
          "Router role: requests in flight before it answers 429.");
ABSL_FLAG(std::string, trace_file, "",
          "Prefill and decode roles: also append the trace stream to this "
          "file.");
ABSL_FLAG(std::string, up_status_file, "",
          "Router role: the status file of the `up` that started it "
          "(engine/supervisor_status.h), served in /health and /metrics; up "
          "sets it.");

namespace kvcanary::engine::cli {
namespace {

// The role, its peers and what only serve's flags set into `o`.
absl::Status RoleFlags(ServeOptions* o) {
  o->role = absl::GetFlag(FLAGS_role);
  o->kv_port = absl::GetFlag(FLAGS_kv_port);
  o->kv_listen_fd = absl::GetFlag(FLAGS_kv_listen_fd);
  o->prefill_urls = absl::GetFlag(FLAGS_prefill);
  o->decode_urls = absl::GetFlag(FLAGS_decode);
  o->decode_kv = absl::GetFlag(FLAGS_decode_kv);
  o->node_name = absl::GetFlag(FLAGS_name);
  o->metrics_port = absl::GetFlag(FLAGS_metrics_port);
  o->max_in_flight = absl::GetFlag(FLAGS_max_in_flight);
  o->trace.file = absl::GetFlag(FLAGS_trace_file);
  o->up_status_file = absl::GetFlag(FLAGS_up_status_file);
  if (o->metrics_port < -1 || o->metrics_port > 65535) {
    return absl::InvalidArgumentError("--metrics-port must be in [-1, 65535]");
  }
  return absl::OkStatus();
}

absl::Status Serve() {
  ServeOptions o;
  RETURN_IF_ERROR(RoleFlags(&o));
  RETURN_IF_ERROR(NodeOptionsFromFlags(/*default_port=*/0, &o));
  return RunServe(o);
}

// serve's own flags (every role's), then the access log's, the nodes' and
// the KV event stream's.
std::vector<std::string> ServeFlags() {
  std::vector<std::string> serve = {"role",
                                    "host",
                                    "port",
                                    "kv_port",
                                    "kv_listen_fd",
                                    "tenants",
                                    "prefill",
                                    "decode",
                                    "decode_kv",
                                    "name",
                                    "internal_secret_file",
                                    "trace_token_file",
                                    "max_trace_readers",
                                    "tls_cert",
                                    "tls_key",
                                    "tls_ca",
                                    "metrics_port",
                                    "max_in_flight",
                                    "trace_file",
                                    "up_status_file"};
  for (const std::vector<std::string>& group :
       {AccessLogFlagNames(), NodeFlagNames(), KvEventsFlagNames()}) {
    serve.insert(serve.end(), group.begin(), group.end());
  }
  return serve;
}

const CommandRegistration kServe(
    EngineCommands(),
    {40,
     {"serve",
      "Runs one node, --role=router, prefill or decode, in this process.",
      ServeFlags(),
      {}},
     [](const CliParse&) { return ExitCode("serve", Serve()); }});

}  // namespace
}  // namespace kvcanary::engine::cli
