// The start and the end every auditor command shares (probe, accept, facts,
// cache-audit, forensics): findings joined and grouped into incidents, the
// `incident` rows and `campaign_end` appended to the evidence, the tokens
// spent, and the metrics of the verdict and the spend. One place, so every
// command's verdict is recorded the same way.
#ifndef KVCANARY_AUDITOR_CAMPAIGN_COMMAND_RESULT_H_
#define KVCANARY_AUDITOR_CAMPAIGN_COMMAND_RESULT_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "auditor/evidence/log.h"
#include "auditor/reports/metrics.h"
#include "auditor/result/result.h"
#include "auditor/target/spend.h"
#include "auditor/target/tenants.h"
#include "nlohmann/json.hpp"

namespace kvcanary::auditor {

// The start: the command's name, a new campaign id, the start time, the
// target (a URL, or forensics' log path), the tenants, the database; and
// the metrics told which detectors this command has.
void StartResult(CampaignResult* r, const std::string& command,
                 const std::string& target,
                 const std::vector<AuditTenant>& tenants,
                 const std::string& db_path,
                 const std::vector<std::string>& detectors,
                 AuditorMetrics* metrics);

// The verdict, reasons and error of `r` by DecideVerdict
// (auditor/result/coverage.h): from `run` (how the command's steps
// ended), r->audit_started, r->findings (every finding the command proved,
// kept whatever the error) and r->detectors, with `problems` beside the
// detectors' gaps.
void DecideResult(CampaignResult* r, const absl::Status& run,
                  const std::vector<std::string>& problems);

// What `spend` says into `r` (before DecideResult, which names a budget
// reached where the verdict is inconclusive).
void NoteSpend(CampaignResult* r, const SpendLedger& spend);

// REQUIRES: DecideResult done, r->ended_us set. `log` may be null (the
// store could not be opened: nothing to append). `end` holds the command's
// own fields for `campaign_end` (counts, timings). A `campaign_end` that
// cannot be written is an error of the result (a result without its
// evidence vouches for nothing), decided by the same rule: the verdict
// becomes error unless findings outrank it.
void SealResult(CampaignResult* r, EvidenceLog* log, nlohmann::json end,
                AuditorMetrics* metrics);

}  // namespace kvcanary::auditor

#endif  // KVCANARY_AUDITOR_CAMPAIGN_COMMAND_RESULT_H_
