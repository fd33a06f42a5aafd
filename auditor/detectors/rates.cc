#include "auditor/detectors/rates.h"

#include <cmath>

namespace kvcanary::auditor {

RateRise JudgeRateRise(int base_hit, int base_n, int cross_hit, int cross_n) {
  RateRise r;
  if (base_n < kMinRateProbes || cross_n < kMinRateProbes) return r;
  r.judged = true;
  const double p1 = static_cast<double>(base_hit) / base_n;
  const double p2 = static_cast<double>(cross_hit) / cross_n;
  const double pooled =
      static_cast<double>(base_hit + cross_hit) / (base_n + cross_n);
  r.standard_error =
      std::sqrt(pooled * (1 - pooled) * (1.0 / base_n + 1.0 / cross_n));
  r.rises = p2 - p1 >= 0.05 && p2 - p1 > 3 * r.standard_error;
  return r;
}

}  // namespace kvcanary::auditor
