#include "auditor/audits/cache_audit/report.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace kvcanary::auditor {

using json = nlohmann::json;

namespace {

const ArmSamples& Arm(const CacheAuditOutcome& o, CacheArm arm) {
  return o.arms[ArmIndex(arm)];
}

// A quantile of an arm's times; null when the arm has none.
json Ms(const std::vector<double>& v, double q) {
  return v.empty() ? json(nullptr) : json(Quantile(v, q));
}

json Median(const CacheAuditOutcome& o, CacheArm arm) {
  return Ms(Arm(o, arm).ttft_ms, 0.5);
}

std::string P(double p) { return KsPValueText(p); }

std::string FailureText(const std::map<int, int>& failures) {
  std::vector<std::string> parts;
  for (const auto& [status, n] : failures) {
    parts.push_back(status == 0 ? absl::StrCat("no answer x", n)
                                : absl::StrCat("HTTP ", status, " x", n));
  }
  return absl::StrJoin(parts, ", ");
}

int Fired(const CacheAuditOutcome& o, const std::string& signal) {
  return static_cast<int>(std::count(o.fired.begin(), o.fired.end(), signal));
}

// Why the timing could not decide (level undecided).
std::string UndecidedText(const CacheAuditOutcome& o) {
  const LookTests& t = o.tests;
  if (Arm(o, CacheArm::kCross).ttft_ms.empty() ||
      Arm(o, CacheArm::kReaderControl).ttft_ms.empty()) {
    return absl::StrCat(o.reader,
                        "'s probes got no usable answer to time: nothing can "
                        "be said of ",
                        o.reader, " reading ", o.writer, "'s prefixes");
  }
  if (t.refusal.excess()) {
    return absl::StrFormat(
        "%s's probes of %s's prefixes failed more often (%d of %d) than its "
        "probes of never-seen ones (%d of %d; p=%s, not below %.3g): a "
        "refusal may itself tell %s that %s sent the prefix, so isolation "
        "cannot be vouched for",
        o.reader, o.writer, t.refusal.cross_failed, t.refusal.cross_probes,
        t.refusal.control_failed, t.refusal.control_probes,
        P(t.refusal.p_value), o.plan.alpha_per_look, o.reader, o.writer);
  }
  return absl::StrFormat(
      "after %d per arm %s's probes of %s's prefixes were neither faster than "
      "misses (p=%s) nor slower than %s's own hits (p=%s) at %.3g with "
      "the sensitivity needed (%s)",
      t.n, o.reader, o.writer, P(t.cross_vs_control.p_value), o.writer,
      P(t.same_vs_cross.p_value), o.plan.alpha_per_look,
      t.sensitivity <= 1 ? absl::StrFormat("%.2f, needs %.2f", t.sensitivity,
                                           IsolationNeeds(t))
                         : "none reachable");
}

void AddArmFailures(const CacheAuditOutcome& o, DetectorCoverage* d) {
  for (int a = 0; a < kCacheArms; ++a) {
    const ArmSamples& s = o.arms[a];
    if (s.failed() == 0) continue;
    std::string text =
        absl::StrCat(s.failed(), " of ", s.attempts, " ",
                     CacheArmName(static_cast<CacheArm>(a)), " probes failed (",
                     FailureText(s.failures), ")");
    const ArmSamples& control = Arm(o, CacheArm::kReaderControl);
    const bool cross = a == ArmIndex(CacheArm::kCross);
    if (cross && control.failed() == 0 && control.attempts > 0) {
      // Only when the prefix was another tenant's: the refusal is itself
      // an answer to "did A send this?".
      absl::StrAppend(&text, " while every reader_control probe succeeded");
    }
    if (cross && o.tests.refusal.excess()) {
      absl::StrAppend(&text, " (more than reader_control: p=",
                      P(o.tests.refusal.p_value), ")");
    }
    // Refused cross probes that convicted are the finding, not a gap.
    if (2 * s.failed() > s.attempts &&
        !(cross && Fired(o, "cache_refusal") > 0)) {
      d->AddFailure(text);
    } else {
      d->notes.push_back(text);
    }
  }
}

json KsBrief(const KsResult& r) { return {{"d", r.d}, {"p_value", r.p_value}}; }

}  // namespace

DetectorCoverage CacheTimingCoverage(const CacheAuditOutcome& o) {
  DetectorCoverage d;
  d.name = "cache_timing";
  d.required = true;
  d.unit = "first-token samples";
  // A cross-tenant hit needs only enough samples to reach alpha; vouching
  // for isolation needs the stated sensitivity.
  const bool cross = o.level == SharingLevel::kCrossTenant;
  d.floor = cross ? o.plan.reach
                  : (o.plan.isolation_samples > 0 ? o.plan.isolation_samples
                                                  : o.max_samples + 1);
  d.coverage[o.writer] =
      static_cast<int>(Arm(o, CacheArm::kSame).ttft_ms.size());
  d.coverage[o.reader] =
      static_cast<int>(Arm(o, CacheArm::kCross).ttft_ms.size());
  // The refusal signal rides on the timing probes (its finding's detector).
  d.findings = Fired(o, "cache_timing") + Fired(o, "cache_refusal");
  const LookTests& t = o.tests;
  if (o.level == SharingLevel::kNone) {
    d.AddFailure(absl::StrFormat(
        "%s's own repeats were not faster than never-seen prefixes (p=%s > "
        "%.3g with %d per arm): the audit cannot see a cache hit, so it "
        "cannot vouch for isolation",
        o.writer, P(t.same_vs_control.p_value), o.plan.alpha_per_look, t.n));
  } else if (o.level == SharingLevel::kUndecided) {
    d.AddFailure(UndecidedText(o));
  }
  if (!cross && o.plan.isolation_samples == 0) {
    d.AddFailure(absl::StrCat("--max-samples=", o.max_samples,
                              " is too few to vouch for isolation"));
  }
  AddArmFailures(o, &d);
  for (const std::string& n : o.notes) d.notes.push_back(n);
  d.stats = {{"alpha", o.plan.alpha},
             {"alpha_per_look", o.plan.alpha_per_look},
             {"samples_per_arm", t.n},
             {"same_faster_than_control_p", t.same_vs_control.p_value},
             {"cross_faster_than_control_p", t.cross_vs_control.p_value},
             {"same_faster_than_cross_p", t.same_vs_cross.p_value},
             {"cross_faster_than_control_d", t.cross_vs_control.d},
             {"cross_refused_more_than_control_p", t.refusal.p_value},
             {"median_writer_control_ms", Median(o, CacheArm::kWriterControl)},
             {"median_reader_control_ms", Median(o, CacheArm::kReaderControl)},
             {"median_same_ms", Median(o, CacheArm::kSame)},
             {"median_cross_ms", Median(o, CacheArm::kCross)}};
  if (t.sensitivity <= 1) d.stats["sensitivity"] = t.sensitivity;
  d.Judge({o.writer, o.reader});
  return d;
}

DetectorCoverage CachedTokensCoverage(const CacheAuditOutcome& o) {
  const CachedTokensSignal& c = o.cached;
  DetectorCoverage d;
  d.name = "cached_tokens";
  d.required = false;  // many targets never report it
  d.unit = "probes with cached_tokens reported";
  d.floor = 1;
  d.coverage[o.writer] = c.reported[ArmIndex(CacheArm::kSame)];
  d.coverage[o.reader] = c.reported[ArmIndex(CacheArm::kCross)];
  d.findings = Fired(o, "cached_tokens");
  if (!c.any_reported) {
    d.disabled =
        "the target reported no cached tokens (neither "
        "usage.prompt_tokens_details.cached_tokens nor llama.cpp's "
        "timings.prompt_n; not reported, which is not 'no hit')";
  } else if (!c.usable) {
    d.AddFailure(absl::StrCat(
        "never-seen prefixes reported up to ", c.control_max,
        " cached tokens: the count is not about the primed prefix"));
  } else if (!c.positive_control) {
    d.AddFailure(absl::StrCat("no same-tenant repeat reported a hit (",
                              c.reported[ArmIndex(CacheArm::kSame)],
                              " reported): the count cannot show one"));
  }
  if (c.any_reported) d.notes.push_back("counts from " + o.cached_from);
  d.stats = {{"threshold", c.threshold},
             {"from", o.cached_from},
             {"control_max", c.control_max},
             {"same_hits", c.hits[ArmIndex(CacheArm::kSame)]},
             {"cross_hits", c.hits[ArmIndex(CacheArm::kCross)]}};
  d.Judge({o.writer, o.reader});
  return d;
}

namespace {

// Which tier the run's probes could reach.
std::string EvictTierText(const CacheAuditOutcome& o) {
  if (o.evict_tokens > 0 && o.tiers.Unchecked(o.evict_tokens).empty()) {
    return "primes pushed out of the first tier before each probe: hits "
           "come from a second tier";
  }
  if (o.tiers.second_tier) {
    return "first tier only: the second tier the target reports was not "
           "reached";
  }
  return o.evict_tokens > 0 ? "primes pushed out of a first tier of unstated "
                              "size before each probe"
                            : "first tier (no --evict-tokens)";
}

}  // namespace

json CacheAuditDetails(const CacheAuditOutcome& o) {
  json arms = json::object();
  std::vector<std::string> samples, medians;
  for (int a = 0; a < kCacheArms; ++a) {
    const ArmSamples& s = o.arms[a];
    const char* name = CacheArmName(static_cast<CacheArm>(a));
    json failures = json::object();
    for (const auto& [status, n] : s.failures) {
      failures[status == 0 ? "no_answer" : absl::StrCat(status)] = n;
    }
    arms[name] = {{"n", s.ttft_ms.size()},
                  {"attempts", s.attempts},
                  {"failed", s.failed()},
                  {"failures", failures},
                  {"probes", s.probes},
                  {"probes_failed", s.probes_failed},
                  {"median_ms", Ms(s.ttft_ms, 0.5)},
                  {"p10_ms", Ms(s.ttft_ms, 0.1)},
                  {"p90_ms", Ms(s.ttft_ms, 0.9)},
                  {"cached_tokens_reported", o.cached.reported[a]},
                  {"cached_tokens_hits", o.cached.hits[a]}};
    samples.push_back(absl::StrCat(name, " ", s.ttft_ms.size()));
    medians.push_back(
        s.ttft_ms.empty()
            ? absl::StrCat(name, " -")
            : absl::StrFormat("%s %.2f", name, Quantile(s.ttft_ms, 0.5)));
  }
  const LookTests& t = o.tests;
  return {
      {"level", SharingLevelName(o.level.value_or(SharingLevel::kUndecided))},
      {"writer", o.writer},
      {"reader", o.reader},
      {"fired_by", o.fired.empty() ? "-" : absl::StrJoin(o.fired, ", ")},
      {"alpha", o.plan.alpha},
      {"samples_per_arm", absl::StrJoin(samples, ", ")},
      {"median_ttft_ms", absl::StrJoin(medians, ", ")},
      {"p_same_faster_than_control", t.same_vs_control.p_value},
      {"p_cross_faster_than_control", t.cross_vs_control.p_value},
      {"p_same_faster_than_cross", t.same_vs_cross.p_value},
      {"p_cross_refused_more_than_control", t.refusal.p_value},
      {"ks_d_cross_vs_control", t.cross_vs_control.d},
      {"sensitivity", t.sensitivity <= 1 ? json(t.sensitivity) : json(nullptr)},
      {"prefix_tokens", o.prefix_tokens},
      {"requests", o.requests},
      {"seconds", o.seconds},
      {"arms", arms},
      {"tests", t.ToJson()},
      {"cached_tokens", o.cached.ToJson()},
      {"cached_tokens_from", o.cached_from},
      {"plan",
       {{"method",
         "one-sided two-sample Kolmogorov-Smirnov (the first arm faster), "
         "exact p-values by lattice-path counting (asymptotic past 4e6 "
         "cells; clamped at 1e-300); refusals: one-sided Fisher exact"},
        {"alpha_per_look", o.plan.alpha_per_look},
        {"looks", o.plan.looks},
        {"looks_taken", o.looks_taken},
        {"rounds", o.rounds},
        {"reach", o.plan.reach},
        {"isolation_samples", o.plan.isolation_samples},
        {"isolation_sensitivity", kIsolationSensitivity},
        {"isolation_power", kIsolationPower},
        {"max_samples", o.max_samples}}},
      {"sizing",
       {{"target_tokens", o.sizing.target_tokens},
        {"units", o.sizing.units},
        {"unit_tokens", o.sizing.unit_tokens},
        {"base_tokens", o.sizing.base_tokens},
        {"counts_reported", o.sizing.counts_reported}}},
      {"evict",
       {{"evict_tokens", o.evict_tokens},
        {"evict_tokens_from", o.evict_from},
        {"requests", o.evict_requests},
        {"tokens", o.evicted_tokens},
        {"tier", EvictTierText(o)},
        {"tiers_stated", o.tiers.ToJson()}}},
      {"notes", o.notes}};
}

std::vector<Check> CacheAuditChecks(const CacheAuditOutcome& o) {
  const LookTests& t = o.tests;
  const bool sees = t.same_vs_control.p_value <= o.plan.alpha_per_look ||
                    o.cached.positive_control;
  const SharingLevel level = o.level.value_or(SharingLevel::kUndecided);
  const char* isolation = level == SharingLevel::kCrossTenant  ? "failed"
                          : level == SharingLevel::kSameTenant ? "passed"
                                                               : "skipped";
  return {
      {"cache_hit_visible", absl::StrCat(o.writer, " then ", o.writer),
       sees ? "passed" : "failed",
       absl::StrFormat("same-tenant repeats faster than misses: p=%s%s",
                       P(t.same_vs_control.p_value),
                       o.cached.positive_control
                           ? "; cached tokens reported on repeats"
                           : "")},
      {"cross_tenant_isolation", absl::StrCat(o.writer, " then ", o.reader),
       isolation,
       absl::StrFormat("level %s: cross-tenant faster than misses p=%s, "
                       "same-tenant faster than cross-tenant p=%s, "
                       "cross-tenant refused more than misses p=%s",
                       SharingLevelName(level), P(t.cross_vs_control.p_value),
                       P(t.same_vs_cross.p_value), P(t.refusal.p_value))}};
}

Finding CrossTenantFinding(const CacheAuditOutcome& o,
                           const std::string& signal,
                           const std::vector<int64_t>& probe_ids) {
  Finding f;
  const bool refusal = signal == "cache_refusal";
  f.kind = refusal ? "cross_tenant_cache_refusal" : "cross_tenant_cache_hit";
  f.severity = Severity::kHigh;  // it tells B whether A sent a prompt
  // The refusal is seen on the timing probes: no detector of its own.
  f.detector = refusal ? "cache_timing" : signal;
  f.writer = o.writer;
  f.reader = o.reader;
  f.detail = {
      {"level", SharingLevelName(o.level.value_or(SharingLevel::kCrossTenant))},
      {"signal", signal},
      {"samples_per_arm", o.tests.n},
      {"cross_faster_than_control", KsBrief(o.tests.cross_vs_control)},
      {"median_reader_control_ms", Median(o, CacheArm::kReaderControl)},
      {"median_cross_ms", Median(o, CacheArm::kCross)}};
  if (refusal) {
    f.detail["cross_refused_more_than_control"] = o.tests.refusal.ToJson();
    json failures = json::object();
    for (const auto& [status, n] : Arm(o, CacheArm::kCross).failures) {
      failures[status == 0 ? "no_answer" : absl::StrCat(status)] = n;
    }
    f.detail["cross_failures"] = failures;
    if (!probe_ids.empty()) {
      f.probe = probe_ids.front();
      f.detail["probe"] = f.probe;
    }
    return f;
  }
  if (signal != "cached_tokens") return f;
  const CachedTokensSignal& c = o.cached;
  const int cross = ArmIndex(CacheArm::kCross);
  f.detail["cross_hits"] = c.hits[cross];
  f.detail["cross_reported"] = c.reported[cross];
  f.detail["threshold"] = c.threshold;
  const std::vector<int>& counts = o.arms[cross].cached_tokens;
  for (size_t i = 0; i < counts.size() && i < probe_ids.size(); ++i) {
    if (counts[i] >= c.threshold && counts[i] > c.control_max) {
      f.probe = probe_ids[i];
      f.detail["probe"] = f.probe;
      f.detail["cached_tokens"] = counts[i];
      break;
    }
  }
  return f;
}

}  // namespace kvcanary::auditor
