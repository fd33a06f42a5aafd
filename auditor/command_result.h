// The end every auditor command shares (probe, accept, facts, cache-audit,
// forensics): findings joined and grouped into incidents, the `incident`
// rows and `campaign_end` appended to the evidence, and the metrics of the
// verdict. One place, so every command's verdict is recorded the same way.
#ifndef KVCANARY_AUDITOR_COMMAND_RESULT_H_
#define KVCANARY_AUDITOR_COMMAND_RESULT_H_

#include "auditor/campaign.h"
#include "auditor/evidence_log.h"
#include "auditor/metrics.h"
#include "nlohmann/json.hpp"

namespace kvcanary::auditor {

// REQUIRES: r->verdict and r->reasons decided, r->ended_us set. `log` may
// be null (the store could not be opened: nothing to append). `end` holds
// the command's own fields for `campaign_end` (counts, timings). A
// `campaign_end` that cannot be written turns the verdict into error: a
// result without its evidence vouches for nothing.
void SealResult(CampaignResult* r, EvidenceLog* log, nlohmann::json end,
                AuditorMetrics* metrics);

}  // namespace kvcanary::auditor

#endif  // KVCANARY_AUDITOR_COMMAND_RESULT_H_
