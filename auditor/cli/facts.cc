// kvcanary-auditor facts: what the endpoint reveals about itself, and to
// whom (docs/facts.md).
#include "auditor/audits/facts/facts.h"

#include <string>
#include <utility>

#include "auditor/cli/commands.h"
#include "auditor/cli/shared_flags.h"
#include "auditor/reports/metrics.h"
#include "common/status_macros.h"

namespace kvcanary::auditor::cli {
namespace {

absl::StatusOr<FactsOptions> FactsOptionsFromFlags() {
  FactsOptions o;
  RETURN_IF_ERROR(CommandFromFlags(/*tenants_required=*/false, &o));
  ASSIGN_OR_RETURN(o.node_urls, TraceUrlsFromFlags());
  ASSIGN_OR_RETURN(o.secret_key, SecretKeyFromFlags());
  return o;
}

int RunFactsCommand(const CliParse&) {
  absl::StatusOr<FactsOptions> o = FactsOptionsFromFlags();
  if (!o.ok()) return Fail(o.status());
  AuditorMetrics metrics;
  return Conclude(RunFacts(*o, &metrics), metrics);
}

const CommandRegistration kFacts(
    AuditorCommands(),
    {40,
     {"facts",
      "What the endpoint reveals about itself, field by field, and whether "
      "any endpoint shows one tenant's data to another or to no key.",
      WithReportFlags({"target", "tenants", "trace", "model", "api", "timeout",
                       "key_file"}),
      {}},
     RunFactsCommand});

}  // namespace
}  // namespace kvcanary::auditor::cli
