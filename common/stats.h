// Small exact statistics shared by the auditor's tests of significance and
// the benchmarks' rates: binomial tails and Wilson intervals.
#ifndef KVCANARY_COMMON_STATS_H_
#define KVCANARY_COMMON_STATS_H_

#include <utility>

namespace kvcanary {

// ln C(n, k).
double LogChoose(int n, int k);

// P(Binomial(n, share) >= k), exact.
double BinomialTail(int n, double share, int k);

// The 95% Wilson score interval of `successes` in `n` (0..1 each); {0, 1}
// when n is 0.
std::pair<double, double> Wilson95(int successes, int n);

}  // namespace kvcanary

#endif  // KVCANARY_COMMON_STATS_H_
