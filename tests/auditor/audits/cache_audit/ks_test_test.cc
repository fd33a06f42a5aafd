// The two-sample Kolmogorov–Smirnov test against values known
// independently: the Gnedenko–Korolyuk closed forms for equal sizes,
// brute-force enumeration of every interleaving for unequal ones, the
// published 5%/1% critical values, and the Kolmogorov distribution's
// quantiles.
#include "auditor/audits/cache_audit/ks_test.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace kvcanary::auditor {
namespace {

// C(a, b) as a double (exact for the sizes used here).
double Choose(int a, int b) {
  if (b < 0 || b > a) return 0;
  return std::exp(std::lgamma(a + 1.0) - std::lgamma(b + 1.0) -
                  std::lgamma(a - b + 1.0));
}

// Gnedenko–Korolyuk: with n = m, P(D+ >= k/n) = C(2n, n−k)/C(2n, n) and
// P(D >= k/n) = 2 Σ_{j>=1} (−1)^(j+1) C(2n, n−jk)/C(2n, n).
double ClosedFormLess(int n, int k) {
  return Choose(2 * n, n - k) / Choose(2 * n, n);
}
double ClosedFormTwoSided(int n, int k) {
  double sum = 0;
  for (int j = 1; j * k <= n; ++j) {
    sum += (j % 2 ? 1 : -1) * Choose(2 * n, n - j * k);
  }
  return std::min(1.0, 2 * sum / Choose(2 * n, n));
}

// Every interleaving of m a's and n b's, counted: the share whose
// statistic reaches `scaled`.
double Enumerated(int m, int n, int64_t scaled, KsAlternative alt) {
  int hits = 0, total = 0;
  for (unsigned mask = 0; mask < (1u << (m + n)); ++mask) {
    if (__builtin_popcount(mask) != m) continue;  // bit set: an a
    ++total;
    int64_t i = 0, j = 0, best = 0;
    for (int pos = 0; pos < m + n; ++pos) {
      (mask >> pos & 1 ? i : j)++;
      const int64_t gap = i * n - j * m;
      best =
          std::max(best, alt == KsAlternative::kTwoSided ? std::abs(gap) : gap);
    }
    hits += best >= scaled;
  }
  return static_cast<double>(hits) / total;
}

TEST(KsTestTest, StatisticIsTheLargestGapBetweenEmpiricalCdfs) {
  const std::vector<double> fast = {1, 2, 3}, slow = {4, 5, 6};
  EXPECT_EQ(KsTest(fast, slow, KsAlternative::kTwoSided).d, 1);
  EXPECT_EQ(KsTest(fast, slow, KsAlternative::kLess).d, 1);
  // One-sided: the slow sample is never the faster one.
  EXPECT_EQ(KsTest(slow, fast, KsAlternative::kLess).d, 0);
  EXPECT_EQ(KsTest(slow, fast, KsAlternative::kLess).p_value, 1);
  EXPECT_EQ(KsTest(slow, fast, KsAlternative::kTwoSided).d, 1);
  const KsResult mixed = KsTest({1, 3, 5}, {2, 4, 6}, KsAlternative::kTwoSided);
  EXPECT_DOUBLE_EQ(mixed.d, 1.0 / 3);
  EXPECT_TRUE(mixed.exact);
}

TEST(KsTestTest, TiedValuesAreSteppedTogether) {
  // At 1: F_a = 2/3, F_b = 1/3; at 2 both reach 1.
  EXPECT_EQ(KsScaledStatistic({1, 1, 2}, {1, 2, 2}, KsAlternative::kLess), 3);
  // Identical samples never differ.
  EXPECT_EQ(KsScaledStatistic({5, 5, 7}, {5, 5, 7}, KsAlternative::kTwoSided),
            0);
  // Unequal sizes: 1/2 − 0 at 1.
  EXPECT_DOUBLE_EQ(KsTest({1, 2}, {2, 3, 4}, KsAlternative::kTwoSided).d,
                   2.0 / 3);
}

TEST(KsTestTest, ExactPValueMatchesTheClosedFormForEqualSizes) {
  for (int n : {1, 2, 5, 10, 25, 100, 300}) {
    for (int k = 1; k <= n; k += std::max(1, n / 7)) {
      SCOPED_TRACE(testing::Message() << "n=" << n << " k=" << k);
      const int64_t scaled = static_cast<int64_t>(k) * n;
      EXPECT_NEAR(KsExactPValue(n, n, scaled, KsAlternative::kLess) /
                      ClosedFormLess(n, k),
                  1, 1e-9);
      EXPECT_NEAR(KsExactPValue(n, n, scaled, KsAlternative::kTwoSided) /
                      ClosedFormTwoSided(n, k),
                  1, 1e-9);
    }
  }
}

TEST(KsTestTest, ExactPValueMatchesEnumerationForUnequalSizes) {
  for (auto [m, n] : {std::pair{3, 5}, {4, 7}, {6, 6}, {2, 9}, {8, 5}}) {
    for (int64_t scaled = 1; scaled <= m * n; ++scaled) {
      for (KsAlternative alt :
           {KsAlternative::kLess, KsAlternative::kTwoSided}) {
        SCOPED_TRACE(testing::Message() << m << "x" << n << " at " << scaled);
        EXPECT_NEAR(KsExactPValue(m, n, scaled, alt),
                    Enumerated(m, n, scaled, alt), 1e-12);
      }
    }
  }
}

TEST(KsTestTest, ExactPValuesGiveThePublishedCriticalValues) {
  // m = n = 10: the two-sided 5% critical value is D = 7/10 (P(D >= 0.6)
  // = 0.0524 is just over 5%), the 1% one D = 8/10.
  EXPECT_NEAR(KsPValue(10, 10, 60, KsAlternative::kTwoSided), 0.052448, 2e-6);
  EXPECT_NEAR(KsPValue(10, 10, 70, KsAlternative::kTwoSided), 0.012341, 1e-6);
  EXPECT_NEAR(KsPValue(10, 10, 80, KsAlternative::kTwoSided), 0.002057, 1e-6);
}

TEST(KsTestTest, TinyPValuesKeepTheirPrecision) {
  // D = 1 with 200 per arm: 1/C(400, 200) ~ 1e-119, no cancellation.
  const double p = KsExactPValue(200, 200, 200 * 200, KsAlternative::kLess);
  EXPECT_NEAR(p / KsMinPValue(200, 200, KsAlternative::kLess), 1, 1e-9);
  EXPECT_LT(p, 1e-110);
  EXPECT_GT(p, 0);
}

TEST(KsTestTest, KolmogorovDistributionHasItsKnownQuantiles) {
  EXPECT_NEAR(KolmogorovQ(1.2238), 0.10, 2e-4);
  EXPECT_NEAR(KolmogorovQ(1.3581), 0.05, 2e-4);
  EXPECT_NEAR(KolmogorovQ(1.6276), 0.01, 2e-5);
  EXPECT_NEAR(KolmogorovQ(0.5), 0.963945, 1e-5);
  EXPECT_NEAR(KolmogorovQ(1.0), 0.269999, 1e-5);
  // Both series agree where they switch.
  EXPECT_NEAR(KolmogorovQ(1.1799), KolmogorovQ(1.1801), 1e-3);
}

TEST(KsTestTest, AsymptoticPValueIsCloseToTheExactOneAndConservative) {
  // From p ~ 0.05 down to ~1e-9: within 10% of the exact value, never
  // below it.
  for (auto [n, k] : {std::pair{100, 30},
                      {400, 40},
                      {400, 80},
                      {1000, 60},
                      {1000, 100},
                      {1500, 150}}) {
    SCOPED_TRACE(testing::Message() << "n=" << n << " k=" << k);
    const int64_t scaled = static_cast<int64_t>(k) * n;
    const double d = static_cast<double>(k) / n;
    for (KsAlternative alt : {KsAlternative::kLess, KsAlternative::kTwoSided}) {
      const double ratio =
          KsAsymptoticPValue(n, n, d, alt) / KsExactPValue(n, n, scaled, alt);
      EXPECT_GE(ratio, 0.999);
      EXPECT_LE(ratio, 1.1);
    }
  }
  // Past kKsExactMaxCells the asymptotic one is used.
  bool exact = true;
  KsPValue(3000, 3000, 300 * 3000, KsAlternative::kLess, &exact);
  EXPECT_FALSE(exact);
}

TEST(KsTestTest, MinimumPValueSaysHowManySamplesCanReachAlpha) {
  // C(24, 12) = 2704156: 12 per arm is the fewest that can reach 1e-6.
  EXPECT_NEAR(KsMinPValue(12, 12, KsAlternative::kLess), 1 / 2704156.0, 1e-15);
  EXPECT_EQ(KsSamplesToReach(1e-6, KsAlternative::kLess), 12);
  EXPECT_EQ(KsSamplesToReach(1e-6, KsAlternative::kTwoSided), 12);
  // 2/C(8, 4) = 0.029 <= 0.05 < 2/C(6, 3) = 0.1.
  EXPECT_EQ(KsSamplesToReach(0.05, KsAlternative::kTwoSided), 4);
  EXPECT_EQ(KsMinPValue(1, 1, KsAlternative::kTwoSided), 1);
}

TEST(KsTestTest, SmallestSignificantStatisticShrinksWithMoreSamples) {
  EXPECT_EQ(KsSmallestSignificantD(11, 1e-6, KsAlternative::kLess), 2);
  EXPECT_EQ(KsSmallestSignificantD(12, 1e-6, KsAlternative::kLess), 1);
  const double at100 = KsSmallestSignificantD(100, 1e-6, KsAlternative::kLess);
  const double at400 = KsSmallestSignificantD(400, 1e-6, KsAlternative::kLess);
  EXPECT_LT(at400, at100);
  EXPECT_LT(at100, 1);
  // It is the threshold: at it p <= alpha, one step below p > alpha.
  const int k = static_cast<int>(std::lround(at400 * 400));
  EXPECT_LE(KsPValue(400, 400, k * 400, KsAlternative::kLess), 1e-6);
  EXPECT_GT(KsPValue(400, 400, (k - 1) * 400, KsAlternative::kLess), 1e-6);
}

TEST(KsTestTest, SeparatedSamplesReachTheMinimumAndOverlappingOnesDoNot) {
  std::vector<double> hits, misses, more_misses;
  for (int i = 0; i < 30; ++i) {
    hits.push_back(2 + 0.01 * i);
    misses.push_back(10 + 0.013 * i);
    more_misses.push_back(10 + 0.017 * ((i * 7) % 30));
  }
  const KsResult sep = KsTest(hits, misses, KsAlternative::kLess);
  EXPECT_EQ(sep.d, 1);
  EXPECT_NEAR(sep.p_value / KsMinPValue(30, 30, KsAlternative::kLess), 1, 1e-9);
  EXPECT_GT(KsTest(more_misses, misses, KsAlternative::kLess).p_value, 1e-3);
}

TEST(KsTestTest, PValuesBelowTheFloorAreClampedAndSaidSo) {
  // D = 1 with 1000 per arm: 1/C(2000, 1000) ~ 1e-600, below a double.
  std::vector<double> hits, misses;
  for (int i = 0; i < 1000; ++i) {
    hits.push_back(1 + 1e-3 * i);
    misses.push_back(10 + 1e-3 * i);
  }
  const KsResult r = KsTest(hits, misses, KsAlternative::kLess);
  EXPECT_EQ(r.d, 1);
  EXPECT_EQ(r.p_value, kKsPValueFloor);
  EXPECT_EQ(KsPValueText(r.p_value), "< 1e-300");
  EXPECT_EQ(KsPValueText(0.0123), "0.0123");
}

TEST(KsTestDeathTest, NonFiniteValuesAreAnInvariantBreach) {
  const std::vector<double> a = {1, std::nan(""), 3}, b = {2, 4};
  EXPECT_DEATH(KsTest(a, b, KsAlternative::kLess), "");
}

}  // namespace
}  // namespace kvcanary::auditor
