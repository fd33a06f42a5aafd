// Alerts end to end: an engine (with or without a fault), the auditor
// sidecar, and a real Prometheus (Debian's) scraping it every second with
// dashboards/alerts.yml loaded. A critical finding reaches `firing`; a clean
// engine keeps it inactive; an inconclusive verdict fires its own alert.
#include <fstream>
#include <string>

#include "gtest/gtest.h"
#include "tests/integration/auditor_cli.h"
#include "tests/integration/cluster.h"

namespace kvcanary::testing {
namespace {

// Waits up to `seconds` for `done`, polling every 200 ms.
template <typename Done>
bool WaitFor(int seconds, Done done) {
  for (int i = 0; i < seconds * 5; ++i) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return done();
}

class AlertsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!HavePrometheus()) GTEST_SKIP() << "prometheus not installed";
  }
};

TEST_F(AlertsTest, RealPrometheusLoadsEveryAlertRule) {
  Cluster cluster({});
  ASSERT_TRUE(cluster.ok());
  std::unique_ptr<Process> sidecar = StartSidecar(cluster, "rules.db");
  const std::string target = SidecarTarget(*sidecar);
  ASSERT_FALSE(target.empty());
  Prometheus prometheus({target});
  EXPECT_TRUE(WaitFor(30, [&] {
    return prometheus.Query(
               "kvcanary_auditor_positive_control%7Bdetector%3D"
               "%22trace%22%7D") == 1;
  }));
  int loaded = 0;
  const nlohmann::json rules = prometheus.Rules();
  if (rules.is_object()) {
    for (const auto& g : rules["data"]["groups"]) loaded += g["rules"].size();
  }
  // As many as the file declares.
  std::ifstream in(std::string(KVCANARY_SOURCE_DIR) + "/dashboards/alerts.yml");
  int declared = 0;
  for (std::string line; std::getline(in, line);) {
    declared += line.find("- alert: ") != std::string::npos;
  }
  EXPECT_GE(declared, 8);
  EXPECT_EQ(loaded, declared) << rules.dump();
}

TEST_F(AlertsTest, ACriticalFindingFiresKvcanaryCriticalFinding) {
  Cluster cluster(
      {"--fault=admission-abort-lost", "--watermark=off", "--num_pages=64"});
  ASSERT_TRUE(cluster.ok());
  std::unique_ptr<Process> sidecar =
      StartSidecar(cluster, "critical.db",
                   {"--max-probes=150", "--floor=2",
                    "--trace=" + cluster.prefill() + "," + cluster.decode(),
                    "--trace-token-file=" + cluster.trace_token_file()});
  const std::string target = SidecarTarget(*sidecar);
  ASSERT_FALSE(target.empty());
  Prometheus prometheus({target});
  EXPECT_TRUE(WaitFor(90, [&] {
    return prometheus.AlertState("KvcanaryCriticalFinding") == "firing";
  })) << prometheus.AlertState("KvcanaryCriticalFinding");
}

TEST_F(AlertsTest, ACleanEngineKeepsTheFindingAlertsInactive) {
  Cluster cluster({});
  ASSERT_TRUE(cluster.ok());
  // Only what this test is about must be covered, so no timing noise
  // turns a clean engine's verdict inconclusive.
  std::unique_ptr<Process> sidecar = StartSidecar(
      cluster, "quiet.db",
      {"--max-probes=150", "--floor=2", "--require=output_scan,trace",
       "--trace=" + cluster.prefill() + "," + cluster.decode(),
       "--trace-token-file=" + cluster.trace_token_file()});
  const std::string target = SidecarTarget(*sidecar);
  ASSERT_FALSE(target.empty());
  Prometheus prometheus({target});
  // Two clean verdicts scraped, then several evaluations past them.
  ASSERT_TRUE(WaitFor(90, [&] {
    return prometheus.Query(
               "kvcanary_auditor_campaigns_total%7Bresult%3D%22"
               "clean%22%7D") >= 2;
  }));
  std::this_thread::sleep_for(std::chrono::seconds(3));
  EXPECT_EQ(prometheus.AlertState("KvcanaryCriticalFinding"), "");
  EXPECT_EQ(prometheus.AlertState("KvcanaryFinding"), "");
  EXPECT_EQ(prometheus.AlertState("KvcanaryVerdictInconclusive"), "");
}

TEST_F(AlertsTest, AnInconclusiveVerdictFiresItsOwnWarning) {
  Cluster cluster({});
  ASSERT_TRUE(cluster.ok());
  // Floors no 30-probe campaign can reach.
  std::unique_ptr<Process> sidecar =
      StartSidecar(cluster, "inconclusive.db", {"--max-probes=30"});
  const std::string target = SidecarTarget(*sidecar);
  ASSERT_FALSE(target.empty());
  Prometheus prometheus({target});
  EXPECT_TRUE(WaitFor(90, [&] {
    return prometheus.AlertState("KvcanaryVerdictInconclusive") == "firing";
  })) << prometheus.AlertState("KvcanaryVerdictInconclusive");
  EXPECT_EQ(prometheus.AlertState("KvcanaryCriticalFinding"), "");
}

}  // namespace
}  // namespace kvcanary::testing
