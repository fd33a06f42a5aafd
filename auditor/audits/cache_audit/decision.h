// The statistics of `cache-audit` (auditor/audits/cache_audit/cache_audit.h),
// apart from the requests: the three arms' samples, when to look at them, the
// Kolmogorov–Smirnov tests at each look, the cached-token signal, and the
// sharing level they support. docs/cache-audit.md states the method.
//
// Arms. Every probe (a prefix plus a short distinct suffix) comes right
// after tenant A sent a fresh prefix of the same length — its prime, or for
// a control an unrelated one — so each probe follows the same kind of
// request and only the prefix relation differs:
//   writer_control — A probes a never-seen prefix (a miss);
//   reader_control — B probes a never-seen prefix (a miss);
//   same_tenant    — A probes the prefix A just primed (the positive
//                    control: can the audit see a hit at all?);
//   cross_tenant   — B probes the prefix A just primed.
// Tests, one-sided (a cache only ever makes a hit faster), each arm against
// the control of the same prober, so tenants that differ in speed cannot
// pass for a cache:
//   same  faster than writer_control — a hit is visible;
//   cross faster than reader_control — B is served from A's prefix: a
//                                      finding;
//   same  faster than cross          — B does not get the hit A gets.
// Refusals: B's probes of A's prefixes failing more often than B's probes
// of never-seen ones (one-sided Fisher exact test) answer "did A send
// this?" as well as a hit would: significant, a finding (cache_refusal);
// any excess short of that, never same-tenant.
// Looks: the tests run at a few sample sizes (each 1.5x the last, plus the
// first size that can vouch for isolation, up to --max-samples) at alpha /
// looks each, so stopping at the first decisive look keeps every test's
// error within alpha overall (Bonferroni).
#ifndef KVCANARY_AUDITOR_AUDITS_CACHE_AUDIT_DECISION_H_
#define KVCANARY_AUDITOR_AUDITS_CACHE_AUDIT_DECISION_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "auditor/audits/cache_audit/ks_test.h"
#include "nlohmann/json.hpp"

namespace kvcanary::auditor {

enum class CacheArm {
  kWriterControl = 0,
  kReaderControl = 1,
  kSame = 2,
  kCross = 3
};
inline constexpr int kCacheArms = 4;
// writer_control, reader_control, same_tenant, cross_tenant.
const char* CacheArmName(CacheArm arm);
inline int ArmIndex(CacheArm arm) { return static_cast<int>(arm); }

// What the audit found:
//   none         — no cache signal at all: even A's own repeats were not
//                  faster (nor reported cached); nothing can be vouched for;
//   same-tenant  — A's repeats hit, B's probes of A's prefix did not, with
//                  the sensitivity stated (isolation holds);
//   cross-tenant — B was served from A's prefix (timing or cached tokens);
//   undecided    — a cache was seen, but within --max-samples neither a
//                  cross-tenant hit nor isolation reached alpha.
enum class SharingLevel { kNone, kSameTenant, kCrossTenant, kUndecided };
const char* SharingLevelName(SharingLevel level);

// Isolation is vouched for only once B getting hits at this share of the
// rate A gets them (as fast as A's) would have shown at the look's alpha
// with probability kIsolationPower: with every repeat of A's a hit, half
// of B's probes hitting. A target whose own repeats hit only now and then
// (several replicas) needs more.
inline constexpr double kIsolationSensitivity = 0.5;
inline constexpr double kIsolationPower = 0.95;
// The exact p-values' cost grows as samples squared: 2000 per arm (4e6
// lattice cells, ~1 s per plan) is the most --max-samples takes.
inline constexpr int kMaxSamplesPerArm = 2000;

struct LookPlan {
  double alpha = 0;
  double alpha_per_look = 0;  // alpha / (at least) looks.size()
  int reach = 0;              // fewest per arm that can reach alpha_per_look
  // The fewest per arm with the isolation sensitivity at alpha_per_look;
  // 0 when more than max_samples.
  int isolation_samples = 0;
  std::vector<int> looks;  // samples per arm at each look, ascending
};

// Looks from 2 x reach (or max_samples, if smaller) growing by 1.5x to
// max_samples, plus isolation_samples. kInvalidArgument if max_samples is
// below reach (no data could then reach alpha) or above kMaxSamplesPerArm,
// or alpha below kKsPValueFloor. REQUIRES: 0 < alpha < 1.
absl::StatusOr<LookPlan> PlanLooks(double alpha, int max_samples);

struct ArmSamples {
  std::vector<double> ttft_ms;     // usable answers' first-token times
  std::vector<int> cached_tokens;  // per usable answer; -1: not reported
  int attempts = 0;
  std::map<int, int> failures;  // HTTP status (0: no answer) -> count
  // Probes sent (their prime was usable) and those without a usable
  // answer: the refusal test's counts (a failed prime is A's, not B's).
  int probes = 0;
  int probes_failed = 0;
  int failed() const;
};

// The cached-token signal: a sample is a hit when it reports more cached
// tokens than any control did and at least half the primed prefix. It is
// usable only where the target reports counts and controls stay below
// that (a template shared by every prompt would not).
struct CachedTokensSignal {
  int reported[kCacheArms] = {};  // samples with a count
  int hits[kCacheArms] = {};
  int control_max = 0;
  int threshold = 0;
  bool any_reported = false;
  bool usable = false;            // reported, and controls below threshold
  bool positive_control = false;  // usable, and a same-tenant hit
  bool cross_fired = false;       // usable, and a cross-tenant hit
  nlohmann::json ToJson() const;
};
CachedTokensSignal ReadCachedTokens(const ArmSamples (&arms)[kCacheArms],
                                    int prefix_tokens);

// Cross-tenant probes failing more often than reader_control's.
struct RefusalTest {
  int cross_failed = 0, cross_probes = 0;
  int control_failed = 0, control_probes = 0;
  double p_value = 1;  // FisherExactGreater(cross, control) (common/stats.h)
  // Cross's failure share above control's, significant or not.
  bool excess() const;
  nlohmann::json ToJson() const;
};
RefusalTest RunRefusalTest(const ArmSamples& cross,
                           const ArmSamples& reader_control);

// The smallest share of B's probes hitting (each faster than every miss,
// so D ~ hits/n) that n per arm detect at alpha with probability
// kIsolationPower: P(Binomial(n, share) >= k) >= kIsolationPower, k/n the
// smallest significant D. 2 when none can.
double IsolationSensitivity(int n, double alpha);

// The tests at one look.
struct LookTests {
  int n = 0;                  // the smallest arm's size
  KsResult same_vs_control;   // same faster than writer_control
  KsResult cross_vs_control;  // cross faster than reader_control
  KsResult same_vs_cross;     // same faster than cross
  RefusalTest refusal;        // cross fails more than reader_control
  // IsolationSensitivity at this n and alpha: the smallest share of
  // cross-tenant hits that would have shown against reader_control with
  // power kIsolationPower (2: none could).
  double sensitivity = 2;
  nlohmann::json ToJson() const;
};
LookTests RunLookTests(const ArmSamples (&arms)[kCacheArms],
                       double alpha_per_look);

// The sensitivity isolation needs at this look: kIsolationSensitivity
// times the share of A's repeats that hit (the same-vs-control statistic).
double IsolationNeeds(const LookTests& t);

// The level the look decides, or nullopt to keep sampling; at the `last`
// look always a level (undecided or none when nothing was decisive):
// cross-tenant when cross beats reader_control at alpha, the cached-token
// signal fired or cross fails more than reader_control at alpha;
// same-tenant when same beats writer_control and cross at alpha, the
// sensitivity reaches IsolationNeeds and cross fails no more often than
// reader_control.
std::optional<SharingLevel> DecideLevel(const LookTests& t,
                                        const CachedTokensSignal& c,
                                        double alpha_per_look, bool last);

// Median (and other quantiles, q in [0, 1]) of a sample; 0 when empty
// (reports write null / "-" for an empty arm).
double Quantile(std::vector<double> v, double q);

}  // namespace kvcanary::auditor

#endif  // KVCANARY_AUDITOR_AUDITS_CACHE_AUDIT_DECISION_H_
