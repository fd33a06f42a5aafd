#include "auditor/audits/cache_audit/ks_test.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "absl/strings/str_format.h"
#include "common/check.h"

namespace kvcanary::auditor {
namespace {

constexpr double kPi = 3.14159265358979323846;

// ln C(m+n, m).
double LogChoose(int m, int n) {
  return std::lgamma(m + n + 1.0) - std::lgamma(m + 1.0) - std::lgamma(n + 1.0);
}

// Whether lattice point (i, j) lies on or past the boundary: the statistic
// there (times m·n) reaches `scaled`.
bool Outside(int64_t i, int64_t j, int m, int n, int64_t scaled,
             KsAlternative alt) {
  const int64_t gap = i * n - j * m;
  return (alt == KsAlternative::kTwoSided ? std::abs(gap) : gap) >= scaled;
}

}  // namespace

int64_t KsScaledStatistic(std::vector<double> a, std::vector<double> b,
                          KsAlternative alt) {
  if (a.empty() || b.empty()) return 0;
  for (const std::vector<double>* v : {&a, &b}) {
    for (double x : *v) CHECK(std::isfinite(x));  // NaN would never advance
  }
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  const int64_t m = static_cast<int64_t>(a.size());
  const int64_t n = static_cast<int64_t>(b.size());
  int64_t i = 0, j = 0, best = 0;
  while (i < m || j < n) {
    // The next distinct value; every copy of it in either sample at once.
    const double x = j >= n ? a[i] : i >= m ? b[j] : std::min(a[i], b[j]);
    while (i < m && a[i] <= x) ++i;
    while (j < n && b[j] <= x) ++j;
    const int64_t gap = i * n - j * m;
    best =
        std::max(best, alt == KsAlternative::kTwoSided ? std::abs(gap) : gap);
  }
  return best;
}

KsResult KsTest(const std::vector<double>& a, const std::vector<double>& b,
                KsAlternative alt) {
  KsResult r;
  r.m = static_cast<int>(a.size());
  r.n = static_cast<int>(b.size());
  if (r.m == 0 || r.n == 0) return r;
  const int64_t scaled = KsScaledStatistic(a, b, alt);
  r.d = static_cast<double>(scaled) / (static_cast<double>(r.m) * r.n);
  r.p_value = KsPValue(r.m, r.n, scaled, alt, &r.exact);
  return r;
}

double KsPValue(int m, int n, int64_t scaled, KsAlternative alt, bool* exact) {
  CHECK(m >= 1 && n >= 1);
  const bool small = static_cast<int64_t>(m) * n <= kKsExactMaxCells;
  if (exact != nullptr) *exact = small;
  const double p = small ? KsExactPValue(m, n, scaled, alt)
                         : KsAsymptoticPValue(m, n,
                                              static_cast<double>(scaled) /
                                                  (static_cast<double>(m) * n),
                                              alt);
  return std::max(p, kKsPValueFloor);
}

std::string KsPValueText(double p) {
  if (p <= kKsPValueFloor) return "< 1e-300";
  return absl::StrFormat("%.3g", p);
}

double KsExactPValue(int m, int n, int64_t scaled, KsAlternative alt) {
  CHECK(m >= 1 && n >= 1);
  if (scaled <= 0) return 1;  // the origin itself reaches it
  if (scaled > static_cast<int64_t>(m) * n) return 0;
  // A uniformly random interleaving, drawn element by element without
  // replacement: from (i, j) the next is one of a's with probability
  // (m−i)/(m−i+n−j). Mass that reaches the boundary stops there and is
  // summed into `out`; what stays inside walks on. Rows are i, kept two at
  // a time: row[j] is the mass at (i, j) not yet past the boundary.
  std::vector<double> row(n + 1, 0.0), next(n + 1, 0.0);
  row[0] = 1;
  double out = 0;
  for (int i = 0; i <= m; ++i) {
    std::fill(next.begin(), next.end(), 0.0);
    for (int j = 0; j <= n; ++j) {
      const double mass = row[j];
      if (mass == 0) continue;
      const int left = (m - i) + (n - j);
      if (left == 0) continue;  // (m, n): inside, the path ended
      const double to_a = mass * (m - i) / left;
      const double to_b = mass - to_a;
      if (i < m) {
        if (Outside(i + 1, j, m, n, scaled, alt)) {
          out += to_a;
        } else {
          next[j] += to_a;
        }
      }
      if (j < n) {
        if (Outside(i, j + 1, m, n, scaled, alt)) {
          out += to_b;
        } else {
          row[j + 1] += to_b;
        }
      }
    }
    row.swap(next);
  }
  return std::min(1.0, out);
}

double KolmogorovQ(double lambda) {
  if (lambda <= 0) return 1;
  if (lambda < 1.18) {
    // 1 − (√(2π)/λ) Σ e^(−(2k−1)²π²/(8λ²)): converges fast for small λ.
    const double y = std::exp(-kPi * kPi / (8 * lambda * lambda));
    double sum = 0;
    for (int k = 1; k <= 8; ++k) sum += std::pow(y, (2 * k - 1) * (2 * k - 1));
    return std::clamp(1 - std::sqrt(2 * kPi) / lambda * sum, 0.0, 1.0);
  }
  double sum = 0;
  for (int k = 1; k <= 100; ++k) {
    const double term = std::exp(-2.0 * k * k * lambda * lambda);
    sum += (k % 2 == 1 ? term : -term);
    if (term < 1e-300 || term < sum * 1e-17) break;
  }
  return std::clamp(2 * sum, 0.0, 1.0);
}

double KsAsymptoticPValue(int m, int n, double d, KsAlternative alt) {
  CHECK(m >= 1 && n >= 1);
  const double ne = static_cast<double>(m) * n / (static_cast<double>(m) + n);
  const double lambda = std::sqrt(ne) * d;
  if (alt == KsAlternative::kLess) {
    return std::min(1.0, std::exp(-2 * lambda * lambda));
  }
  return KolmogorovQ(lambda);
}

double KsMinPValue(int m, int n, KsAlternative alt) {
  CHECK(m >= 1 && n >= 1);
  const double one = std::exp(-LogChoose(m, n));
  return alt == KsAlternative::kLess ? one : std::min(1.0, 2 * one);
}

int KsSamplesToReach(double alpha, KsAlternative alt) {
  CHECK(alpha > 0 && alpha < 1);
  int n = 1;
  while (KsMinPValue(n, n, alt) > alpha) ++n;
  return n;
}

double KsSmallestSignificantD(int n, double alpha, KsAlternative alt) {
  CHECK(n >= 1);
  const int64_t nn = n;
  // D = k/n (scaled: k·n); the p-value falls as k grows.
  auto p = [&](int k) { return KsPValue(n, n, k * nn, alt); };
  if (p(n) > alpha) return 2;
  int lo = 0, hi = n;  // p(lo) > alpha (k = 0: p = 1) >= p(hi)
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    (p(mid) <= alpha ? hi : lo) = mid;
  }
  return static_cast<double>(hi) / n;
}

}  // namespace kvcanary::auditor
