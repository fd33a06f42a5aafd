// kvcanary-auditor probe: one campaign against --target, its verdict,
// coverage and incidents (docs/auditor.md).
#include <string>
#include <vector>

#include "auditor/campaign/campaign.h"
#include "auditor/cli/campaign_flags.h"
#include "auditor/cli/commands.h"
#include "auditor/cli/shared_flags.h"
#include "auditor/reports/metrics.h"

namespace kvcanary::auditor::cli {
namespace {

int RunProbe(const CliParse&) {
  absl::StatusOr<CampaignOptions> o = CampaignOptionsFromFlags();
  if (!o.ok()) return Fail(o.status());
  AuditorMetrics metrics;
  return Conclude(RunCampaign(*o, &metrics), metrics);
}

std::vector<std::string> ProbeFlags() {
  std::vector<std::string> flags = CampaignFlagNames();
  flags.push_back("metrics_file");
  return flags;
}

const CommandRegistration kProbe(
    AuditorCommands(),
    {10,
     {"probe",
      "Runs one campaign against --target and prints its verdict, coverage "
      "and incidents.",
      ProbeFlags(),
      {},
      {"test_break"}},
     RunProbe});

}  // namespace
}  // namespace kvcanary::auditor::cli
