// The alert rules, their unit tests, the scrape configuration and the
// Grafana dashboard, checked with Debian's real promtool.
#include <cstdlib>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace {

const std::string kSource = KVCANARY_SOURCE_DIR;

int Shell(const std::string& cmd) {
  const int rc = std::system((cmd + " >/dev/null 2>&1").c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

bool HavePromtool() { return Shell("command -v promtool") == 0; }

TEST(DashboardsTest, AlertRulesAreValid) {
  if (!HavePromtool()) GTEST_SKIP() << "promtool not installed";
  EXPECT_EQ(Shell("promtool check rules " + kSource + "/dashboards/alerts.yml"),
            0);
}

TEST(DashboardsTest, AlertRulesFireAsTheirUnitTestsSay) {
  if (!HavePromtool()) GTEST_SKIP() << "promtool not installed";
  EXPECT_EQ(Shell("cd " + kSource +
                  "/dashboards && promtool test rules alerts_test.yml"),
            0);
}

TEST(DashboardsTest, PrometheusConfigIsValid) {
  if (!HavePromtool()) GTEST_SKIP() << "promtool not installed";
  EXPECT_EQ(Shell("cd " + kSource +
                  "/deploy && promtool check config prometheus.yml"),
            0);
}

// Every metric the dashboard queries is one kvcanary exports.
TEST(DashboardsTest, GrafanaDashboardQueriesOnlyExportedMetrics) {
  std::ifstream in(kSource + "/dashboards/kvcanary-grafana.json");
  std::stringstream ss;
  ss << in.rdbuf();
  const nlohmann::json d = nlohmann::json::parse(ss.str(), nullptr, false);
  ASSERT_TRUE(d.is_object());
  ASSERT_TRUE(d["panels"].is_array());
  const std::set<std::string> exported = {
      "kvcanary_auditor_findings_total",
      "kvcanary_auditor_probes_total",
      "kvcanary_auditor_positive_control",
      "kvcanary_auditor_last_success_timestamp_seconds",
      "kvcanary_auditor_campaign_duration_seconds",
      "kvcanary_auditor_trace_events_total",
      "kvcanary_auditor_kv_events_messages_total",
      "kvcanary_auditor_kv_events_restarts_total",
      "kvcanary_auditor_last_verdict",
      "kvcanary_auditor_detector_state",
      "kvcanary_auditor_detector_coverage",
      "kvcanary_auditor_detector_floor",
      "kvcanary_auditor_campaigns_total",
      "kvcanary_node_watermark_violations_total",
      "kvcanary_node_kv_pages",
      "kvcanary_node_prefix_cache_hit_pages_total"};
  const std::regex metric("kvcanary_[a-z_]+");
  int queries = 0;
  for (const auto& panel : d["panels"]) {
    for (const auto& target : panel["targets"]) {
      const std::string expr = target["expr"];
      ++queries;
      for (std::sregex_iterator it(expr.begin(), expr.end(), metric), end;
           it != end; ++it) {
        EXPECT_TRUE(exported.count(it->str())) << it->str();
      }
    }
  }
  EXPECT_GE(queries, 8);
}

}  // namespace
