// The one test of a rate that rises under cross-tenant load against the
// same-tenant baseline (golden's rate mode, the log-probability distances):
// a two-proportion z-test, pooled.
#ifndef KVCANARY_AUDITOR_DETECTORS_RATES_H_
#define KVCANARY_AUDITOR_DETECTORS_RATES_H_

#include <optional>
#include <string>

namespace kvcanary::auditor {

struct RateRise {
  bool judged = false;  // at least kMinRateProbes on each side
  bool rises = false;
  double standard_error = 0;
};

inline constexpr int kMinRateProbes = 10;

// Whether cross_hit / cross_n exceeds base_hit / base_n by at least 5
// points and by more than 3 standard errors. Where both come from one
// distribution, a campaign passes 3 standard errors one-sided about once in
// 740 (0.135%, the normal tail), and the 5-point floor lowers that further:
// the false-alarm bound the detectors that use it state.
RateRise JudgeRateRise(int base_hit, int base_n, int cross_hit, int cross_n);

// A rate test that could only see a rise larger than this is blind: the
// detector using it is disabled, saying so, rather than reported active.
inline constexpr double kBlindRise = 0.30;

// The smallest rise over base_hit / base_n that JudgeRateRise calls with
// cross_n answers on the other side (the first cross count that rises,
// as a share, minus the baseline's); nullopt when none can (too few
// answers, or a baseline too near 1).
std::optional<double> SmallestDetectableRise(int base_hit, int base_n,
                                             int cross_n);

// "" when a rise of kBlindRise or less can be seen; else why not, for a
// detector's `disabled` (`what`: what the rate counts, e.g. "golden answers
// that differ from alone").
std::string BlindRateReason(int base_hit, int base_n, int cross_n,
                            const std::string& what);

}  // namespace kvcanary::auditor

#endif  // KVCANARY_AUDITOR_DETECTORS_RATES_H_
