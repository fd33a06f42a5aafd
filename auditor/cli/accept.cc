// kvcanary-auditor accept: the long-context acceptance sweep
// (docs/accept.md).
#include "auditor/audits/accept/accept.h"

#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "auditor/cli/commands.h"
#include "auditor/cli/shared_flags.h"
#include "auditor/reports/metrics.h"

ABSL_FLAG(int, page_tokens, 16,
          "accept: the page size whose boundaries (each ±1) the sweep "
          "covers.");
ABSL_FLAG(int, load, 0,
          "accept: tenants (after the first) sending traffic during the "
          "under-load pass (0: no such pass).");
ABSL_FLAG(int, repeats, 3,
          "accept: runs alone per length: echo must come back this many times "
          "of this many; golden must give one answer.");
ABSL_FLAG(int, max_lengths, 400,
          "accept: prompt lengths the sweep may plan at most; a plan over it "
          "sends nothing and is inconclusive (raise it, or --page-tokens).");

namespace kvcanary::auditor::cli {
namespace {

absl::StatusOr<AcceptOptions> AcceptOptionsFromFlags() {
  AcceptOptions o;
  if (absl::Status s = CommandFromFlags(/*tenants_required=*/true, &o);
      !s.ok()) {
    return s;
  }
  o.page_tokens = absl::GetFlag(FLAGS_page_tokens);
  o.max_prompt_tokens = absl::GetFlag(FLAGS_max_prompt_tokens);
  o.max_ladder_tokens = absl::GetFlag(FLAGS_max_ladder_tokens);
  o.load = absl::GetFlag(FLAGS_load);
  o.repeats = absl::GetFlag(FLAGS_repeats);
  o.concurrency = absl::GetFlag(FLAGS_concurrency);
  o.max_lengths = absl::GetFlag(FLAGS_max_lengths);
  o.seed = absl::GetFlag(FLAGS_seed);
  if (o.max_prompt_tokens < 0 || o.max_ladder_tokens < 16) {
    return absl::InvalidArgumentError(
        "--max-prompt-tokens must be >= 0, --max-ladder-tokens >= 16");
  }
  if (o.load >= static_cast<int>(o.target.tenants.size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--load=", o.load, " needs ", o.load + 1,
        " tenants in --tenants (the first sweeps, the others load)"));
  }
  if (absl::Status s = ValidateAcceptOptions(o); !s.ok()) return s;
  return o;
}

int RunAcceptCommand(const CliParse&) {
  absl::StatusOr<AcceptOptions> o = AcceptOptionsFromFlags();
  if (!o.ok()) return Fail(o.status());
  AuditorMetrics metrics;
  return Conclude(RunAccept(*o, &metrics), metrics);
}

const CommandRegistration kAccept(
    AuditorCommands(),
    {30,
     {"accept",
      "The long-context acceptance sweep: echo, golden, token counts and "
      "refusals at every page boundary up to the input limit and past it.",
      WithReportFlags({"target", "tenants", "model", "api", "timeout",
                       "max_prompt_tokens", "max_ladder_tokens",
                       "max_consecutive_failures", "page_tokens", "load",
                       "repeats", "concurrency", "max_lengths", "seed"}),
      {}},
     RunAcceptCommand});

}  // namespace
}  // namespace kvcanary::auditor::cli
