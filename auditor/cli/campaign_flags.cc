#include "auditor/cli/campaign_flags.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "auditor/cli/shared_flags.h"
#include "auditor/detectors/registry.h"
#include "auditor/result/coverage.h"
#include "auditor/trace/follower.h"
#include "common/status_macros.h"
#include "common/tls.h"

ABSL_FLAG(std::string, tls_cert, "",
          "probe, sidecar: for nodes that require mutual TLS "
          "(kvcanary-engine --tls), the client certificate (PEM) to present "
          "when following their traces; with --tls-key and --tls-ca.");
ABSL_FLAG(std::string, tls_key, "", "The key of --tls-cert (PEM).");
ABSL_FLAG(std::string, tls_ca, "", "The nodes' CA (PEM), the only trusted.");
ABSL_FLAG(double, duration, 30, "Seconds a campaign probes at most.");
ABSL_FLAG(int, max_probes, 0,
          "Probes per campaign at most (0: no cap), the timed pairs after "
          "them not counted (docs/auditor.md).");
ABSL_FLAG(double, rate, 200,
          "Probes started per second at most; cut while the target answers "
          "429/503 (docs/targets.md, \"Rate limits and budgets\").");
ABSL_FLAG(int64_t, budget_tokens, 0,
          "The most tokens (prompt + completion, as the target's usage "
          "reports them, calibration included) the campaign may spend; 0: "
          "no limit. New probes stop once the next might pass it.");
ABSL_FLAG(std::string, floor, "20",
          "Coverage each detector must reach for every tenant before the "
          "verdict can be clean: a count for all, then detector=count "
          "overrides, e.g. 20,trace=5.");
ABSL_FLAG(std::string, require, "",
          "Detectors that must reach their floor for a clean verdict, "
          "comma-separated (default: every detector that applies).");
ABSL_FLAG(std::string, test_break, "",
          "Testing only: break these detectors (comma-separated) to show their "
          "positive controls fail.");

namespace kvcanary::auditor::cli {
namespace {

// --floor, --require and the hidden --test-break into `o`.
absl::Status DetectorOptionsFromFlags(CampaignOptions* o) {
  ASSIGN_OR_RETURN(o->floors, ParseFloors(absl::GetFlag(FLAGS_floor)));
  if (!o->floors.count("")) o->floors[""] = kDefaultFloor;
  auto required = ParseDetectorList(absl::GetFlag(FLAGS_require));
  if (!required.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--require: ", required.status().message()));
  }
  o->required = *std::move(required);
  auto broken = ParseDetectorList(absl::GetFlag(FLAGS_test_break));
  if (!broken.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--test-break: ", broken.status().message()));
  }
  o->broken = *std::move(broken);
  return absl::OkStatus();
}

// --duration, --max-probes, --concurrency, --rate, --budget-tokens and the
// limit's flags
// into `o`.
absl::Status LoadFromFlags(CampaignOptions* o) {
  for (const auto& [name, value] :
       {std::pair<const char*, double>{"--duration",
                                       absl::GetFlag(FLAGS_duration)},
        {"--rate", absl::GetFlag(FLAGS_rate)}}) {
    if (absl::Status s = CheckSeconds(name, value); !s.ok()) return s;
  }
  o->duration = absl::Seconds(absl::GetFlag(FLAGS_duration));
  o->max_probes = absl::GetFlag(FLAGS_max_probes);
  o->concurrency = absl::GetFlag(FLAGS_concurrency);
  o->max_rate = absl::GetFlag(FLAGS_rate);
  o->budget_tokens = absl::GetFlag(FLAGS_budget_tokens);
  o->max_prompt_tokens = absl::GetFlag(FLAGS_max_prompt_tokens);
  o->max_ladder_tokens = absl::GetFlag(FLAGS_max_ladder_tokens);
  if (o->max_probes < 0 || o->max_prompt_tokens < 0 || o->budget_tokens < 0 ||
      o->max_ladder_tokens < 16) {
    return absl::InvalidArgumentError(
        "--max-probes, --max-prompt-tokens and --budget-tokens must be >= 0, "
        "--max-ladder-tokens >= 16");
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<std::string> CampaignFlagNames() {
  return {"target",
          "tenants",
          "trace",
          "trace_token_file",
          "tls_cert",
          "tls_key",
          "tls_ca",
          "db",
          "duration",
          "max_probes",
          "concurrency",
          "rate",
          "budget_tokens",
          "key_file",
          "model",
          "api",
          "max_prompt_tokens",
          "timeout",
          "floor",
          "require",
          "max_consecutive_failures",
          "max_ladder_tokens",
          "json",
          "junit",
          "html",
          "max_incident_lines",
          "quiet",
          "kv_events"};
}

absl::StatusOr<CampaignOptions> CampaignOptionsFromFlags() {
  CampaignOptions o;
  ASSIGN_OR_RETURN(TargetOptions target,
                   TargetFromFlags(/*tenants_required=*/true));
  o.target = target.target;
  o.tenants = target.tenants;
  o.model = target.model;
  o.request_timeout = target.request_timeout;
  o.max_consecutive_failures = target.max_consecutive_failures;
  o.api = target.api;
  ASSIGN_OR_RETURN(o.trace_urls, TraceUrlsFromFlags());
  ASSIGN_OR_RETURN(o.trace_token,
                   ReadTraceToken(absl::GetFlag(FLAGS_trace_token_file)));
  o.trace_tls = {absl::GetFlag(FLAGS_tls_cert), absl::GetFlag(FLAGS_tls_key),
                 absl::GetFlag(FLAGS_tls_ca)};
  RETURN_IF_ERROR(tls::CheckFiles(o.trace_tls));
  ASSIGN_OR_RETURN(o.db_path, DbFromFlags());
  RETURN_IF_ERROR(LoadFromFlags(&o));
  RETURN_IF_ERROR(DetectorOptionsFromFlags(&o));
  o.progress = !absl::GetFlag(FLAGS_quiet);
  ASSIGN_OR_RETURN(o.secret_key, SecretKeyFromFlags());
  ASSIGN_OR_RETURN(o.kv_events, KvEventsFromFlags());
  return o;
}

}  // namespace kvcanary::auditor::cli
