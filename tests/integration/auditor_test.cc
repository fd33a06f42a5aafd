// The auditor against real engines: kvcanary-auditor probe/verify/findings/
// sidecar as a process, against kvcanary-engine up (router, prefill and
// decode as processes), with and without faults.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>

#include "gtest/gtest.h"
#include "storage/sqlite_db.h"
#include "tests/integration/cluster.h"

namespace kvcanary::testing {
namespace {

std::string AuditorBinary() {
  return std::string(KVCANARY_BIN_DIR) + "/kvcanary-auditor";
}

std::string TempPath(const std::string& name) {
  static int counter = 0;
  return ::testing::TempDir() + "/kvcanary-auditor-" +
         std::to_string(getpid()) + "-" + std::to_string(counter++) + "-" +
         name;
}

// The engine's tenants file works for the auditor too (first key each).
std::string TenantsFile() { return WriteTenantsFile(); }

struct CliRun {
  int exit_code = -1;
  std::string out;
};

// Runs the auditor to completion, stdout captured (stderr passes through).
CliRun Auditor(const std::vector<std::string>& args) {
  std::string cmd = AuditorBinary();
  for (const std::string& a : args) cmd += " '" + a + "'";
  CliRun r;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) r.out.append(buf, n);
  const int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

std::vector<std::string> ProbeArgs(const Cluster& c, const std::string& db,
                                   int max_probes) {
  return {"probe",
          "--target=" + c.router(),
          "--tenants=" + TenantsFile(),
          "--trace=" + c.prefill() + "," + c.decode(),
          "--db=" + db,
          "--max-probes=" + std::to_string(max_probes),
          "--duration=120",
          "--concurrency=8",
          "--quiet"};
}

// The value of an unlabelled sample line "name value"; -1 if absent.
double Sample(const std::string& metrics, const std::string& name) {
  std::istringstream in(metrics);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(name + " ", 0) == 0) {
      return std::stod(line.substr(name.size() + 1));
    }
  }
  return -1;
}

nlohmann::json FindingsJson(const std::string& db) {
  CliRun r = Auditor({"findings", "--db=" + db, "--format=json"});
  EXPECT_EQ(r.exit_code, 0) << r.out;
  return nlohmann::json::parse(r.out, nullptr, false);
}

TEST(AuditorTest, CleanEngineCampaignOf500ProbesFromFourTenantsFindsNothing) {
  Cluster cluster({});
  ASSERT_TRUE(cluster.ok());
  const std::string db = TempPath("clean.db");
  CliRun r = Auditor(ProbeArgs(cluster, db, 500));
  EXPECT_EQ(r.exit_code, 0) << r.out;
  // 500 probes under load, and the few quiet ones after it.
  const size_t at = r.out.find(" probes (");
  ASSERT_NE(at, std::string::npos) << r.out;
  const size_t start = r.out.rfind(' ', at - 1) + 1;
  EXPECT_GE(std::stoi(r.out.substr(start, at - start)), 500) << r.out;
  EXPECT_NE(r.out.find("trace=passed"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("FAILED"), std::string::npos) << r.out;
  const nlohmann::json findings = FindingsJson(db);
  ASSERT_TRUE(findings.is_array());
  EXPECT_TRUE(findings.empty()) << findings.dump(2);
  CliRun v = Auditor({"verify", "--db=" + db});
  EXPECT_EQ(v.exit_code, 0) << v.out;
}

// The incident with watermarks off: the engine checks nothing, the shadow
// ledger still sees the victim read other tenants' pages.
TEST(AuditorTest, AdmissionAbortLostWithWatermarksOffIsFoundByTheLedger) {
  Cluster cluster(
      {"--fault=admission-abort-lost", "--watermark=off", "--num_pages=64"});
  ASSERT_TRUE(cluster.ok());
  const std::string db = TempPath("incident.db");
  CliRun r = Auditor(ProbeArgs(cluster, db, 200));
  EXPECT_EQ(r.exit_code, 1) << r.out;
  const nlohmann::json findings = FindingsJson(db);
  std::set<std::string> kinds;
  int foreign = 0;
  for (const auto& f : findings) {
    kinds.insert(f["kind"].get<std::string>());
    if (f["kind"] == "trace_foreign_tenant_read") {
      ++foreign;
      EXPECT_NE(f["detail"]["reader"]["tenant"],
                f["detail"]["writer"]["tenant"]);
      EXPECT_EQ(f["detail"]["node"], "decode");
    }
  }
  EXPECT_GT(foreign, 0) << findings.dump(2);
  // The black-box side: a 200 past the advertised limit.
  EXPECT_TRUE(kinds.count("boundary_accepted")) << findings.dump(2);
  CliRun v = Auditor({"verify", "--db=" + db});
  EXPECT_EQ(v.exit_code, 0) << v.out;
}

// Every engine fault, watermarks detect: trace findings, exit 1.
struct FaultCase {
  const char* name;
  std::vector<std::string> flags;
  int concurrency = 8;  // the slot race needs more transfers in flight
  int probes = 240;
};

class AuditorFaultTest : public ::testing::TestWithParam<FaultCase> {};

TEST_P(AuditorFaultTest, CampaignRecordsAttributedTraceFindings) {
  std::vector<std::string> flags = {"--watermark=detect"};
  for (const std::string& f : GetParam().flags) flags.push_back(f);
  Cluster cluster(flags);
  ASSERT_TRUE(cluster.ok());
  const std::string db = TempPath(std::string(GetParam().name) + ".db");
  std::vector<std::string> args = ProbeArgs(cluster, db, GetParam().probes);
  args.push_back("--concurrency=" + std::to_string(GetParam().concurrency));
  CliRun r = Auditor(args);
  EXPECT_EQ(r.exit_code, 1) << r.out;
  const nlohmann::json findings = FindingsJson(db);
  int trace = 0;
  for (const auto& f : findings) {
    if (f["detector"] != "trace") continue;
    ++trace;
    const auto& d = f["detail"];
    if (f["kind"] == "trace_foreign_tenant_read") {
      EXPECT_NE(d["reader"]["tenant"], d["writer"]["tenant"]) << f.dump();
      EXPECT_NE(d["writer"]["tenant"], 0) << f.dump();
    }
  }
  EXPECT_GT(trace, 0) << r.out << findings.dump(2);
  std::printf("[fault %s] %s\n", GetParam().name,
              r.out.substr(0, r.out.find('\n')).c_str());
}

INSTANTIATE_TEST_SUITE_P(
    Faults, AuditorFaultTest,
    ::testing::Values(
        FaultCase{"admission_abort_lost",
                  {"--fault=admission-abort-lost", "--num_pages=64"}},
        FaultCase{"page_count_mismatch",
                  {"--fault=page-count-mismatch", "--num_pages=64"}},
        FaultCase{"abort_transfer_race",
                  {"--fault=abort-transfer-race", "--num_pages=96",
                   "--transfer_timeout_ms=1000",
                   "--test_kv_receive_bytes_per_s=100000"}},
        FaultCase{"no_scrub_reuse", {"--fault=no-scrub-reuse"}},
        FaultCase{"metadata_slot_reuse",
                  {"--fault=metadata-slot-reuse", "--metadata_slots=1"},
                  24,
                  600},
        FaultCase{"prefix_hash_collision", {"--fault=prefix-hash-collision"}}),
    [](const ::testing::TestParamInfo<FaultCase>& info) {
      return std::string(info.param.name);
    });

TEST(AuditorTest, EditingAnyEvidenceRowMakesVerifyNameIt) {
  Cluster cluster({});
  ASSERT_TRUE(cluster.ok());
  const std::string db = TempPath("tamper.db");
  ASSERT_EQ(Auditor(ProbeArgs(cluster, db, 40)).exit_code, 0);
  {
    auto conn = SqliteDb::Open(db);
    ASSERT_TRUE(conn.ok()) << conn.status();
    // The attacker has the file: drops the append-only triggers first.
    std::vector<std::string> triggers;
    {
      auto names = (*conn)->Prepare(
          "SELECT name FROM sqlite_master WHERE type = 'trigger'");
      ASSERT_TRUE(names.ok());
      while (*names->Step()) triggers.push_back(names->ColumnText(0));
    }
    for (const std::string& t : triggers) {
      ASSERT_TRUE((*conn)->Exec("DROP TRIGGER \"" + t + "\"").ok());
    }
    ASSERT_TRUE((*conn)
                    ->Exec("UPDATE evidence SET body = "
                           "replace(body, 'probe', 'prob3') WHERE seq = 7")
                    .ok());
  }
  CliRun v = Auditor({"verify", "--db=" + db});
  EXPECT_EQ(v.exit_code, 1) << v.out;
  EXPECT_NE(v.out.find("first bad row 7"), std::string::npos) << v.out;
}

TEST(AuditorTest, KillNineLosesNoCommittedRowAndTheNextRunContinuesTheChain) {
  Cluster cluster(
      {"--fault=admission-abort-lost", "--watermark=off", "--num_pages=64"});
  ASSERT_TRUE(cluster.ok());
  const std::string db = TempPath("kill.db");
  std::vector<std::string> args = ProbeArgs(cluster, db, 0);
  args.push_back("--duration=60");
  Process probe(args, AuditorBinary());
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  probe.Signal(SIGKILL);
  probe.Wait();
  CliRun v = Auditor({"verify", "--db=" + db});
  EXPECT_EQ(v.exit_code, 0) << v.out;
  CliRun again = Auditor(ProbeArgs(cluster, db, 60));
  EXPECT_EQ(again.exit_code, 1) << again.out;
  CliRun v2 = Auditor({"verify", "--db=" + db});
  EXPECT_EQ(v2.exit_code, 0) << v2.out;
  // Both campaigns' rows are there.
  const nlohmann::json findings = FindingsJson(db);
  std::set<std::string> campaigns;
  for (const auto& f : findings) campaigns.insert(f["campaign"]);
  EXPECT_EQ(campaigns.size(), 2u) << findings.dump(2);
}

TEST(AuditorTest, BadTargetsAndFilesAreClearErrorsNotCleanResults) {
  const std::string db = TempPath("bad.db");
  // Nothing listens there.
  CliRun unreachable = Auditor({"probe", "--target=http://127.0.0.1:1",
                                "--tenants=" + TenantsFile(), "--db=" + db,
                                "--max-probes=5", "--quiet"});
  EXPECT_EQ(unreachable.exit_code, 2);
  // A tenants file that is not one.
  const std::string bad = TempPath("tenants.json");
  std::ofstream(bad) << "{\"tenants\": 3}";
  CliRun bad_file = Auditor({"probe", "--target=http://127.0.0.1:1",
                             "--tenants=" + bad, "--db=" + db, "--quiet"});
  EXPECT_EQ(bad_file.exit_code, 2);
  // Not an OpenAI API: an engine node's internal port.
  Cluster cluster({});
  ASSERT_TRUE(cluster.ok());
  CliRun garbage = Auditor({"probe", "--target=" + cluster.decode(),
                            "--tenants=" + TenantsFile(), "--db=" + db,
                            "--max-probes=5", "--quiet"});
  EXPECT_EQ(garbage.exit_code, 2);
  // Wrong keys.
  const std::string wrong = TempPath("wrong.json");
  std::ofstream(wrong) << R"({"tenants": [{"id": "a", "api_key": "sk-no"},
                                          {"id": "b", "api_key": "sk-nope"}]})";
  CliRun unauthorized =
      Auditor({"probe", "--target=" + cluster.router(), "--tenants=" + wrong,
               "--db=" + db, "--max-probes=5", "--quiet"});
  EXPECT_EQ(unauthorized.exit_code, 2);
  // One good key and one bad: still refused, naming the tenant.
  const std::string half = TempPath("half.json");
  std::ofstream(half) << R"({"tenants": [{"id": "a", "api_key": "sk-acme"},
                                         {"id": "b", "api_key": "sk-nope"}]})";
  CliRun half_bad =
      Auditor({"probe", "--target=" + cluster.router(), "--tenants=" + half,
               "--db=" + db, "--max-probes=5", "--quiet"});
  EXPECT_EQ(half_bad.exit_code, 2);
  // None of it was recorded as a clean campaign.
  if (std::ifstream(db)) {
    const nlohmann::json findings = FindingsJson(db);
    EXPECT_TRUE(findings.empty());
  }
}

// A sidecar running 30-probe campaigns every second against `cluster`,
// /metrics on any free port (its URL is the first stdout line).
Process StartSidecar(const Cluster& cluster, const std::string& db_name) {
  return Process(
      {"sidecar", "--target=" + cluster.router(), "--tenants=" + TenantsFile(),
       "--db=" + TempPath(db_name), "--max-probes=30", "--interval=1",
       "--metrics-port=0", "--quiet"},
      AuditorBinary());
}

TEST(AuditorTest, SidecarServesMetricsThatPromtoolAccepts) {
  Cluster cluster({});
  ASSERT_TRUE(cluster.ok());
  Process sidecar = StartSidecar(cluster, "sidecar.db");
  const std::string line = sidecar.ReadLine();
  ASSERT_EQ(line.rfind("metrics http://", 0), 0u) << line;
  const std::string url = line.substr(8, line.find("/metrics") - 8);
  std::string metrics;
  for (int i = 0; i < 200; ++i) {
    metrics = Get(url, "/metrics").body;
    if (Sample(metrics, "kvcanary_auditor_last_success_timestamp_seconds") > 0)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_GT(Sample(metrics, "kvcanary_auditor_last_success_timestamp_seconds"),
            0)
      << metrics;
  EXPECT_GT(
      MetricValue(metrics, "kvcanary_auditor_probes_total", "outcome=\"ok\""),
      0);
  EXPECT_EQ(MetricValue(metrics, "kvcanary_auditor_positive_control",
                        "detector=\"trace\""),
            1);
  // No tenant or marker ever appears as a label.
  EXPECT_EQ(metrics.find("acme"), std::string::npos);
  const std::string file = TempPath("metrics.txt");
  std::ofstream(file) << metrics;
  const int rc =
      std::system(("promtool check metrics < '" + file + "'").c_str());
  EXPECT_EQ(rc, 0) << metrics;
  sidecar.Signal(SIGTERM);
  EXPECT_EQ(sidecar.Wait(), 0);
}

// A port nothing listens on right now (for servers that cannot take 0).
int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

// A real Prometheus (Debian's) scrapes the sidecar and loads the alert rules.
TEST(AuditorTest, RealPrometheusScrapesTheSidecarAndLoadsTheAlertRules) {
  if (std::system("command -v prometheus >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "prometheus not installed";
  }
  Cluster cluster({});
  ASSERT_TRUE(cluster.ok());
  Process sidecar = StartSidecar(cluster, "prom.db");
  const std::string line = sidecar.ReadLine();
  ASSERT_EQ(line.rfind("metrics http://", 0), 0u) << line;
  const std::string target =
      line.substr(15, line.find("/metrics") - 15);  // host:port
  const std::string dir = TempPath("prometheus");
  mkdir(dir.c_str(), 0755);
  const int port = FreePort();
  std::ofstream(dir + "/prometheus.yml")
      << "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
      << "rule_files: ['" << KVCANARY_SOURCE_DIR << "/dashboards/alerts.yml']\n"
      << "scrape_configs:\n"
      << "  - job_name: kvcanary-auditor\n"
      << "    static_configs: [{targets: ['" << target << "']}]\n";
  Process prometheus(
      {"-c", "exec prometheus --config.file=" + dir + "/prometheus.yml" +
                 " --storage.tsdb.path=" + dir + "/data" +
                 " --web.listen-address=127.0.0.1:" + std::to_string(port) +
                 " 2>" + dir + "/prometheus.log"},
      "/bin/sh");
  const std::string api = "http://127.0.0.1:" + std::to_string(port);
  double value = -1;
  std::string body;
  for (int i = 0; i < 300 && value != 1; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    body = Get(api,
               "/api/v1/query?query=kvcanary_auditor_positive_control%7B"
               "detector%3D%22trace%22%7D")
               .body;
    const auto j = nlohmann::json::parse(body, nullptr, false);
    if (j.is_object() && j.value("status", "") == "success" &&
        !j["data"]["result"].empty()) {
      value = std::stod(j["data"]["result"][0]["value"][1].get<std::string>());
    }
  }
  EXPECT_EQ(value, 1) << body;
  const auto rules =
      nlohmann::json::parse(Get(api, "/api/v1/rules").body, nullptr, false);
  int loaded = 0;
  if (rules.is_object()) {
    for (const auto& g : rules["data"]["groups"]) loaded += g["rules"].size();
  }
  EXPECT_EQ(loaded, 6);
  prometheus.Signal(SIGTERM);
  prometheus.Wait();
  sidecar.Signal(SIGTERM);
  EXPECT_EQ(sidecar.Wait(), 0);
}

}  // namespace
}  // namespace kvcanary::testing
