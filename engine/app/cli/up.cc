// kvcanary-engine up: a router, a prefill node and a decode node as
// processes on this machine, supervised until Ctrl-C (engine/nodes/serve.h).
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/app/cli/commands.h"
#include "engine/app/cli/node_flags.h"
#include "engine/app/cli/shared_flags.h"
#include "engine/nodes/serve.h"

ABSL_FLAG(bool, tls, false,
          "up: run the internal plane over mutual TLS, with a fresh CA and "
          "node certificate in up's private directory unless --tls-cert, "
          "--tls-key and --tls-ca name the deployment's own.");

namespace kvcanary::engine::cli {
namespace {

// The node flags, as given, for both nodes' command lines.
std::vector<std::string> NodeArgs(const ServeOptions& o) {
  return {
      absl::StrCat("--watermark=", absl::GetFlag(FLAGS_watermark)),
      absl::StrCat("--scrub=", absl::GetFlag(FLAGS_scrub)),
      absl::StrCat("--numerics=", NumericsName(o.engine.numerics)),
      absl::StrCat("--prefix_cache=",
                   PrefixCacheModeName(o.engine.prefix_cache)),
      absl::StrCat("--cache_salt=", CacheSaltModeName(o.engine.cache_salt)),
      absl::StrCat("--host_tier_pages=", o.engine.host_tier_pages),
      absl::StrCat("--fault=", absl::GetFlag(FLAGS_fault)),
      absl::StrCat("--sample_wrong_row_steps=",
                   o.engine.sample_wrong_row_steps),
      absl::StrCat("--trace_read_sample=",
                   absl::GetFlag(FLAGS_trace_read_sample)),
      absl::StrCat("--threads=", absl::GetFlag(FLAGS_threads)),
      absl::StrCat("--page_tokens=", absl::GetFlag(FLAGS_page_tokens)),
      absl::StrCat("--num_pages=", absl::GetFlag(FLAGS_num_pages)),
      absl::StrCat("--free_list=", FreeListOrderName(o.engine.free_list)),
      absl::StrCat("--max_waiting=", absl::GetFlag(FLAGS_max_waiting)),
      absl::StrCat("--max_prompt_tokens=",
                   absl::GetFlag(FLAGS_max_prompt_tokens)),
      absl::StrCat("--test_kv_receive_delay_ms=",
                   absl::GetFlag(FLAGS_test_kv_receive_delay_ms)),
      absl::StrCat("--test_kv_receive_bytes_per_s=",
                   absl::GetFlag(FLAGS_test_kv_receive_bytes_per_s)),
      absl::StrCat("--transfer_timeout_ms=",
                   absl::GetFlag(FLAGS_transfer_timeout_ms)),
      absl::StrCat("--metadata_slots=", absl::GetFlag(FLAGS_metadata_slots)),
      absl::StrCat("--test_transfer_damage=",
                   absl::GetFlag(FLAGS_test_transfer_damage)),
      absl::StrCat("--http_max_unoccupied_per_address=",
                   o.http_max_unoccupied_per_address),
      absl::StrCat("--kv_max_unauthenticated=",
                   o.kv_admission.max_unauthenticated),
      absl::StrCat("--kv_max_unauthenticated_per_peer=",
                   o.kv_admission.max_unauthenticated_per_peer),
      absl::StrCat("--kv_reserved_unauthenticated=",
                   o.kv_admission.reserved_unauthenticated),
      absl::StrCat("--kv_max_idle_sessions=", o.kv_admission.max_idle_sessions),
      absl::StrCat("--kv_send_attempts=", o.kv_send_attempts)};
}

absl::Status Up() {
  ServeOptions o;
  RETURN_IF_ERROR(NodeOptionsFromFlags(/*default_port=*/8000, &o));
  o.up_tls = absl::GetFlag(FLAGS_tls) || !o.tls.empty();
  if (o.tenants_path.empty())
    return absl::InvalidArgumentError("up needs --tenants");
  return RunUp(o, NodeArgs(o));
}

// up's own flags, then the nodes', the access log's and the KV event
// stream's.
std::vector<std::string> UpFlags() {
  std::vector<std::string> up = {"host",
                                 "port",
                                 "tenants",
                                 "internal_secret_file",
                                 "trace_token_file",
                                 "max_trace_readers",
                                 "tls",
                                 "tls_cert",
                                 "tls_key",
                                 "tls_ca"};
  for (const std::vector<std::string>& group :
       {NodeFlagNames(), AccessLogFlagNames(), KvEventsFlagNames()}) {
    up.insert(up.end(), group.begin(), group.end());
  }
  return up;
}

const CommandRegistration kUp(
    EngineCommands(),
    {30,
     {"up",
      "Starts a router, a prefill node and a decode node as processes on "
      "this machine, prints their URLs, and serves until Ctrl-C.",
      UpFlags(),
      {}},
     [](const CliParse&) { return ExitCode("up", Up()); }});

}  // namespace
}  // namespace kvcanary::engine::cli
