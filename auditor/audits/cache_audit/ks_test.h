// The two-sample Kolmogorov–Smirnov test (cache-audit compares first-token
// time samples with it): the exact statistic of two samples, and its
// p-value under H0 (both samples drawn from one continuous distribution).
//
// p-values are EXACT for m·n <= kKsExactMaxCells: the probability that a
// uniformly random interleaving of the two samples (a lattice path from
// (0,0) to (m,n)) reaches the statistic, computed by dynamic programming
// over the lattice as a walk that picks the next element without
// replacement, summing the mass that first crosses the boundary — sums of
// positive terms only, so p-values of 1e-100 keep full relative precision.
// Beyond that (large, unequal samples only: 2000 per arm is still exact),
// Smirnov's limit: λ = √nₑ·D, nₑ = mn/(m+n); two-sided the Kolmogorov tail
// Q(λ) = 2Σ(−1)^(k−1)e^(−2k²λ²), one-sided e^(−2λ²). Stephens' finite-n
// correction λ·(1 + 0.12/√nₑ + 0.11/nₑ) is NOT applied: it is made for the
// one-sample test, and against the exact two-sample values it came out
// liberal (0.78–0.93 of the exact p at n = 100..2000 per arm, D where
// p ≈ 1e-2..1e-9), while the plain limit came out conservative (1.00–1.10
// of it; ks_test_test.cc checks the bound).
// Ties are stepped together (the statistic is exact); the p-value then
// assumes continuous data, which first-token times are. Values must be
// finite (CHECKed: a NaN has no place in the order).
// p-values below kKsPValueFloor (1e-300) underflow a double's useful range
// (the exact count of 2000 per arm reaches 1e-1200): KsPValue and KsTest
// clamp them to the floor, which reads "< 1e-300" (KsPValueText).
// Thread-safe: pure functions.
#ifndef KVCANARY_AUDITOR_AUDITS_CACHE_AUDIT_KS_TEST_H_
#define KVCANARY_AUDITOR_AUDITS_CACHE_AUDIT_KS_TEST_H_

#include <cstdint>
#include <string>
#include <vector>

namespace kvcanary::auditor {

enum class KsAlternative {
  kTwoSided,  // the distributions differ: D = sup |F_a − F_b|
  kLess,      // `a` is stochastically smaller (faster): D = sup (F_a − F_b)
};

// Exact p-values up to this many lattice cells (m·n); asymptotic above.
inline constexpr int64_t kKsExactMaxCells = 4'000'000;
// The smallest p-value reported; smaller ones are clamped to it.
inline constexpr double kKsPValueFloor = 1e-300;

struct KsResult {
  int m = 0, n = 0;    // sizes of a and b
  double d = 0;        // the statistic, in [0, 1]
  double p_value = 1;  // P(D >= d) under H0; >= kKsPValueFloor
  bool exact = false;  // from the lattice count; else asymptotic
};

// The statistic times m·n (an integer): the largest (i·n − j·m), or its
// absolute value, over the merged order, where i of a's and j of b's
// values are <= each value. 0 if either sample is empty.
// REQUIRES: every value finite.
int64_t KsScaledStatistic(std::vector<double> a, std::vector<double> b,
                          KsAlternative alt);

// The test of samples a (m values) and b (n values). Either empty: d = 0,
// p = 1.
KsResult KsTest(const std::vector<double>& a, const std::vector<double>& b,
                KsAlternative alt);

// P(statistic·m·n >= scaled) under H0: exact when m·n <= kKsExactMaxCells
// (*exact set accordingly, if given), else asymptotic; at least
// kKsPValueFloor. REQUIRES: m, n >= 1.
double KsPValue(int m, int n, int64_t scaled, KsAlternative alt,
                bool* exact = nullptr);
// The two ways, for tests and for the choice above (not clamped).
double KsExactPValue(int m, int n, int64_t scaled, KsAlternative alt);
double KsAsymptoticPValue(int m, int n, double d, KsAlternative alt);

// "%.3g" of p, or "< 1e-300" at the floor.
std::string KsPValueText(double p);

// The Kolmogorov distribution's tail P(K > lambda).
double KolmogorovQ(double lambda);

// The smallest p-value samples of sizes m and n can give at all (D = 1,
// every value of one below every value of the other): 1/C(m+n, m)
// one-sided, twice that (at most 1) two-sided.
double KsMinPValue(int m, int n, KsAlternative alt);

// The fewest samples per arm (n = m) whose KsMinPValue is <= alpha: below
// it no data can reach alpha. REQUIRES: 0 < alpha < 1.
int KsSamplesToReach(double alpha, KsAlternative alt);

// The smallest statistic (a multiple of 1/n) that n per arm must reach
// for p <= alpha; 2 when none can. E.g. the smallest share of one arm's
// values that must sit below all of the other's for a finding.
double KsSmallestSignificantD(int n, double alpha, KsAlternative alt);

}  // namespace kvcanary::auditor

#endif  // KVCANARY_AUDITOR_AUDITS_CACHE_AUDIT_KS_TEST_H_
