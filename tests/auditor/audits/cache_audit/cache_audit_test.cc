// cache-audit's use of its target that does not depend on timing (the
// timing tests are in tests/timing): every key checked before sampling,
// base URLs ending in /v1, and the cached-token signal read from llama.cpp's
// timings.prompt_n where the server sends no prompt_tokens_details. The
// fakes here have no prefill cost at all, so only reported counts can show
// a cache.
#include "auditor/audits/cache_audit/cache_audit.h"

#include <unistd.h>

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
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

std::string Db(const std::string& name) {
  return testing_paths::UniqueTempPath("kvcanary-cache-audit-unit",
                                       name + ".db");
}

// llama.cpp's server as builds before usage_json_oaicompat answer: usage
// without prompt_tokens_details, `timings` on the last chunk; its slot
// cache reuses a prompt's common prefix token by token.
FakeTargetOptions LlamaTimingsOnly() {
  FakeTargetOptions o;
  o.flavor = Flavor::kLlamaCpp;
  o.limit_tokens = 160;
  o.base_ms = 0;
  o.prefill_us_per_token = 0;  // no timing signal: counts only
  o.llama_prompt_tokens_details = false;
  o.cache_block_tokens = 1;
  o.api_keys = {{"sk-a", "acme"},
                {"sk-g", "globex"},
                {"sk-i", "initech"},
                {"sk-u", "umbrella"}};
  return o;
}

CacheAuditOptions Options(const std::string& url, const std::string& name) {
  CacheAuditOptions o;
  o.target.target = url;
  o.target.tenants = {{"acme", "sk-a"},
                      {"globex", "sk-g"},
                      {"initech", "sk-i"},
                      {"umbrella", "sk-u"}};
  o.db_path = Db(name);
  o.progress = false;
  o.seed = 1;
  o.max_samples = 40;
  return o;
}

std::string Explain(const CampaignResult& r) {
  return ResultText(r, 20) + r.details.dump(2);
}

const DetectorCoverage* Detector(const CampaignResult& r,
                                 const std::string& name) {
  for (const DetectorCoverage& d : r.detectors) {
    if (d.name == name) return &d;
  }
  return nullptr;
}

// Issue 22 (f): the cached-token signal is active against llama.cpp's
// server, read as usage.prompt_tokens - timings.prompt_n, and convicts a
// prompt cache shared across tenants on its own.
TEST(CacheAuditTest, LlamaCppTimingsPromptNIsTheCachedTokenSignal) {
  FakeTargetOptions fo = LlamaTimingsOnly();
  fo.shared_prompt_cache = true;
  FakeTarget target(fo);
  AuditorMetrics metrics;
  const CampaignResult r =
      RunCacheAudit(Options(target.url(), "timings"), &metrics);
  ASSERT_EQ(r.verdict, Verdict::kFindings) << Explain(r);
  EXPECT_EQ(r.details["level"], "cross-tenant");
  EXPECT_EQ(r.details["cached_tokens_from"], "timings.prompt_n");
  EXPECT_NE(r.details["fired_by"].get<std::string>().find("cached_tokens"),
            std::string::npos)
      << Explain(r);
  const DetectorCoverage* cached = Detector(r, "cached_tokens");
  ASSERT_NE(cached, nullptr);
  EXPECT_EQ(cached->state, DetectorState::kActive) << cached->reason;
  EXPECT_EQ(cached->stats["from"], "timings.prompt_n");
  EXPECT_GT(r.details["cached_tokens"]["same_tenant"]["hits"].get<int>(), 0);
  EXPECT_GT(r.details["cached_tokens"]["cross_tenant"]["hits"].get<int>(), 0);
  bool finding = false;
  for (const Finding& f : r.findings) {
    finding = finding || (f.detector == "cached_tokens" &&
                          f.kind == "cross_tenant_cache_hit" &&
                          f.writer == "acme" && f.reader == "globex");
  }
  EXPECT_TRUE(finding) << Explain(r);
}

// The same server salted per key: A's repeats report cached tokens (the
// signal's positive control), B's probes of A's prefixes never do.
TEST(CacheAuditTest, LlamaCppTimingsShowSameTenantHitsAndNoCrossTenantOnes) {
  FakeTargetOptions fo = LlamaTimingsOnly();
  fo.per_key_prompt_cache = true;
  FakeTarget target(fo);
  AuditorMetrics metrics;
  const CampaignResult r =
      RunCacheAudit(Options(target.url(), "timings-per-key"), &metrics);
  EXPECT_TRUE(r.findings.empty()) << Explain(r);
  const DetectorCoverage* cached = Detector(r, "cached_tokens");
  ASSERT_NE(cached, nullptr);
  EXPECT_TRUE(cached->disabled.empty()) << cached->disabled;
  EXPECT_EQ(cached->state, DetectorState::kActive) << cached->reason;
  EXPECT_GT(r.details["cached_tokens"]["same_tenant"]["hits"].get<int>(), 0);
  EXPECT_EQ(r.details["cached_tokens"]["cross_tenant"]["hits"], 0);
}

// The same, on a server that serves only chat completions through a
// template: audited over chat (--api=auto), the template's header (cached
// for every request of a key) counted as the shared head, its cache read
// the same way.
TEST(CacheAuditTest, AChatOnlyTargetIsAuditedOverChat) {
  FakeTargetOptions fo = LlamaTimingsOnly();
  fo.per_key_prompt_cache = true;
  fo = testing::ChatOnly(fo);
  FakeTarget target(fo);
  AuditorMetrics metrics;
  const CampaignResult r =
      RunCacheAudit(Options(target.url(), "chat-per-key"), &metrics);
  EXPECT_TRUE(r.findings.empty()) << Explain(r);
  EXPECT_EQ(r.api, "chat");
  const DetectorCoverage* cached = Detector(r, "cached_tokens");
  ASSERT_NE(cached, nullptr);
  EXPECT_EQ(cached->state, DetectorState::kActive) << cached->reason;
  EXPECT_GT(r.details["cached_tokens"]["same_tenant"]["hits"].get<int>(), 0);
  EXPECT_EQ(r.details["cached_tokens"]["cross_tenant"]["hits"], 0);
}

// Every flavour's chat-only fake with a cache per key, through its
// template: no finding, the API named (timing stays undecided at this
// suite's --max-samples).
TEST(CacheAuditTest, EveryFlavoursChatOnlyFakeHasNoFindingOverChat) {
  for (Flavor flavor : {Flavor::kVllm, Flavor::kSglang, Flavor::kLlamaCpp,
                        Flavor::kTgi, Flavor::kOllama}) {
    SCOPED_TRACE(testing::FlavorName(flavor));
    FakeTargetOptions fo = LlamaTimingsOnly();
    fo.flavor = flavor;
    fo.per_key_prompt_cache = true;
    FakeTarget target(testing::ChatOnly(fo));
    AuditorMetrics metrics;
    const CampaignResult r = RunCacheAudit(
        Options(target.url(),
                absl::StrCat("chat-", testing::FlavorName(flavor))),
        &metrics);
    EXPECT_TRUE(r.findings.empty()) << Explain(r);
    EXPECT_NE(r.verdict, Verdict::kError) << Explain(r);
    EXPECT_EQ(r.api, "chat");
  }
}

// A /v1/completions answering a non-OpenAI 200: audited over llama.cpp's
// own shape (its timings the cached-token signal), or over chat where the
// shape is unknown; no finding, the cached-token check active, the API
// named.
TEST(CacheAuditTest, ANonOpenAiCompletionsBodyIsAuditedOverTheApiAutoChose) {
  for (const auto& [route, api] :
       {std::pair{testing::CompletionsRoute::kLlamaNative, "completions"},
        std::pair{testing::CompletionsRoute::kUnknownShape, "chat"}}) {
    SCOPED_TRACE(api);
    FakeTargetOptions fo = LlamaTimingsOnly();
    fo.per_key_prompt_cache = true;
    fo.completions_route = route;
    fo.chat_template = true;
    FakeTarget target(fo);
    AuditorMetrics metrics;
    const CampaignResult r = RunCacheAudit(
        Options(target.url(), std::string("shape-") + api), &metrics);
    EXPECT_TRUE(r.findings.empty()) << Explain(r);
    EXPECT_EQ(r.api, api);
    // (Timing stays undecided at this suite's --max-samples; the timing
    // label's tests decide it.)
    const DetectorCoverage* cached = Detector(r, "cached_tokens");
    ASSERT_NE(cached, nullptr);
    EXPECT_EQ(cached->state, DetectorState::kActive) << cached->reason;
    EXPECT_EQ(r.details["cached_tokens"]["cross_tenant"]["hits"], 0);
  }
}

// Issue 22 (c): a wrong key for the last of four tenants, which
// cache-audit does not use, still stops it before the first sample.
TEST(CacheAuditTest, AWrongKeyForTheLastOfFourTenantsIsAnErrorNamingIt) {
  FakeTarget target(LlamaTimingsOnly());
  CacheAuditOptions o = Options(target.url(), "wrong-last-key");
  o.target.tenants[3].api_key = "sk-WRONG";
  AuditorMetrics metrics;
  const CampaignResult r = RunCacheAudit(o, &metrics);
  EXPECT_EQ(r.verdict, Verdict::kError) << Explain(r);
  EXPECT_EQ(r.exit_code(), 2);
  ASSERT_FALSE(r.reasons.empty());
  EXPECT_TRUE(absl::StrContains(r.reasons[0], "'umbrella'")) << r.reasons[0];
  EXPECT_EQ(target.completions(), 4);  // the key checks, no sample
}

// Issue 22 (d), and the tenants it used, named.
TEST(CacheAuditTest, ABaseUrlEndingInV1WorksAndTheTenantsUsedAreNamed) {
  FakeTargetOptions fo = LlamaTimingsOnly();
  fo.shared_prompt_cache = true;
  FakeTarget target(fo);
  AuditorMetrics metrics;
  const CampaignResult r =
      RunCacheAudit(Options(target.url() + "/v1/", "v1"), &metrics);
  ASSERT_EQ(r.verdict, Verdict::kFindings) << Explain(r);
  EXPECT_EQ(r.target, target.url());
  EXPECT_EQ(r.details["tenants"],
            "4 keys checked; used: acme (A, writer), globex (B, reader); not "
            "used: initech, umbrella");
  EXPECT_NE(ResultText(r, 20).find("tenants: 4 keys checked"),
            std::string::npos);
}

}  // namespace
}  // namespace kvcanary::auditor
