// cache-audit --salts against scripted fakes (tests/auditor/fakes/
// fake_target.h): a cache salted per key and then per body salt (scoped) is
// isolated with same-salt hits proven; vLLM's salt (block 0's hash, no
// tenant) is forgeable; salts ignored share across salts of one tenant; a
// gateway whose body salt overrides its tenant header is found; a second
// tier that drops the salt leaks what spilled; each over chat completions
// through a template as over text completions. Timing-sensitive: label
// `timing`.
#include <string>

#include "auditor/audits/cache_audit/cache_audit.h"
#include "auditor/reports/result_text.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/auditor/fakes/fake_target.h"
#include "tests/temp_path.h"

namespace kvcanary::auditor {
namespace {

using testing::FakeTarget;
using testing::FakeTargetOptions;
using testing::Flavor;
using testing::SaltMode;

AuditTenant Tenant(std::string name, std::string key, std::string salt,
                   bool gateway = false) {
  AuditTenant t;
  t.name = std::move(name);
  t.api_key = std::move(key);
  t.cache_salt = std::move(salt);
  t.gateway = gateway;
  return t;
}

// A miss costs ~11 ms of "prefill", a hit ~2.5 ms (cache_audit_fake_test).
FakeTargetOptions Fake(SaltMode mode) {
  FakeTargetOptions o;
  o.flavor = Flavor::kVllm;
  o.limit_tokens = 160;
  o.base_ms = 1;
  o.prefill_us_per_token = 100;
  o.api_keys = {{"sk-a", "acme"}, {"sk-g", "globex"}, {"sk-e", "edge"}};
  o.per_key_prompt_cache = true;
  o.salt_mode = mode;
  return o;
}

CacheAuditOptions Options(const FakeTarget& t, const std::string& name,
                          bool gateway = false) {
  CacheAuditOptions o;
  o.target.target = t.url();
  o.target.tenants = {Tenant("acme", "sk-a", "acme-salt"),
                      Tenant("globex", "sk-g", "globex-salt"),
                      Tenant("edge", "sk-e", "", /*gateway=*/true)};
  o.db_path = testing_paths::UniqueTempPath("kvcanary-salts", name + ".db");
  o.progress = false;
  o.seed = 1;
  o.salts = true;
  if (gateway) o.salt = {"x-tenant", "edge"};
  return o;
}

std::string Explain(const CampaignResult& r) {
  return ResultText(r, 20) + r.details.dump(2);
}

std::string LevelOf(const CampaignResult& r, const std::string& check) {
  return r.details["checks"][check]["level"].get<std::string>();
}

int FindingsOfKind(const CampaignResult& r, const std::string& kind) {
  int n = 0;
  for (const Finding& f : r.findings) n += f.kind == kind;
  return n;
}

TEST(CacheAuditSaltsFakeTest, ScopedSaltsAreIsolatedWithSameSaltHitsProven) {
  FakeTargetOptions fo = Fake(SaltMode::kScoped);
  fo.tenant_header = "x-tenant";  // a gateway that honours its header
  FakeTarget target(fo);
  AuditorMetrics metrics;
  const CampaignResult r =
      RunCacheAudit(Options(target, "scoped", /*gateway=*/true), &metrics);
  ASSERT_EQ(r.verdict, Verdict::kClean) << Explain(r);
  EXPECT_EQ(r.exit_code(), 0);
  for (const char* check :
       {"salt_tenants", "salt_salts", "salt_forged", "salt_gateway"}) {
    EXPECT_EQ(LevelOf(r, check), "same-tenant") << check;
  }
  ASSERT_EQ(r.detectors.size(), 5u);
  for (const DetectorCoverage& d : r.detectors) {
    EXPECT_EQ(d.state, DetectorState::kActive) << d.name << Explain(r);
  }
  ASSERT_EQ(r.checks.size(), 5u);
  EXPECT_EQ(r.checks[0].check, "salt_same");
  for (const Check& c : r.checks) EXPECT_EQ(c.state, "passed") << c.check;
}

TEST(CacheAuditSaltsFakeTest, VllmSaltsAreForgeable) {
  FakeTargetOptions fo = Fake(SaltMode::kVllm);
  fo.per_key_prompt_cache = false;  // vLLM: one cache, the salt its only key
  fo.shared_prompt_cache = true;
  fo.report_cached_tokens = true;
  FakeTarget target(fo);
  AuditorMetrics metrics;
  const CampaignResult r = RunCacheAudit(Options(target, "vllm"), &metrics);
  ASSERT_EQ(r.verdict, Verdict::kFindings) << Explain(r);
  EXPECT_EQ(r.exit_code(), 1);
  EXPECT_EQ(LevelOf(r, "salt_tenants"), "same-tenant");
  EXPECT_EQ(LevelOf(r, "salt_salts"), "same-tenant");
  EXPECT_EQ(LevelOf(r, "salt_forged"), "cross-tenant");
  ASSERT_GE(FindingsOfKind(r, "salt_forgeable"), 1) << Explain(r);
  for (const Finding& f : r.findings) {
    EXPECT_EQ(f.kind, "salt_forgeable");
    EXPECT_EQ(f.severity, Severity::kCritical);
    EXPECT_EQ(f.detector, "salt_forged");
    EXPECT_EQ(f.writer, "acme");
    EXPECT_EQ(f.reader, "globex (acme's salt)");
  }
}

// The same checks over chat completions, on servers that serve only them
// through a template whose header every request of a salt shares: the
// header is the shared head, the salts' verdicts are the same as over text
// completions.
TEST(CacheAuditSaltsFakeTest, ScopedSaltsOverChatAreIsolated) {
  FakeTargetOptions fo = testing::ChatOnly(Fake(SaltMode::kScoped));
  fo.tenant_header = "x-tenant";
  FakeTarget target(fo);
  AuditorMetrics metrics;
  const CampaignResult r =
      RunCacheAudit(Options(target, "scoped-chat", /*gateway=*/true), &metrics);
  ASSERT_EQ(r.verdict, Verdict::kClean) << Explain(r);
  EXPECT_EQ(r.api, "chat");
  for (const char* check :
       {"salt_tenants", "salt_salts", "salt_forged", "salt_gateway"}) {
    EXPECT_EQ(LevelOf(r, check), "same-tenant") << check;
  }
  for (const Check& c : r.checks) EXPECT_EQ(c.state, "passed") << c.check;
}

TEST(CacheAuditSaltsFakeTest, VllmSaltsOverChatAreForgeable) {
  FakeTargetOptions fo = testing::ChatOnly(Fake(SaltMode::kVllm));
  fo.per_key_prompt_cache = false;
  fo.shared_prompt_cache = true;
  fo.report_cached_tokens = true;
  FakeTarget target(fo);
  AuditorMetrics metrics;
  const CampaignResult r =
      RunCacheAudit(Options(target, "vllm-chat"), &metrics);
  ASSERT_EQ(r.verdict, Verdict::kFindings) << Explain(r);
  EXPECT_EQ(r.api, "chat");
  EXPECT_EQ(LevelOf(r, "salt_tenants"), "same-tenant");
  EXPECT_EQ(LevelOf(r, "salt_forged"), "cross-tenant");
  for (const Finding& f : r.findings) EXPECT_EQ(f.kind, "salt_forgeable");
}

TEST(CacheAuditSaltsFakeTest, IgnoredSaltsShareAcrossOneTenantsSalts) {
  FakeTarget target(Fake(SaltMode::kIgnore));
  AuditorMetrics metrics;
  const CampaignResult r = RunCacheAudit(Options(target, "ignore"), &metrics);
  ASSERT_EQ(r.verdict, Verdict::kFindings) << Explain(r);
  EXPECT_EQ(LevelOf(r, "salt_salts"), "cross-tenant");
  EXPECT_EQ(LevelOf(r, "salt_tenants"), "same-tenant");
  EXPECT_EQ(LevelOf(r, "salt_forged"), "same-tenant");
  EXPECT_EQ(FindingsOfKind(r, "cross_salt_cache_hit"), 1) << Explain(r);
  EXPECT_EQ(r.findings.size(), 1u);
}

TEST(CacheAuditSaltsFakeTest, GatewayWhoseBodySaltOverridesTheHeaderIsFound) {
  FakeTargetOptions fo = Fake(SaltMode::kVllm);
  fo.tenant_header = "x-tenant";
  FakeTarget target(fo);
  AuditorMetrics metrics;
  const CampaignResult r =
      RunCacheAudit(Options(target, "gateway", /*gateway=*/true), &metrics);
  ASSERT_EQ(r.verdict, Verdict::kFindings) << Explain(r);
  EXPECT_EQ(LevelOf(r, "salt_gateway"), "cross-tenant");
  EXPECT_EQ(FindingsOfKind(r, "gateway_salt_override"), 1) << Explain(r);
}

TEST(CacheAuditSaltsFakeTest, GatewayFlagsNeedAGatewayTenant) {
  FakeTarget target(Fake(SaltMode::kScoped));
  CacheAuditOptions o = Options(target, "gateway-bad", /*gateway=*/true);
  o.salt.gateway_tenant = "acme";  // not marked "gateway": true
  AuditorMetrics metrics;
  const CampaignResult r = RunCacheAudit(o, &metrics);
  EXPECT_EQ(r.verdict, Verdict::kError) << Explain(r);
  EXPECT_NE(r.error.find("\"gateway\": true"), std::string::npos) << r.error;
}

TEST(CacheAuditSaltsFakeTest, SecondTierThatDropsTheSaltLeaksWhatSpilled) {
  FakeTargetOptions fo = Fake(SaltMode::kScoped);
  fo.gpu_tier_blocks = 2;  // a prime spills at once
  fo.cpu_tier_drops_salt = true;
  FakeTarget target(fo);
  AuditorMetrics metrics;
  const CampaignResult r = RunCacheAudit(Options(target, "tier"), &metrics);
  ASSERT_EQ(r.verdict, Verdict::kFindings) << Explain(r);
  EXPECT_EQ(LevelOf(r, "salt_tenants"), "cross-tenant");
  EXPECT_EQ(FindingsOfKind(r, "cross_salt_cache_hit"), 2) << Explain(r);
  EXPECT_EQ(FindingsOfKind(r, "salt_forgeable"), 1) << Explain(r);
}

TEST(CacheAuditSaltsFakeTest, GatewayThatIgnoresItsHeaderIsFound) {
  // The header is not read: every request of the gateway's key is one
  // tenant, so a body salt alone decides whose cache it reaches.
  FakeTarget target(Fake(SaltMode::kScoped));
  AuditorMetrics metrics;
  const CampaignResult r = RunCacheAudit(
      Options(target, "gateway-deaf", /*gateway=*/true), &metrics);
  ASSERT_EQ(r.verdict, Verdict::kFindings) << Explain(r);
  EXPECT_EQ(LevelOf(r, "salt_gateway"), "cross-tenant");
  EXPECT_EQ(LevelOf(r, "salt_forged"), "same-tenant");
  EXPECT_EQ(FindingsOfKind(r, "gateway_salt_override"), 1) << Explain(r);
}

TEST(CacheAuditSaltsFakeTest, SecondTierKeepingTheSaltIsIsolated) {
  FakeTargetOptions fo = Fake(SaltMode::kScoped);
  fo.gpu_tier_blocks = 2;
  FakeTarget target(fo);
  AuditorMetrics metrics;
  const CampaignResult r = RunCacheAudit(Options(target, "tier-ok"), &metrics);
  ASSERT_EQ(r.verdict, Verdict::kClean) << Explain(r);
}

// SGLang's HiCache as the fake states it (/get_server_info
// enable_hierarchical_cache, and the device pool's max_total_num_tokens: 12
// blocks of 16, room for a prime of about 120 tokens): a prime probed at
// once is still in the first tier, so only fillers that push it out reach
// the second.
FakeTargetOptions SglangTiers(bool drops_salt) {
  FakeTargetOptions fo = Fake(SaltMode::kScoped);
  fo.flavor = Flavor::kSglang;
  fo.gpu_tier_blocks = 12;
  fo.cpu_tier_drops_salt = drops_salt;
  return fo;
}

bool HasReason(const CampaignResult& r, const std::string& part) {
  for (const std::string& reason : r.reasons) {
    if (reason.find(part) != std::string::npos) return true;
  }
  return false;
}

TEST(CacheAuditSaltsFakeTest, AStatedSecondTierLeftUncheckedIsInconclusive) {
  FakeTarget target(SglangTiers(/*drops_salt=*/false));
  CacheAuditOptions o = Options(target, "tier-unchecked");
  o.evict_tokens = 0;
  AuditorMetrics metrics;
  const CampaignResult r = RunCacheAudit(o, &metrics);
  ASSERT_EQ(r.verdict, Verdict::kInconclusive) << Explain(r);
  EXPECT_TRUE(HasReason(r, "enable_hierarchical_cache")) << Explain(r);
  EXPECT_TRUE(HasReason(r, "below the first tier's 192 tokens")) << Explain(r);
}

TEST(CacheAuditSaltsFakeTest, FillersFromTheStatedTiersFindATierDroppingSalts) {
  FakeTarget target(SglangTiers(/*drops_salt=*/true));
  AuditorMetrics metrics;
  const CampaignResult r =
      RunCacheAudit(Options(target, "tier-default"), &metrics);
  ASSERT_EQ(r.verdict, Verdict::kFindings) << Explain(r);
  EXPECT_EQ(LevelOf(r, "salt_tenants"), "cross-tenant");
  const nlohmann::json& evict = r.details["checks"]["salt_tenants"]["evict"];
  EXPECT_EQ(evict["evict_tokens"], 240) << evict.dump();  // 1.25 x 192
  EXPECT_GT(evict["requests"].get<int>(), 0) << evict.dump();
  EXPECT_NE(evict["evict_tokens_from"].get<std::string>().find(
                "max_total_num_tokens"),
            std::string::npos)
      << evict.dump();
}

TEST(CacheAuditSaltsFakeTest, AHealthyStatedSecondTierIsCheckedByDefault) {
  FakeTarget target(SglangTiers(/*drops_salt=*/false));
  AuditorMetrics metrics;
  const CampaignResult r =
      RunCacheAudit(Options(target, "tier-default-ok"), &metrics);
  ASSERT_EQ(r.verdict, Verdict::kClean) << Explain(r);
  EXPECT_GT(r.details["checks"]["salt_tenants"]["evict"]["requests"].get<int>(),
            0);
}

// --evict-tokens over chat: the fillers that push a prime out of the first
// tier go through the template too, and a tier that drops the salt is
// found as over text completions; a healthy one is clean.
TEST(CacheAuditSaltsFakeTest, FillersOverChatFindATierDroppingSalts) {
  FakeTarget target(testing::ChatOnly(SglangTiers(/*drops_salt=*/true)));
  AuditorMetrics metrics;
  const CampaignResult r =
      RunCacheAudit(Options(target, "tier-chat"), &metrics);
  ASSERT_EQ(r.verdict, Verdict::kFindings) << Explain(r);
  EXPECT_EQ(r.api, "chat");
  EXPECT_EQ(LevelOf(r, "salt_tenants"), "cross-tenant");
  EXPECT_GT(r.details["checks"]["salt_tenants"]["evict"]["requests"].get<int>(),
            0);
}

TEST(CacheAuditSaltsFakeTest, AHealthyStatedSecondTierOverChatIsClean) {
  FakeTarget target(testing::ChatOnly(SglangTiers(/*drops_salt=*/false)));
  AuditorMetrics metrics;
  const CampaignResult r =
      RunCacheAudit(Options(target, "tier-chat-ok"), &metrics);
  ASSERT_EQ(r.verdict, Verdict::kClean) << Explain(r);
  EXPECT_EQ(r.api, "chat");
  EXPECT_GT(r.details["checks"]["salt_tenants"]["evict"]["requests"].get<int>(),
            0);
}

}  // namespace
}  // namespace kvcanary::auditor
