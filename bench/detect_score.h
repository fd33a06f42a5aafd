// The score of kvcanary-bench-detect's campaigns: for a configuration and
// mode, the share with any finding (the detection rate, or on a healthy
// configuration the false-alarm rate) with its 95% Wilson interval, and
// each detector's rate with its median probes and seconds to the first
// finding.
#ifndef KVCANARY_BENCH_DETECT_SCORE_H_
#define KVCANARY_BENCH_DETECT_SCORE_H_

#include <string>
#include <vector>

#include "bench/detect_campaign.h"
#include "bench/detect_matrix.h"
#include "nlohmann/json.hpp"

namespace kvcanary::bench {

// A configuration × mode's campaigns, summarised: the row of the JSON
// document (config, mode, campaigns, with_any_finding, any_rate,
// any_wilson95, inconclusive, errors, detectors).
nlohmann::json Summarise(const Config& c, const std::string& mode,
                         const std::vector<Campaign>& runs);

}  // namespace kvcanary::bench

#endif  // KVCANARY_BENCH_DETECT_SCORE_H_
