#include "auditor/detectors/rates.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

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

std::optional<double> SmallestDetectableRise(int base_hit, int base_n,
                                             int cross_n) {
  if (base_n < kMinRateProbes || cross_n < kMinRateProbes) return std::nullopt;
  const double base = static_cast<double>(base_hit) / base_n;
  for (int k = 0; k <= cross_n; ++k) {
    if (JudgeRateRise(base_hit, base_n, k, cross_n).rises) {
      return static_cast<double>(k) / cross_n - base;
    }
  }
  return std::nullopt;
}

std::string BlindRateReason(int base_hit, int base_n, int cross_n,
                            const std::string& what) {
  const std::optional<double> rise =
      SmallestDetectableRise(base_hit, base_n, cross_n);
  if (rise.has_value() && *rise <= kBlindRise) return "";
  const std::string seen = absl::StrFormat(
      "under same-tenant load %d of %d %s, so with %d cross-tenant answers",
      base_hit, base_n, what, cross_n);
  if (!rise.has_value()) {
    return absl::StrCat(seen, " no rise at all could be seen");
  }
  return absl::StrFormat(
      "%s only a rise of %.0f points or more could be seen (blind above "
      "%.0f)",
      seen, *rise * 100, kBlindRise * 100);
}

}  // namespace kvcanary::auditor
