#include "auditor/calibration/latency_fit.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace kvcanary::auditor {

LatencyModel FitLatency(const std::vector<std::pair<int, double>>& samples) {
  LatencyModel m;
  std::map<int, std::vector<double>> by_length;
  for (const auto& [tokens, ms] : samples) by_length[tokens].push_back(ms);
  // (tokens, fastest ms): interference from other work only ever adds
  // time, so the fastest first token of a length is its prefill.
  std::vector<std::pair<double, double>> points;
  for (auto& [tokens, v] : by_length) {
    std::sort(v.begin(), v.end());
    points.push_back({static_cast<double>(tokens), v.front()});
  }
  m.lengths = static_cast<int>(points.size());
  if (!by_length.empty()) m.base_ms = by_length.begin()->second.front();
  if (points.size() < 3) {
    m.failure = absl::StrCat("latency calibrated at ", points.size(),
                             " prompt lengths; at least 3 are needed");
    return m;
  }
  double sx = 0, sy = 0;
  for (const auto& [x, y] : points) {
    sx += x;
    sy += y;
  }
  const double n = static_cast<double>(points.size());
  const double mx = sx / n, my = sy / n;
  double sxx = 0, sxy = 0, syy = 0;
  for (const auto& [x, y] : points) {
    sxx += (x - mx) * (x - mx);
    sxy += (x - mx) * (y - my);
    syy += (y - my) * (y - my);
  }
  if (sxx <= 0) {
    m.failure = "latency calibration prompts all had the same length";
    return m;
  }
  m.per_token_ms = sxy / sxx;
  m.intercept_ms = my - m.per_token_ms * mx;
  double ss_res = 0;
  for (const auto& [x, y] : points) {
    const double e = y - (m.intercept_ms + m.per_token_ms * x);
    ss_res += e * e;
  }
  m.r2 = syy > 0 ? 1 - ss_res / syy : 0;
  const double longest = points.back().first;
  if (m.per_token_ms <= 0) {
    m.failure = absl::StrFormat(
        "first-token time does not grow with prompt length (slope %.4g ms per "
        "token): a cache or a fixed delay, not a measurable prefill",
        m.per_token_ms);
  } else if (m.r2 < 0.8) {
    m.failure = absl::StrFormat(
        "first-token time fits prompt length poorly (R² %.2f < 0.8)", m.r2);
  } else if (m.per_token_ms * longest < 1.0) {
    m.failure = absl::StrFormat(
        "the prefill of %d tokens costs %.3f ms: too little to judge against "
        "timing noise",
        static_cast<int>(longest), m.per_token_ms * longest);
  } else {
    m.calibrated = true;
  }
  return m;
}

}  // namespace kvcanary::auditor
