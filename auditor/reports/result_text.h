// What `kvcanary-auditor` prints when a command ends: the verdict line, the
// command's own details and failed checks, the detector table, the tokens
// spent per tenant, trace statistics, incidents, the reasons behind the verdict
// and the error beside it, if the run stopped before its end.
#ifndef KVCANARY_AUDITOR_REPORTS_RESULT_TEXT_H_
#define KVCANARY_AUDITOR_REPORTS_RESULT_TEXT_H_

#include <string>
#include <vector>

#include "auditor/result/coverage.h"
#include "auditor/result/result.h"

namespace kvcanary::auditor {

// The detector table: state, floor and coverage side by side, with each
// detector's reason and notes under it.
std::string DetectorTable(const std::vector<DetectorCoverage>& detectors);

// The tokens spent per tenant (prompt, cached, completion), the 429/503
// answers and retries, and the budget; "" where nothing was spent.
std::string SpendText(const CampaignResult& r);

// The whole text for `r`; at most `max_lines` incident lines and as many
// check lines (the rest are in the reports).
std::string ResultText(const CampaignResult& r, int max_lines);

}  // namespace kvcanary::auditor

#endif  // KVCANARY_AUDITOR_REPORTS_RESULT_TEXT_H_
