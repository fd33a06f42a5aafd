// The flags of a campaign, which probe and sidecar both run: how hard to
// probe, the detectors' floors and requirements, and the nodes' TLS, into
// CampaignOptions (auditor/campaign/campaign.h).
#ifndef KVCANARY_AUDITOR_CLI_CAMPAIGN_FLAGS_H_
#define KVCANARY_AUDITOR_CLI_CAMPAIGN_FLAGS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "auditor/campaign/campaign.h"

namespace kvcanary::auditor::cli {

// The flags probe and sidecar both read, in their --help's order: the
// target and how hard to probe it, then the probes, the verdict and the
// reports.
std::vector<std::string> CampaignFlagNames();

// Every flag of CampaignFlagNames() into options, checked.
absl::StatusOr<CampaignOptions> CampaignOptionsFromFlags();

}  // namespace kvcanary::auditor::cli

#endif  // KVCANARY_AUDITOR_CLI_CAMPAIGN_FLAGS_H_
