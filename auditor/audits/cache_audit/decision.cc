#include "auditor/audits/cache_audit/decision.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "common/stats.h"

namespace kvcanary::auditor {

using json = nlohmann::json;

namespace {

constexpr double kLookGrowth = 1.5;
constexpr int kFirstLookFloor = 16;  // never decide on fewer per arm

std::vector<int> LookSizes(int first, int max_samples) {
  std::vector<int> looks;
  for (double n = first;; n *= kLookGrowth) {
    const int k = static_cast<int>(std::ceil(n));
    if (k >= max_samples) {
      looks.push_back(max_samples);
      return looks;
    }
    looks.push_back(k);
  }
}

json KsJson(const KsResult& r) {
  return {{"m", r.m},
          {"n", r.n},
          {"d", r.d},
          {"p_value", r.p_value},
          {"exact", r.exact}};
}

bool Sensitive(int n, double alpha) {
  return IsolationSensitivity(n, alpha) <= kIsolationSensitivity;
}

// The fewest per arm whose sensitivity reaches kIsolationSensitivity, by
// bisection (it only improves with n); 0 if max_samples does not.
int IsolationSamples(double alpha, int max_samples) {
  if (!Sensitive(max_samples, alpha)) return 0;
  int lo = 1, hi = max_samples;  // !Sensitive(lo) (one sample never is)
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    (Sensitive(mid, alpha) ? hi : lo) = mid;
  }
  return hi;
}

}  // namespace

const char* CacheArmName(CacheArm arm) {
  switch (arm) {
    case CacheArm::kWriterControl:
      return "writer_control";
    case CacheArm::kReaderControl:
      return "reader_control";
    case CacheArm::kSame:
      return "same_tenant";
    case CacheArm::kCross:
      return "cross_tenant";
  }
  return "writer_control";
}

const char* SharingLevelName(SharingLevel level) {
  switch (level) {
    case SharingLevel::kNone:
      return "none";
    case SharingLevel::kSameTenant:
      return "same-tenant";
    case SharingLevel::kCrossTenant:
      return "cross-tenant";
    case SharingLevel::kUndecided:
      return "undecided";
  }
  return "undecided";
}

double IsolationSensitivity(int n, double alpha) {
  CHECK(n >= 1);
  const double d = KsSmallestSignificantD(n, alpha, KsAlternative::kLess);
  if (d > 1) return 2;
  const int k = static_cast<int>(std::lround(d * n));
  double lo = 0, hi = 1;  // power(lo) < kIsolationPower <= power(hi)
  if (BinomialTail(n, hi, k) < kIsolationPower) return 2;
  for (int i = 0; i < 40; ++i) {
    const double mid = (lo + hi) / 2;
    (BinomialTail(n, mid, k) >= kIsolationPower ? hi : lo) = mid;
  }
  return hi;
}

bool RefusalTest::excess() const {
  return cross_probes > 0 && control_probes > 0 &&
         static_cast<int64_t>(cross_failed) * control_probes >
             static_cast<int64_t>(control_failed) * cross_probes;
}

json RefusalTest::ToJson() const {
  return {{"cross_failed", cross_failed},
          {"cross_probes", cross_probes},
          {"control_failed", control_failed},
          {"control_probes", control_probes},
          {"excess", excess()},
          {"p_value", p_value}};
}

RefusalTest RunRefusalTest(const ArmSamples& cross,
                           const ArmSamples& reader_control) {
  RefusalTest r;
  r.cross_failed = cross.probes_failed;
  r.cross_probes = cross.probes;
  r.control_failed = reader_control.probes_failed;
  r.control_probes = reader_control.probes;
  r.p_value = std::max(kKsPValueFloor,
                       FisherExactGreater(r.cross_failed, r.cross_probes,
                                          r.control_failed, r.control_probes));
  return r;
}

absl::StatusOr<LookPlan> PlanLooks(double alpha, int max_samples) {
  CHECK(alpha > 0 && alpha < 1);
  if (max_samples > kMaxSamplesPerArm) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max-samples=", max_samples, " is more than ", kMaxSamplesPerArm,
        " per arm: the exact p-values' cost grows as samples squared"));
  }
  if (alpha < kKsPValueFloor) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--alpha=", alpha, " is below the smallest p-value reported (",
        kKsPValueFloor, ")"));
  }
  const int reach_at_alpha = KsSamplesToReach(alpha, KsAlternative::kLess);
  if (max_samples < reach_at_alpha) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max-samples=", max_samples, " cannot reach alpha=", alpha,
        ": the Kolmogorov-Smirnov test needs at least ", reach_at_alpha,
        " samples per arm for any p-value that small"));
  }
  // More looks lower each look's alpha, which raises the first look: grow
  // the count until the schedule fits in it (it only grows, and is bounded
  // by max_samples, so this ends).
  LookPlan plan;
  plan.alpha = alpha;
  size_t looks = 1;
  while (true) {
    plan.alpha_per_look = alpha / static_cast<double>(looks);
    plan.reach = KsSamplesToReach(plan.alpha_per_look, KsAlternative::kLess);
    const int first =
        std::min(max_samples, std::max(kFirstLookFloor, 2 * plan.reach));
    plan.looks = LookSizes(first, max_samples);
    plan.isolation_samples = IsolationSamples(plan.alpha_per_look, max_samples);
    if (plan.isolation_samples > 0 &&
        !std::binary_search(plan.looks.begin(), plan.looks.end(),
                            plan.isolation_samples)) {
      plan.looks.insert(std::upper_bound(plan.looks.begin(), plan.looks.end(),
                                         plan.isolation_samples),
                        plan.isolation_samples);
    }
    if (plan.looks.size() <= looks) break;
    looks = plan.looks.size();
  }
  // The per-look alpha was set for `looks` looks; a shorter schedule only
  // makes it more conservative.
  if (max_samples < plan.reach) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max-samples=", max_samples, " cannot reach alpha=", alpha, " over ",
        looks, " looks: needs at least ", plan.reach, " samples per arm"));
  }
  return plan;
}

int ArmSamples::failed() const {
  int n = 0;
  for (const auto& [status, count] : failures) n += count;
  return n;
}

json CachedTokensSignal::ToJson() const {
  json j = {{"any_reported", any_reported},
            {"usable", usable},
            {"threshold", threshold},
            {"control_max", control_max},
            {"positive_control", positive_control},
            {"cross_fired", cross_fired}};
  for (int a = 0; a < kCacheArms; ++a) {
    j[CacheArmName(static_cast<CacheArm>(a))] = {{"reported", reported[a]},
                                                 {"hits", hits[a]}};
  }
  return j;
}

CachedTokensSignal ReadCachedTokens(const ArmSamples (&arms)[kCacheArms],
                                    int prefix_tokens) {
  CachedTokensSignal s;
  s.threshold = std::max(1, prefix_tokens / 2);
  for (int a = 0; a < kCacheArms; ++a) {
    for (int c : arms[a].cached_tokens) {
      if (c < 0) continue;
      ++s.reported[a];
      if (a == ArmIndex(CacheArm::kWriterControl) ||
          a == ArmIndex(CacheArm::kReaderControl)) {
        s.control_max = std::max(s.control_max, c);
      }
    }
  }
  for (int a = 0; a < kCacheArms; ++a) s.any_reported |= s.reported[a] > 0;
  s.usable = s.any_reported && s.control_max < s.threshold;
  if (!s.usable) return s;
  for (int a = 0; a < kCacheArms; ++a) {
    for (int c : arms[a].cached_tokens) {
      if (c >= s.threshold && c > s.control_max) ++s.hits[a];
    }
  }
  s.positive_control = s.hits[ArmIndex(CacheArm::kSame)] > 0;
  s.cross_fired = s.hits[ArmIndex(CacheArm::kCross)] > 0;
  return s;
}

json LookTests::ToJson() const {
  return {
      {"n", n},
      {"same_faster_than_control", KsJson(same_vs_control)},
      {"cross_faster_than_control", KsJson(cross_vs_control)},
      {"same_faster_than_cross", KsJson(same_vs_cross)},
      {"cross_fails_more_than_control", refusal.ToJson()},
      {"sensitivity", sensitivity <= 1 ? json(sensitivity) : json(nullptr)}};
}

LookTests RunLookTests(const ArmSamples (&arms)[kCacheArms],
                       double alpha_per_look) {
  const auto& writer = arms[ArmIndex(CacheArm::kWriterControl)].ttft_ms;
  const auto& reader = arms[ArmIndex(CacheArm::kReaderControl)].ttft_ms;
  const auto& same = arms[ArmIndex(CacheArm::kSame)].ttft_ms;
  const auto& cross = arms[ArmIndex(CacheArm::kCross)].ttft_ms;
  LookTests t;
  t.n = static_cast<int>(
      std::min({writer.size(), reader.size(), same.size(), cross.size()}));
  t.same_vs_control = KsTest(same, writer, KsAlternative::kLess);
  t.cross_vs_control = KsTest(cross, reader, KsAlternative::kLess);
  t.same_vs_cross = KsTest(same, cross, KsAlternative::kLess);
  t.refusal = RunRefusalTest(arms[ArmIndex(CacheArm::kCross)],
                             arms[ArmIndex(CacheArm::kReaderControl)]);
  const int n = static_cast<int>(std::min(reader.size(), cross.size()));
  if (n > 0) t.sensitivity = IsolationSensitivity(n, alpha_per_look);
  return t;
}

double IsolationNeeds(const LookTests& t) {
  return kIsolationSensitivity * t.same_vs_control.d;
}

std::optional<SharingLevel> DecideLevel(const LookTests& t,
                                        const CachedTokensSignal& c,
                                        double alpha_per_look, bool last) {
  // An empty arm's tests have p = 1: they decide nothing.
  if (t.cross_vs_control.p_value <= alpha_per_look || c.cross_fired ||
      t.refusal.p_value <= alpha_per_look) {
    return SharingLevel::kCrossTenant;
  }
  const bool sees_hits = t.same_vs_control.p_value <= alpha_per_look;
  const bool separated = t.same_vs_cross.p_value <= alpha_per_look;
  // B's probes of A's prefixes failing more often, even by chance so far,
  // may be the cache answering by refusal: never vouch for isolation then.
  if (sees_hits && separated && !t.refusal.excess() &&
      t.sensitivity <= IsolationNeeds(t)) {
    return SharingLevel::kSameTenant;
  }
  if (!last) return std::nullopt;
  return sees_hits || c.positive_control ? SharingLevel::kUndecided
                                         : SharingLevel::kNone;
}

double Quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double at = q * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(at));
  const size_t hi = std::min(v.size() - 1, lo + 1);
  return v[lo] + (v[hi] - v[lo]) * (at - static_cast<double>(lo));
}

}  // namespace kvcanary::auditor
