// A campaign against a provider that rate-limits and bills (docs/targets.md,
// "Rate limits and budgets"): its 429s are waited out and sent again, shown
// per tenant and never counted as failures; --budget-tokens stops the
// campaign at its budget, the spend reported per tenant.
#include <string>

#include "auditor/campaign/campaign.h"
#include "auditor/reports/metrics.h"
#include "auditor/reports/report.h"
#include "auditor/reports/result_text.h"
#include "gtest/gtest.h"
#include "tests/auditor/campaign/campaign_fixtures.h"
#include "tests/auditor/fakes/fake_target.h"

namespace kvcanary::auditor {
namespace {

using testing::FakeTarget;
using testing::FakeTargetOptions;
using testing::Flavor;
using namespace campaign_fixtures;  // NOLINT: the fixtures of every test here

int64_t Sum(const CampaignResult& r, int64_t TenantSpend::*field) {
  int64_t total = 0;
  for (const auto& [tenant, s] : r.spend) total += s.*field;
  return total;
}

// One completion request in three is answered 429 with Retry-After: 1:
// every one is sent again after its wait, the rate is cut, and the
// campaign ends clean with every 429 shown under its tenant.
TEST(RateLimitCampaignTest, OneRequestInThreeRateLimitedEndsClean) {
  FakeTargetOptions fo = Fake(Flavor::kVllm);
  fo.rate_limit_every = 3;
  fo.retry_after_s = 1;
  FakeTarget target(fo);
  AuditorMetrics metrics;
  CampaignOptions o = Options(target.url(), "rate-limited");
  o.tenants.resize(2);
  o.floors = {{"", 4}};
  o.max_probes = 120;
  const CampaignResult r = RunCampaign(o, &metrics);
  ASSERT_EQ(r.verdict, Verdict::kClean) << Explain(r);
  // Every tenant was rate-limited and sent again; none of it a failure.
  ASSERT_EQ(r.spend.size(), o.tenants.size());
  for (const auto& [tenant, s] : r.spend) {
    EXPECT_GT(s.rate_limited, 0) << tenant;
    EXPECT_GT(s.retries, 0) << tenant;
    EXPECT_GT(s.prompt_tokens, 0) << tenant;
    EXPECT_GT(s.completion_tokens, 0) << tenant;
  }
  EXPECT_GT(r.rate_cuts, 0);
  EXPECT_GE(Sum(r, &TenantSpend::rate_limited), target.completions() / 3 - 1);
  EXPECT_EQ(r.by_outcome.count("transport_error"), 0u);
  EXPECT_FALSE(r.budget_reached);
  EXPECT_EQ(r.error, "");
  // Shown per tenant in the text, the HTML and the JSON.
  const std::string text = ResultText(r, 20);
  EXPECT_NE(text.find("RATE-LIMITED"), std::string::npos) << text;
  EXPECT_NE(HtmlReport(r.ToJson()).find("<h2>Spend</h2>"), std::string::npos);
  EXPECT_GT(r.ToJson()["spend"]["tenants"]["acme"]["rate_limited"], 0);
  const std::string scraped = metrics.Serialize();
  // All tenants together: no tenant is ever a label.
  EXPECT_NE(scraped.find("kvcanary_auditor_rate_limited_total "),
            std::string::npos)
      << scraped;
  EXPECT_NE(scraped.find("kvcanary_auditor_tokens_total{kind=\"completion\"}"),
            std::string::npos)
      << scraped;
  EXPECT_EQ(scraped.find("acme"), std::string::npos);
}

// --budget-tokens: the campaign spends no more than its budget, stops
// within one probe's tokens of it, and, its floors not reached, is
// inconclusive naming the budget.
TEST(RateLimitCampaignTest, ABudgetStopsTheCampaignWithinOneProbeOfIt) {
  FakeTargetOptions fo = Fake(Flavor::kVllm);
  FakeTarget target(fo);
  AuditorMetrics metrics;
  CampaignOptions o = Options(target.url(), "budget");
  o.budget_tokens = 60000;
  const CampaignResult r = RunCampaign(o, &metrics);
  ASSERT_TRUE(r.budget_reached) << Explain(r);
  EXPECT_EQ(r.budget_tokens, o.budget_tokens);
  EXPECT_LE(r.spent_tokens, o.budget_tokens);
  // One probe at most: the limit's prompt and the most any probe
  // generates.
  EXPECT_GE(r.spent_tokens, o.budget_tokens - (fo.limit_tokens + 64));
  EXPECT_EQ(r.spent_tokens, Sum(r, &TenantSpend::prompt_tokens) +
                                Sum(r, &TenantSpend::completion_tokens));
  EXPECT_EQ(r.verdict, Verdict::kInconclusive) << Explain(r);
  ASSERT_FALSE(r.reasons.empty());
  EXPECT_NE(r.reasons.back().find("token budget: "), std::string::npos)
      << r.reasons.back();
}

// A budget smaller than calibration needs: nothing is probed, and the
// campaign is an error naming the budget, never clean or inconclusive.
TEST(RateLimitCampaignTest, ABudgetSpentDuringCalibrationIsAnError) {
  FakeTarget target(Fake(Flavor::kVllm));
  AuditorMetrics metrics;
  CampaignOptions o = Options(target.url(), "budget-calibration");
  o.budget_tokens = 2000;
  const CampaignResult r = RunCampaign(o, &metrics);
  EXPECT_EQ(r.verdict, Verdict::kError) << Explain(r);
  EXPECT_TRUE(r.budget_reached);
  EXPECT_LE(r.spent_tokens, o.budget_tokens);
  EXPECT_EQ(r.probes, 0);
  EXPECT_NE(r.error.find("--budget-tokens=2000 spent during calibration"),
            std::string::npos)
      << r.error;
  // The error result still says what was spent.
  EXPECT_EQ(r.ToJson()["spend"]["budget_reached"], true);
}

}  // namespace
}  // namespace kvcanary::auditor
