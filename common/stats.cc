#include "common/stats.h"

#include <algorithm>
#include <cmath>

#include "common/check.h"

namespace kvcanary {

double LogChoose(int n, int k) {
  return std::lgamma(n + 1.0) - std::lgamma(k + 1.0) - std::lgamma(n - k + 1.0);
}

double BinomialTail(int n, double share, int k) {
  if (k <= 0) return 1;
  if (k > n || share <= 0) return 0;
  if (share >= 1) return 1;
  double p = 0;
  for (int x = k; x <= n; ++x) {
    p += std::exp(LogChoose(n, x) + x * std::log(share) +
                  (n - x) * std::log1p(-share));
  }
  return std::min(1.0, p);
}

double FisherExactGreater(int a_failed, int a_total, int b_failed,
                          int b_total) {
  CHECK(a_failed >= 0 && a_failed <= a_total && b_failed >= 0 &&
        b_failed <= b_total);
  if (a_total == 0 || b_total == 0) return 1;
  // Hypergeometric: a_total drawn from N of which K failed.
  const int total = a_total + b_total, failed = a_failed + b_failed;
  const double all = LogChoose(total, a_total);
  double p = 0;
  for (int x = a_failed; x <= std::min(failed, a_total); ++x) {
    if (a_total - x > total - failed) continue;
    p += std::exp(LogChoose(failed, x) +
                  LogChoose(total - failed, a_total - x) - all);
  }
  return std::clamp(p, 0.0, 1.0);
}

std::pair<double, double> Wilson95(int successes, int n) {
  if (n <= 0) return {0.0, 1.0};
  constexpr double z = 1.959963984540054;
  const double p = static_cast<double>(successes) / n;
  const double z2n = z * z / n;
  const double centre = (p + z2n / 2) / (1 + z2n);
  const double half =
      z * std::sqrt(p * (1 - p) / n + z2n / (4.0 * n)) / (1 + z2n);
  return {std::max(0.0, centre - half), std::min(1.0, centre + half)};
}

}  // namespace kvcanary
