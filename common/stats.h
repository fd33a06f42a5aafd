// Small exact statistics shared by the auditor's tests of significance and
// the benchmarks' rates: binomial tails, Fisher's exact test and Wilson
// intervals.
#ifndef KVCANARY_COMMON_STATS_H_
#define KVCANARY_COMMON_STATS_H_

#include <utility>

namespace kvcanary {

// ln C(n, k).
double LogChoose(int n, int k);

// P(Binomial(n, share) >= k), exact.
double BinomialTail(int n, double share, int k);

// One-sided Fisher exact test: P(a's failures >= a_failed) given both
// arms' failures in total, i.e. a fails more often than b by chance.
// 1 when either arm is empty. REQUIRES: 0 <= failed <= total for each.
double FisherExactGreater(int a_failed, int a_total, int b_failed, int b_total);

// The 95% Wilson score interval of `successes` in `n` (0..1 each); {0, 1}
// when n is 0.
std::pair<double, double> Wilson95(int successes, int n);

}  // namespace kvcanary

#endif  // KVCANARY_COMMON_STATS_H_
