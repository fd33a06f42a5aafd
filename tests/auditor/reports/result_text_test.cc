#include "auditor/reports/result_text.h"

#include <string>

#include "gtest/gtest.h"

namespace kvcanary::auditor {
namespace {

CampaignResult AcceptResult() {
  CampaignResult r;
  r.command = "accept";
  r.campaign_id = "c1";
  r.verdict = Verdict::kFindings;
  r.reasons = {"2 finding rows"};
  r.db_path = "ev.db";
  r.details = {{"limit", "256 prompt tokens"},
               {"requests", 12},
               {"sweep", {{"lengths", 3}}}};
  r.checks = {{"refusal", "length 257", "failed", "HTTP 200 past the limit"},
              {"golden", "length 31", "passed", ""},
              {"echo", "length 31, end", "skipped", "not covered"},
              {"echo", "length 48, end", "error", "HTTP 503"}};
  return r;
}

TEST(ResultTextTest, CommandsPrintTheirPlainDetailsAndTheChecksThatDidNotPass) {
  const std::string text = ResultText(AcceptResult(), 50);
  EXPECT_NE(text.find("accept c1: findings (exit 1)"), std::string::npos)
      << text;
  EXPECT_NE(text.find("limit: 256 prompt tokens\n"), std::string::npos);
  EXPECT_NE(text.find("requests: 12\n"), std::string::npos);
  EXPECT_EQ(text.find("sweep:"), std::string::npos) << "objects stay in JSON";
  EXPECT_NE(text.find("refusal"), std::string::npos);
  EXPECT_NE(text.find("HTTP 503"), std::string::npos);
  EXPECT_EQ(text.find("not covered"), std::string::npos) << "skipped: quiet";
  EXPECT_NE(text.find("checks: 4: 1 passed, 1 skipped, 2 failed or in error"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("findings because:\n  - 2 finding rows"),
            std::string::npos);
  EXPECT_NE(text.find("kvcanary-auditor findings --db ev.db --campaign c1"),
            std::string::npos);
}

TEST(ResultTextTest, CheckLinesPastTheCapPointToTheReports) {
  const std::string text = ResultText(AcceptResult(), 1);
  EXPECT_NE(text.find("refusal"), std::string::npos);
  EXPECT_EQ(text.find("HTTP 503"), std::string::npos) << text;
  EXPECT_NE(text.find("(more in the reports)"), std::string::npos);
}

TEST(ResultTextTest, AnErrorAfterFindingsIsPrintedBesideThem) {
  CampaignResult r = AcceptResult();
  r.error = "target down at 10:15:02: 20 requests in a row without an answer";
  r.audit_started = true;
  const std::string text = ResultText(r, 50);
  EXPECT_NE(text.find("accept c1: findings (exit 1)"), std::string::npos);
  EXPECT_NE(text.find("findings because:\n  - 2 finding rows"),
            std::string::npos);
  EXPECT_NE(text.find("error: target down at 10:15:02"), std::string::npos)
      << text;
  // Its evidence is still worth reading.
  EXPECT_NE(text.find("kvcanary-auditor findings --db ev.db"),
            std::string::npos);
  // No error line when the run finished.
  EXPECT_EQ(ResultText(AcceptResult(), 50).find("error:"), std::string::npos);
}

}  // namespace
}  // namespace kvcanary::auditor
