// One campaign of kvcanary-bench-detect: the real `kvcanary-auditor` (a
// process of its own, `probe` or `cache-audit --salts`) against an `up`,
// and what it found: its verdict and each detector's first finding.
#ifndef KVCANARY_BENCH_DETECT_CAMPAIGN_H_
#define KVCANARY_BENCH_DETECT_CAMPAIGN_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include "bench/detect_matrix.h"
#include "bench/detect_up.h"

namespace kvcanary::bench {

// One campaign's outcome.
struct Campaign {
  std::string verdict;  // clean, findings, inconclusive, error
  double seconds = 0;
  // detector -> (probes to its first finding, seconds to it)
  std::map<std::string, std::pair<int64_t, double>> first;
};

// Runs the auditor in `mode` (blackbox, trace, kv_events, salts) against
// `up` with `seed` as its marker key, reads its JSON report and finding
// rows, and removes its files from `dir`.
Campaign RunCampaign(const Config& config, const Up& up,
                     const std::string& mode, int seed, const std::string& dir);

}  // namespace kvcanary::bench

#endif  // KVCANARY_BENCH_DETECT_CAMPAIGN_H_
