// The sidecar's metrics of a campaign's end: the last verdict, and the
// last success behind KvcanaryAuditStale (dashboards/alerts.yml), which only
// a run that finished counts.
#include "auditor/reports/metrics.h"

#include <cstdlib>
#include <string>

#include "gtest/gtest.h"

namespace kvcanary::auditor {
namespace {

// The value of the sample `series` ("name" or "name{labels}"); -1 if
// absent.
double Sample(const std::string& metrics, const std::string& series) {
  const size_t at = metrics.find("\n" + series + " ");
  if (at == std::string::npos) return -1;
  return std::atof(metrics.c_str() + at + series.size() + 2);
}

constexpr char kLastSuccess[] =
    "kvcanary_auditor_last_success_timestamp_seconds";

TEST(MetricsTest, OnlyAFinishedRunIsASuccessForTheStaleAlert) {
  AuditorMetrics m;
  EXPECT_EQ(Sample(m.Serialize(), kLastSuccess), 0);
  m.CampaignEnded(Verdict::kClean, /*finished=*/true, {}, 3, 1000);
  EXPECT_EQ(Sample(m.Serialize(), kLastSuccess), 1000);
  m.CampaignEnded(Verdict::kInconclusive, true, {}, 3, 2000);
  EXPECT_EQ(Sample(m.Serialize(), kLastSuccess), 2000);
  // Findings proven, then the target died: the verdict is findings, but the
  // run did not finish, so the audit is still going stale.
  m.CampaignEnded(Verdict::kFindings, /*finished=*/false, {}, 3, 3000);
  std::string s = m.Serialize();
  EXPECT_EQ(Sample(s, kLastSuccess), 2000) << s;
  EXPECT_EQ(Sample(s, "kvcanary_auditor_last_verdict{verdict=\"findings\"}"),
            1);
  m.CampaignEnded(Verdict::kError, false, {}, 3, 4000);
  s = m.Serialize();
  EXPECT_EQ(Sample(s, kLastSuccess), 2000) << s;
  EXPECT_EQ(Sample(s, "kvcanary_auditor_last_verdict{verdict=\"error\"}"), 1);
  // Findings from a run that finished are a success.
  m.CampaignEnded(Verdict::kFindings, true, {}, 3, 5000);
  EXPECT_EQ(Sample(m.Serialize(), kLastSuccess), 5000);
}

}  // namespace
}  // namespace kvcanary::auditor
