// Campaigns summarised: the counts, the rates with their 95% Wilson
// intervals, and the median probes and seconds to each detector's first
// finding.
#include "bench/detect_score.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/stats.h"

namespace kvcanary::bench {
namespace {

using json = nlohmann::json;

template <typename T>
T Median(std::vector<T> v) {
  if (v.empty()) return T{};
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

}  // namespace

json Summarise(const Config& c, const std::string& mode,
               const std::vector<Campaign>& runs) {
  int any = 0, inconclusive = 0, errors = 0;
  std::map<std::string, std::vector<int64_t>> probes;
  std::map<std::string, std::vector<double>> seconds;
  std::map<std::string, int> caught;
  for (const Campaign& r : runs) {
    any += !r.first.empty();
    inconclusive += r.verdict == "inconclusive";
    errors += r.verdict == "error";
    for (const auto& [d, first] : r.first) {
      ++caught[d];
      if (first.first >= 0) probes[d].push_back(first.first);
      seconds[d].push_back(first.second);
    }
  }
  const int n = static_cast<int>(runs.size());
  json detectors = json::object();
  for (const auto& [d, k] : caught) {
    const auto [lo, hi] = Wilson95(k, n);
    detectors[d] = {
        {"campaigns_with_finding", k},
        {"rate", static_cast<double>(k) / n},
        {"wilson95", {lo, hi}},
        {"median_probes_to_first",
         probes[d].empty() ? json(nullptr) : json(Median(probes[d]))},
        {"median_seconds_to_first", Median(seconds[d])}};
  }
  const auto [lo, hi] = Wilson95(any, n);
  return {{"config", c.name},
          {"mode", mode},
          {"healthy", c.healthy},
          {"swinging_load", c.swinging_load},
          {"campaigns", n},
          {"with_any_finding", any},
          {"any_rate", n ? static_cast<double>(any) / n : 0},
          {"any_wilson95", {lo, hi}},
          {"inconclusive", inconclusive},
          {"errors", errors},
          {"detectors", detectors}};
}

}  // namespace kvcanary::bench
