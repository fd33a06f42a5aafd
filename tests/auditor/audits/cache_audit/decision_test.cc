// cache-audit's statistics and reporting on made-up samples (no target, no
// clock): the look schedule, the level each pattern of arms supports, the
// cached-token signal, the detectors and the findings; and the options it
// refuses before sending anything.
#include "auditor/audits/cache_audit/decision.h"

#include <unistd.h>

#include <random>
#include <string>
#include <vector>

#include "auditor/audits/cache_audit/cache_audit.h"
#include "auditor/audits/cache_audit/report.h"
#include "common/stats.h"
#include "gtest/gtest.h"
#include "tests/auditor/fakes/fake_target.h"

namespace kvcanary::auditor {
namespace {

constexpr double kAlpha = 1e-6;

// n first-token times: a `hit_share` of them hits (~2 ms), the rest misses
// (~10 ms), spread a little and interleaved.
std::vector<double> Times(int n, double hit_share) {
  std::vector<double> v;
  const int hits = static_cast<int>(hit_share * n + 0.5);
  for (int i = 0; i < n; ++i) {
    const double jitter = 0.01 * ((i * 37) % 50);
    v.push_back((i * hits) / n != ((i + 1) * hits) / n ? 2 + jitter
                                                       : 10 + jitter);
  }
  return v;
}

struct Arms {
  ArmSamples arms[kCacheArms];
  // Arms of n samples each, with these hit shares; cached tokens not
  // reported.
  Arms(int n, double same, double cross) {
    const double share[kCacheArms] = {0, 0, same, cross};
    for (int a = 0; a < kCacheArms; ++a) {
      arms[a].ttft_ms = Times(n, share[a]);
      arms[a].cached_tokens.assign(n, -1);
      arms[a].attempts = n;
      arms[a].probes = n;
    }
  }
};

std::optional<SharingLevel> Decide(const Arms& a, double alpha_per_look,
                                   bool last) {
  const LookTests t = RunLookTests(a.arms, alpha_per_look);
  return DecideLevel(t, ReadCachedTokens(a.arms, 100), alpha_per_look, last);
}

TEST(CacheAuditPlanTest, LooksGrowToMaxSamplesAndIncludeTheIsolationSize) {
  auto plan = PlanLooks(kAlpha, 400);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_GE(plan->looks.size(), 2u);
  EXPECT_EQ(plan->looks.back(), 400);
  EXPECT_TRUE(std::is_sorted(plan->looks.begin(), plan->looks.end()));
  // Bonferroni over the looks: each at alpha / looks (or less).
  EXPECT_LE(plan->alpha_per_look * plan->looks.size(), kAlpha * 1.0000001);
  EXPECT_LE(KsMinPValue(plan->reach, plan->reach, KsAlternative::kLess),
            plan->alpha_per_look);
  EXPECT_GE(plan->looks.front(), 2 * plan->reach);
  ASSERT_GT(plan->isolation_samples, 0);
  EXPECT_TRUE(std::count(plan->looks.begin(), plan->looks.end(),
                         plan->isolation_samples));
  EXPECT_LE(IsolationSensitivity(plan->isolation_samples, plan->alpha_per_look),
            kIsolationSensitivity);
  // One fewer would not have the power (the bisection's least).
  EXPECT_GT(
      IsolationSensitivity(plan->isolation_samples - 1, plan->alpha_per_look),
      kIsolationSensitivity);
}

TEST(CacheAuditPlanTest, SensitivityHasThePowerItStates) {
  // At the isolation size, B hitting at kIsolationSensitivity reaches the
  // smallest significant D with probability >= kIsolationPower; the bare
  // significance threshold (the old rule) would have had about half that.
  const LookPlan plan = *PlanLooks(kAlpha, 400);
  const int n = plan.isolation_samples;
  const double d =
      KsSmallestSignificantD(n, plan.alpha_per_look, KsAlternative::kLess);
  EXPECT_LT(d, kIsolationSensitivity - 0.05);
  EXPECT_EQ(IsolationSensitivity(5, plan.alpha_per_look), 2);  // none can
}

TEST(CacheAuditPlanTest, RefusesMaxSamplesThatCannotReachAlpha) {
  // 12 per arm is the least that can reach 1e-6 (ks_test_test.cc).
  EXPECT_FALSE(PlanLooks(kAlpha, 11).ok());
  auto tight = PlanLooks(kAlpha, 12);
  ASSERT_TRUE(tight.ok()) << tight.status();
  EXPECT_EQ(tight->looks, std::vector<int>{12});
  EXPECT_EQ(tight->isolation_samples, 0);  // 12 can never vouch for it
  // The exact p-values' cost caps the samples.
  EXPECT_TRUE(PlanLooks(kAlpha, kMaxSamplesPerArm).ok());
  const auto huge = PlanLooks(kAlpha, kMaxSamplesPerArm + 1);
  ASSERT_FALSE(huge.ok());
  EXPECT_NE(huge.status().message().find("more than 2000"), std::string::npos);
}

TEST(CacheAuditDecisionTest, CrossTenantHitsAreCrossTenantAtTheFirstLook) {
  const LookPlan plan = *PlanLooks(kAlpha, 400);
  const Arms a(plan.looks.front(), 1, 1);
  EXPECT_EQ(Decide(a, plan.alpha_per_look, false), SharingLevel::kCrossTenant);
}

TEST(CacheAuditDecisionTest, IsolationWaitsForItsSensitivity) {
  const LookPlan plan = *PlanLooks(kAlpha, 400);
  // Too few to vouch: keep sampling; if it is the last look, undecided.
  const Arms early(plan.looks.front(), 1, 0);
  EXPECT_EQ(Decide(early, plan.alpha_per_look, false), std::nullopt);
  EXPECT_EQ(Decide(early, plan.alpha_per_look, true), SharingLevel::kUndecided);
  const Arms enough(plan.isolation_samples, 1, 0);
  EXPECT_EQ(Decide(enough, plan.alpha_per_look, false),
            SharingLevel::kSameTenant);
}

TEST(CacheAuditDecisionTest, HalfOfTheSameTenantHitRateIsFoundNotIsolated) {
  // At the size that vouches for isolation, B hitting half as often as A
  // is a finding.
  const LookPlan plan = *PlanLooks(kAlpha, 400);
  const Arms a(plan.isolation_samples, 1, 0.5);
  EXPECT_EQ(Decide(a, plan.alpha_per_look, false), SharingLevel::kCrossTenant);
}

TEST(CacheAuditDecisionTest, RandomlySpreadHalfRateHitsAreFoundWithPower) {
  // A hits every time, B's probes each hit with probability 1/2 at
  // random, at the size that vouches for isolation: found (cross-tenant)
  // in about 95% of runs (the power), vouched for in the rest at most (a
  // threshold of bare significance would vouch about half the time).
  const LookPlan plan = *PlanLooks(kAlpha, 400);
  const int n = plan.isolation_samples;
  std::mt19937_64 rng(20250610);
  std::bernoulli_distribution hit(kIsolationSensitivity);
  std::uniform_real_distribution<double> jitter(0, 0.5);
  constexpr int kRuns = 200;
  int found = 0, vouched = 0;
  for (int run = 0; run < kRuns; ++run) {
    Arms a(n, 1, 0);
    for (double& ms : a.arms[ArmIndex(CacheArm::kCross)].ttft_ms) {
      ms = (hit(rng) ? 2 : 10) + jitter(rng);
    }
    const auto level = Decide(a, plan.alpha_per_look, true);
    found += level == SharingLevel::kCrossTenant;
    vouched += level == SharingLevel::kSameTenant;
  }
  EXPECT_GE(found, kRuns * 93 / 100);
  EXPECT_LE(vouched, kRuns * 7 / 100);
}

TEST(CacheAuditDecisionTest, RareOwnHitsCannotVouchForIsolation) {
  // A hits a third of the time (three replicas, say): B never hitting at
  // 400 per arm does not show B would have.
  const LookPlan plan = *PlanLooks(kAlpha, 400);
  const Arms a(400, 1.0 / 3, 0);
  EXPECT_EQ(Decide(a, plan.alpha_per_look, true), SharingLevel::kUndecided);
  // And B hitting as often as A is found.
  const Arms shared(400, 1.0 / 3, 1.0 / 3);
  EXPECT_EQ(Decide(shared, plan.alpha_per_look, true),
            SharingLevel::kCrossTenant);
}

TEST(CacheAuditDecisionTest, NoHitsAnywhereIsNoneOnlyAtTheLastLook) {
  const LookPlan plan = *PlanLooks(kAlpha, 40);
  const Arms a(40, 0, 0);
  EXPECT_EQ(Decide(a, plan.alpha_per_look, false), std::nullopt);
  EXPECT_EQ(Decide(a, plan.alpha_per_look, true), SharingLevel::kNone);
}

TEST(CacheAuditDecisionTest, TenantsOfDifferentSpeedAreNotACache) {
  // B answers 3 ms faster than A, no cache: B's probes of A's prefixes
  // are compared with B's own misses, never with A's.
  Arms a(400, 0, 0);
  for (CacheArm arm : {CacheArm::kReaderControl, CacheArm::kCross}) {
    for (double& ms : a.arms[ArmIndex(arm)].ttft_ms) ms -= 3;
  }
  const LookPlan plan = *PlanLooks(kAlpha, 400);
  EXPECT_EQ(Decide(a, plan.alpha_per_look, true), SharingLevel::kNone);
}

TEST(CacheAuditCachedTokensTest, NotReportedIsNeverNoHit) {
  const Arms a(30, 0, 0);
  const CachedTokensSignal c = ReadCachedTokens(a.arms, 200);
  EXPECT_FALSE(c.any_reported);
  EXPECT_FALSE(c.usable);
  EXPECT_FALSE(c.cross_fired);
  CacheAuditOutcome o;
  o.writer = "acme";
  o.reader = "globex";
  o.cached = c;
  const DetectorCoverage d = CachedTokensCoverage(o);
  EXPECT_EQ(d.state, DetectorState::kDisabled);
  EXPECT_NE(d.reason.find("not reported"), std::string::npos);
}

TEST(CacheAuditCachedTokensTest, CrossHitsFireAndControlsSetTheBar) {
  Arms a(30, 0, 0);
  for (ArmSamples& s : a.arms) s.cached_tokens.assign(30, 0);
  a.arms[ArmIndex(CacheArm::kSame)].cached_tokens.assign(30, 192);
  a.arms[ArmIndex(CacheArm::kCross)].cached_tokens[7] = 192;
  CachedTokensSignal c = ReadCachedTokens(a.arms, 200);
  EXPECT_TRUE(c.usable);
  EXPECT_TRUE(c.positive_control);
  EXPECT_TRUE(c.cross_fired);
  EXPECT_EQ(c.hits[ArmIndex(CacheArm::kCross)], 1);
  EXPECT_EQ(DecideLevel(RunLookTests(a.arms, 1e-7), c, 1e-7, false),
            SharingLevel::kCrossTenant);
  // Controls that report as much (a template every prompt shares) make
  // the count meaningless: it fires nothing.
  a.arms[ArmIndex(CacheArm::kWriterControl)].cached_tokens.assign(30, 192);
  c = ReadCachedTokens(a.arms, 200);
  EXPECT_FALSE(c.usable);
  EXPECT_FALSE(c.cross_fired);
}

TEST(CacheAuditReportTest, CrossTenantFindingNamesWriterReaderAndProbe) {
  CacheAuditOutcome o;
  o.writer = "acme";
  o.reader = "globex";
  o.plan = *PlanLooks(kAlpha, 400);
  Arms a(30, 1, 1);
  for (ArmSamples& s : a.arms) s.cached_tokens.assign(30, 0);
  a.arms[ArmIndex(CacheArm::kCross)].cached_tokens[3] = 192;
  for (int i = 0; i < kCacheArms; ++i) o.arms[i] = a.arms[i];
  o.tests = RunLookTests(o.arms, o.plan.alpha_per_look);
  o.cached = ReadCachedTokens(o.arms, 200);
  o.level = SharingLevel::kCrossTenant;
  o.fired = {"cache_timing", "cached_tokens"};
  std::vector<int64_t> ids;
  for (int i = 0; i < 30; ++i) ids.push_back(100 + i);
  const Finding f = CrossTenantFinding(o, "cached_tokens", ids);
  EXPECT_EQ(f.kind, "cross_tenant_cache_hit");
  EXPECT_EQ(f.severity, Severity::kHigh);
  EXPECT_EQ(f.writer, "acme");
  EXPECT_EQ(f.reader, "globex");
  EXPECT_EQ(f.probe, 103);
  EXPECT_EQ(f.detail["cached_tokens"], 192);
  const DetectorCoverage timing = CacheTimingCoverage(o);
  EXPECT_EQ(timing.findings, 1);
  EXPECT_EQ(timing.state, DetectorState::kActive) << timing.reason;
  const nlohmann::json details = CacheAuditDetails(o);
  EXPECT_EQ(details["level"], "cross-tenant");
  EXPECT_EQ(details["fired_by"], "cache_timing, cached_tokens");
  EXPECT_EQ(CacheAuditChecks(o)[1].state, "failed");
}

TEST(CacheAuditRefusalTest, FisherExactGivesTheHypergeometricTail) {
  EXPECT_NEAR(FisherExactGreater(3, 3, 0, 3), 1.0 / 20, 1e-12);  // 1/C(6,3)
  EXPECT_NEAR(FisherExactGreater(0, 5, 0, 5), 1, 1e-12);
  EXPECT_NEAR(FisherExactGreater(0, 5, 3, 5), 1, 1e-12);
  EXPECT_EQ(FisherExactGreater(0, 0, 0, 5), 1);
  // 16 of 16 refused against 0 of 16: 1/C(32,16) ~ 1.7e-9.
  EXPECT_NEAR(FisherExactGreater(16, 16, 0, 16) * 601080390, 1, 1e-6);
}

// Arms where B's probes of A's prefixes failed `cross_failed` times of n,
// and B's control probes never.
CacheAuditOutcome RefusedOutcome(int n, int cross_failed) {
  CacheAuditOutcome o;
  o.writer = "acme";
  o.reader = "globex";
  o.max_samples = 400;
  o.plan = *PlanLooks(kAlpha, 400);
  const Arms a(n, 1, 0);
  for (int i = 0; i < kCacheArms; ++i) o.arms[i] = a.arms[i];
  ArmSamples& cross = o.arms[ArmIndex(CacheArm::kCross)];
  cross.ttft_ms.resize(n - cross_failed);
  cross.cached_tokens.resize(n - cross_failed);
  cross.failures[502] = cross_failed;
  cross.probes_failed = cross_failed;
  o.tests = RunLookTests(o.arms, o.plan.alpha_per_look);
  o.cached = ReadCachedTokens(o.arms, 100);
  return o;
}

TEST(CacheAuditRefusalTest, CrossProbesRefusedMoreThanControlsAreCrossTenant) {
  // Under the engine's --watermark=enforce a shared cache refuses the
  // cross-tenant read (502): the refusal tells B that A sent the prefix.
  CacheAuditOutcome o = RefusedOutcome(26, 26);
  EXPECT_LE(o.tests.refusal.p_value, o.plan.alpha_per_look);
  o.level = DecideLevel(o.tests, o.cached, o.plan.alpha_per_look, false);
  ASSERT_EQ(o.level, SharingLevel::kCrossTenant);
  o.fired = {"cache_refusal"};
  const Finding f = CrossTenantFinding(o, "cache_refusal", {7, 11});
  EXPECT_EQ(f.kind, "cross_tenant_cache_refusal");
  EXPECT_EQ(f.detector, "cache_timing");
  EXPECT_EQ(f.probe, 7);
  EXPECT_EQ(f.detail["cross_failures"]["502"], 26);
  const DetectorCoverage d = CacheTimingCoverage(o);
  EXPECT_EQ(d.findings, 1);
  bool named = false;
  for (const std::string& note : d.notes) {
    named |=
        note.find(
            "26 of 26 cross_tenant probes failed (HTTP 502 x26) "
            "while every reader_control probe succeeded") != std::string::npos;
  }
  EXPECT_TRUE(named) << d.reason;
  const nlohmann::json details = CacheAuditDetails(o);
  EXPECT_EQ(details["arms"]["cross_tenant"]["median_ms"], nullptr);
  EXPECT_NE(details["median_ttft_ms"].get<std::string>().find("cross_tenant -"),
            std::string::npos);
  EXPECT_EQ(CacheAuditChecks(o)[1].state, "failed");
}

TEST(CacheAuditRefusalTest, AnExcessOfCrossFailuresNeverVouchesForIsolation) {
  // One refused cross probe is no finding, but isolation is not vouched
  // for while B's probes of A's prefixes fail more than its misses.
  const LookPlan plan = *PlanLooks(kAlpha, 400);
  CacheAuditOutcome o = RefusedOutcome(plan.isolation_samples + 1, 1);
  EXPECT_GT(o.tests.refusal.p_value, plan.alpha_per_look);
  EXPECT_TRUE(o.tests.refusal.excess());
  EXPECT_EQ(DecideLevel(o.tests, o.cached, plan.alpha_per_look, false),
            std::nullopt);
  o.level = DecideLevel(o.tests, o.cached, plan.alpha_per_look, true);
  EXPECT_EQ(o.level, SharingLevel::kUndecided);
  const DetectorCoverage d = CacheTimingCoverage(o);
  EXPECT_NE(d.reason.find("failed more often (1 of"), std::string::npos)
      << d.reason;
  // Without the failure the same samples vouch for it.
  o = RefusedOutcome(plan.isolation_samples + 1, 0);
  EXPECT_EQ(DecideLevel(o.tests, o.cached, plan.alpha_per_look, false),
            SharingLevel::kSameTenant);
}

TEST(CacheAuditTest, ReaderKeyRefusedIsAnErrorNamingTheTenant) {
  // globex's key works at discovery, then is revoked: any 401/403 ends
  // the audit as an error (exit 2) naming the tenant, not a sample.
  testing::FakeTargetOptions fo;
  fo.prefill_us_per_token = 0;
  fo.api_keys = {{"sk-a", "acme"}, {"sk-g", "globex"}};
  fo.revoke_after_completions = 4;
  fo.revoked_key = "sk-g";
  testing::FakeTarget target(fo);
  CacheAuditOptions o;
  o.target.target = target.url();
  o.target.tenants = {{"acme", "sk-a"}, {"globex", "sk-g"}};
  o.db_path = ::testing::TempDir() + "/kvcanary-cache-revoked-" +
              std::to_string(getpid()) + ".db";
  o.progress = false;
  o.seed = 7;
  AuditorMetrics metrics;
  const CampaignResult r = RunCacheAudit(o, &metrics);
  EXPECT_EQ(r.verdict, Verdict::kError);
  EXPECT_EQ(r.exit_code(), 2);
  ASSERT_FALSE(r.reasons.empty());
  EXPECT_NE(r.reasons[0].find("refused tenant 'globex' key (HTTP 401"),
            std::string::npos)
      << r.reasons[0];
}

TEST(CacheAuditTest, RefusesOneTenantAndUnreachableAlphaBeforeSending) {
  AuditorMetrics metrics;
  CacheAuditOptions o;
  o.target.target = "http://127.0.0.1:1";  // never contacted
  o.target.tenants = {{"acme", "sk-a"}};
  o.db_path = ::testing::TempDir() + "/kvcanary-cache-refuse-" +
              std::to_string(getpid()) + ".db";
  o.progress = false;
  CampaignResult r = RunCacheAudit(o, &metrics);
  EXPECT_EQ(r.verdict, Verdict::kError);
  EXPECT_NE(r.reasons.at(0).find("two tenants"), std::string::npos);
  o.target.tenants.push_back({"globex", "sk-g"});
  o.max_samples = 8;
  r = RunCacheAudit(o, &metrics);
  EXPECT_EQ(r.verdict, Verdict::kError);
  EXPECT_NE(r.reasons.at(0).find("cannot reach alpha"), std::string::npos);
  EXPECT_EQ(r.command, "cache-audit");
}

}  // namespace
}  // namespace kvcanary::auditor
