// The auditor against real engines: kvcanary-auditor probe/verify/findings/
// sidecar as a process, against kvcanary-engine up (router, prefill and
// decode as processes), with and without faults. Verdicts must be earned:
// clean only with every detector covered, inconclusive when the trace is
// blind, error when a key is refused, never clean with a broken detector.
#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "storage/sqlite_db.h"
#include "tests/integration/auditor_cli.h"
#include "tests/integration/cluster.h"
#include "tests/shared_files.h"

namespace kvcanary::testing {
namespace {

// The raw finding rows of the evidence database.
nlohmann::json FindingRows(const std::string& db) {
  CliRun r = Auditor({"findings", "--db=" + db, "--rows", "--format=json"});
  EXPECT_EQ(r.exit_code, 0) << r.out;
  return nlohmann::json::parse(r.out, nullptr, false);
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

// The detector table line of `detector` in probe's output.
std::string DetectorLine(const std::string& out, const std::string& detector) {
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(detector + " ", 0) == 0) return line;
  }
  return "";
}

TEST(AuditorTest, CleanEngineCampaignIsCleanWithEveryDetectorCovered) {
  Cluster cluster({});
  ASSERT_TRUE(cluster.ok());
  const std::string db = TempPath("clean.db");
  const std::string json = TempPath("clean.json");
  std::vector<std::string> args = ProbeArgs(cluster, db, 500);
  args.push_back("--json=" + json);
  CliRun r = Auditor(args);
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find(": clean (exit 0)"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("FAILED"), std::string::npos) << r.out;
  // Plants accepted whole, printed.
  EXPECT_NE(r.out.find("accepted whole"), std::string::npos) << r.out;
  // The engine is batch-invariant: log-probabilities judged bitwise.
  for (const char* d : {"output_scan", "golden", "boundary", "latency", "trace",
                        "logprob_golden", "prompt_logprobs"}) {
    EXPECT_NE(DetectorLine(r.out, d).find(" active "), std::string::npos)
        << d << "\n"
        << r.out;
  }
  // The embedded model never repeats a nonce: echo is disabled, not
  // required, and says why.
  EXPECT_NE(DetectorLine(r.out, "echo").find("disabled"), std::string::npos);
  std::ifstream in(json);
  const nlohmann::json doc = nlohmann::json::parse(in, nullptr, false);
  ASSERT_TRUE(doc.is_object());
  EXPECT_EQ(doc["verdict"], "clean");
  EXPECT_EQ(doc["plants"]["accepted_whole"], doc["plants"]["sent"]);
  EXPECT_TRUE(FindingRows(db).empty());
  CliRun v = Auditor({"verify", "--db=" + db});
  EXPECT_EQ(v.exit_code, 0) << v.out;
}

// stories260K (real weights): every detector active, echo included.
TEST(AuditorTest, Stories260KCampaignIsCleanWithEchoActive) {
  KVC_REQUIRE_SHARED("models/stories260K.bin", "models/tok512.bin");
  const std::string models = shared_files::Path("models");
  Cluster cluster({"--model=" + models + "/stories260K.bin",
                   "--tokenizer=" + models + "/tok512.bin"});
  ASSERT_TRUE(cluster.ok());
  CliRun r = Auditor(ProbeArgs(cluster, TempPath("stories.db"), 600));
  EXPECT_EQ(r.exit_code, 0) << r.out;
  for (const char* d : {"output_scan", "golden", "echo", "boundary", "latency",
                        "trace", "logprob_golden", "prompt_logprobs"}) {
    EXPECT_NE(DetectorLine(r.out, d).find(" active "), std::string::npos)
        << d << "\n"
        << r.out;
  }
}

// The incident's engine, black-box (no trace): past-limit prompts answered
// from a one-token placeholder come back faster than cache-busted controls
// at the limit sent beside them, whatever else the machine is doing: one
// latency row for the past-limit group, its cause the prompt not being
// prefilled (the target reported every token).
TEST(AuditorTest, BlackBoxLatencyCatchesAdmissionAbortLostBesideItsControls) {
  Cluster cluster(
      {"--fault=admission-abort-lost", "--watermark=off", "--num_pages=64"});
  ASSERT_TRUE(cluster.ok());
  const std::string db = TempPath("latency.db");
  std::vector<std::string> args;
  for (const std::string& a : ProbeArgs(cluster, db, 120)) {
    if (a.rfind("--trace", 0) != 0) args.push_back(a);
  }
  CliRun r = Auditor(args);
  EXPECT_EQ(r.exit_code, 1) << r.out;
  int latency = 0;
  for (const auto& f : FindingRows(db)) {
    if (f["kind"] != "latency_implausible") continue;
    ++latency;
    EXPECT_EQ(f["detail"]["template"], "past_limit") << f.dump();
    EXPECT_EQ(f["detail"]["cause"], "prompt_not_prefilled") << f.dump();
    EXPECT_LE(f["detail"]["p_value"].get<double>(), 5e-4) << f.dump();
  }
  EXPECT_EQ(latency, 1) << r.out;
}

// Nodes that require mutual TLS (`up --tls`): the auditor follows their
// traces with the deployment's client certificate and still finds the
// incident there; without the certificate the trace cannot be read and the
// campaign ends in error, naming it, instead of running without it.
TEST(AuditorTest, FollowsTheTracesOfNodesThatRequireMutualTls) {
  Cluster cluster({"--tls", "--fault=admission-abort-lost", "--watermark=off",
                   "--num_pages=64"});
  ASSERT_TRUE(cluster.ok());
  const std::string& token = cluster.trace_token_file();
  const std::string dir = token.substr(0, token.rfind('/'));
  const std::string db = TempPath("mtls.db");
  std::vector<std::string> with_cert = ProbeArgs(cluster, db, 300);
  with_cert.insert(with_cert.end(), {"--tls-cert=" + dir + "/node.pem",
                                     "--tls-key=" + dir + "/node.key",
                                     "--tls-ca=" + dir + "/ca.pem"});
  CliRun r = Auditor(with_cert);
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(DetectorLine(r.out, "trace").find(" active "), std::string::npos)
      << r.out;
  int foreign = 0;
  for (const auto& f : FindingRows(db)) {
    if (f["kind"] == "trace_foreign_tenant_read") ++foreign;
  }
  EXPECT_GT(foreign, 0) << r.out;

  CliRun without = Auditor(ProbeArgs(cluster, TempPath("mtls-nocert.db"), 300));
  EXPECT_EQ(without.exit_code, 2) << without.out;
  EXPECT_NE(without.out.find("/v1/trace: SSL"), std::string::npos)
      << without.out;
}

// The incident with watermarks off: the engine checks nothing, the shadow
// ledger still sees the victim read other tenants' pages. The output is
// incidents naming reader and writer, not page rows.
TEST(AuditorTest, AdmissionAbortLostWithWatermarksOffIsFoundByTheLedger) {
  Cluster cluster(
      {"--fault=admission-abort-lost", "--watermark=off", "--num_pages=64"});
  ASSERT_TRUE(cluster.ok());
  const std::string db = TempPath("incident.db");
  CliRun r = Auditor(ProbeArgs(cluster, db, 300));
  EXPECT_EQ(r.exit_code, 1) << r.out;
  const nlohmann::json rows = FindingRows(db);
  std::set<std::string> kinds;
  const std::set<std::string> tenants = {"acme", "globex", "initech",
                                         "umbrella"};
  int foreign = 0;
  for (const auto& f : rows) {
    kinds.insert(f["kind"].get<std::string>());
    if (f["kind"] == "trace_foreign_tenant_read") {
      ++foreign;
      // Named tenants, not engine ids: the response ids joined them.
      EXPECT_TRUE(tenants.count(f["reader"])) << f.dump();
      EXPECT_TRUE(tenants.count(f["writer"])) << f.dump();
      EXPECT_NE(f["reader"], f["writer"]);
      EXPECT_EQ(f["detail"]["node"], "decode");
      EXPECT_TRUE(f["probe"].is_number_integer());
    }
  }
  EXPECT_GT(foreign, 0) << rows.dump(2);
  // The black-box side: a 200 past the limit.
  EXPECT_TRUE(kinds.count("boundary_accepted")) << rows.dump(2);
  // At most 50 incident lines, each naming its readers (one for a leak;
  // every tenant that saw it, comma-joined, for a black-box incident, which
  // is grouped by cause across tenants). A trace incident also names its
  // writers; a black-box one (a first token too quick for its prompt, say)
  // names them only when its request read another tenant's page, and shows
  // "-" otherwise.
  const size_t table = r.out.find("WRITER");
  ASSERT_NE(table, std::string::npos) << r.out;
  std::istringstream in(r.out.substr(table));
  std::string line;
  std::getline(in, line);
  int lines = 0;
  while (std::getline(in, line) && line.find("campaign") == std::string::npos &&
         line.find("findings because") == std::string::npos &&
         line.rfind("...", 0) != 0) {
    ++lines;
    std::istringstream words(line);
    std::string writer, reader, kind;
    words >> writer >> reader >> kind;
    for (absl::string_view r : absl::StrSplit(reader, ',')) {
      EXPECT_TRUE(tenants.count(std::string(r))) << line;
    }
    if (kind.rfind("trace_", 0) == 0) {
      EXPECT_TRUE(tenants.count(reader)) << "one reader: " << line;
    }
    if (writer == "-" && kind.rfind("trace_", 0) != 0) continue;
    for (absl::string_view w : absl::StrSplit(writer, ',')) {
      EXPECT_TRUE(tenants.count(std::string(w))) << line;
    }
  }
  EXPECT_GT(lines, 0);
  EXPECT_LE(lines, 50);
  // findings: incidents by default.
  CliRun incidents = Auditor({"findings", "--db=" + db});
  EXPECT_EQ(incidents.exit_code, 0);
  EXPECT_NE(incidents.out.find("trace_foreign_tenant_read"), std::string::npos);
  EXPECT_NE(incidents.out.find(": findings,"), std::string::npos)
      << incidents.out;
  CliRun v = Auditor({"verify", "--db=" + db});
  EXPECT_EQ(v.exit_code, 0) << v.out;
}

// Every engine fault, watermarks detect: trace findings, exit 1.
struct FaultCase {
  const char* name;
  std::vector<std::string> flags;
  int concurrency = 8;  // the slot race needs more transfers in flight
  int probes = 240;
  std::vector<std::string> auditor_flags = {};
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
  for (const std::string& a : GetParam().auditor_flags) args.push_back(a);
  CliRun r = Auditor(args);
  EXPECT_EQ(r.exit_code, 1) << r.out;
  int trace = 0;
  for (const auto& f : FindingRows(db)) {
    if (f["detector"] != "trace") continue;
    ++trace;
    const auto& d = f["detail"];
    if (f["kind"] == "trace_foreign_tenant_read") {
      EXPECT_NE(d["reader"]["tenant"], d["writer"]["tenant"]) << f.dump();
      EXPECT_NE(d["writer"]["tenant"], 0) << f.dump();
    }
  }
  EXPECT_GT(trace, 0) << r.out;
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
        // Slow transfers make the race; small prompts keep the calibration
        // (every request alone, each transferred slowly) short.
        FaultCase{"abort_transfer_race",
                  {"--fault=abort-transfer-race", "--num_pages=96",
                   "--transfer_timeout_ms=1000",
                   "--test_kv_receive_bytes_per_s=100000"},
                  8,
                  100,
                  {"--max-prompt-tokens=96"}},
        FaultCase{"no_scrub_reuse", {"--fault=no-scrub-reuse"}},
        FaultCase{"metadata_slot_reuse",
                  {"--fault=metadata-slot-reuse", "--metadata_slots=1"},
                  24,
                  600},
        FaultCase{"prefix_hash_collision", {"--fault=prefix-hash-collision"}}),
    [](const ::testing::TestParamInfo<FaultCase>& info) {
      return std::string(info.param.name);
    });

// A wrong key for the third of four tenants: exit 2 before any probe,
// the tenant named (our router also refuses /v1/models without a key, so
// the check must not stop at the first tenant).
TEST(AuditorTest, AWrongKeyForTheThirdOfFourTenantsIsAnErrorNamingIt) {
  Cluster cluster({});
  ASSERT_TRUE(cluster.ok());
  const std::string tenants = WriteTenantsFile(R"({"tenants": [
    {"id": "acme", "api_key": "sk-acme"},
    {"id": "globex", "api_key": "sk-globex"},
    {"id": "initech", "api_key": "sk-wrong"},
    {"id": "umbrella", "api_key": "sk-umbrella"}]})");
  CliRun r =
      Auditor({"probe", "--target=" + cluster.router(), "--tenants=" + tenants,
               "--db=" + TempPath("key.db"), "--max-probes=50", "--quiet"});
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("'initech'"), std::string::npos) << r.out;
}

// Nothing sampled: the trace detector is blind, and says so.
TEST(AuditorTest, TraceWithNoReadsSampledIsInconclusiveNotClean) {
  Cluster cluster({"--trace_read_sample=0"});
  ASSERT_TRUE(cluster.ok());
  CliRun r = Auditor(ProbeArgs(cluster, TempPath("blind.db"), 500));
  EXPECT_EQ(r.exit_code, 3) << r.out;
  const std::string trace = DetectorLine(r.out, "trace");
  EXPECT_NE(trace.find("inconclusive"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("0 page reads checked"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("inconclusive because"), std::string::npos) << r.out;
}

// A leak the trace would see, but nothing sampled: the table shows the
// trace detector blind whatever the verdict.
TEST(AuditorTest, BlindTraceShowsItselfBlindWhateverTheVerdict) {
  Cluster cluster({"--trace_read_sample=0", "--fault=no-scrub-reuse"});
  ASSERT_TRUE(cluster.ok());
  CliRun r = Auditor(ProbeArgs(cluster, TempPath("blind-leak.db"), 300));
  EXPECT_NE(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("0 page reads checked"), std::string::npos) << r.out;
  EXPECT_NE(DetectorLine(r.out, "trace").find("inconclusive"),
            std::string::npos)
      << r.out;
}

// The trace detector broken on purpose: its control (a canned kvt1 stream
// through a real follower) fails, and the verdict is not clean.
TEST(AuditorTest, BrokenTraceDetectorFailsItsControlAndIsNeverClean) {
  Cluster cluster({});
  ASSERT_TRUE(cluster.ok());
  std::vector<std::string> args =
      ProbeArgs(cluster, TempPath("broken-trace.db"), 500);
  args.push_back("--test-break=trace");
  CliRun r = Auditor(args);
  EXPECT_EQ(r.exit_code, 3) << r.out;
  EXPECT_NE(r.out.find("trace=FAILED"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("positive control failed"), std::string::npos);
}

TEST(AuditorTest, EditingAnyEvidenceRowMakesVerifyNameIt) {
  Cluster cluster({});
  ASSERT_TRUE(cluster.ok());
  const std::string db = TempPath("tamper.db");
  std::vector<std::string> args = ProbeArgs(cluster, db, 80);
  args.push_back("--floor=2");
  ASSERT_EQ(Auditor(args).exit_code, 0);
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
  // Killed once it has committed a finding, however long that takes.
  for (int i = 0; i < 600; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (std::ifstream(db) && !FindingRows(db).empty()) break;
  }
  probe.Signal(SIGKILL);
  probe.Wait();
  CliRun v = Auditor({"verify", "--db=" + db});
  EXPECT_EQ(v.exit_code, 0) << v.out;
  EXPECT_NE(v.out.find(": interrupted (no end recorded, no writer holds"),
            std::string::npos)
      << v.out;
  CliRun again = Auditor(ProbeArgs(cluster, db, 100));
  EXPECT_EQ(again.exit_code, 1) << again.out;
  CliRun v2 = Auditor({"verify", "--db=" + db});
  EXPECT_EQ(v2.exit_code, 0) << v2.out;
  // Both campaigns' rows are there.
  std::set<std::string> campaigns;
  for (const auto& f : FindingRows(db)) campaigns.insert(f["campaign"]);
  EXPECT_EQ(campaigns.size(), 2u);
  // The killed campaign's rows are grouped too, and it is named
  // interrupted.
  CliRun incidents = Auditor({"findings", "--db=" + db});
  EXPECT_NE(incidents.out.find("interrupted (no end recorded, no writer"),
            std::string::npos)
      << incidents.out;
}

TEST(AuditorTest, BadTargetsAndFilesAreClearErrorsNotCleanResults) {
  const std::string db = TempPath("bad.db");
  const std::string tenants = WriteTenantsFile();
  // Nothing listens there.
  CliRun unreachable =
      Auditor({"probe", "--target=http://127.0.0.1:1", "--tenants=" + tenants,
               "--db=" + db, "--max-probes=5", "--quiet"});
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
  CliRun garbage =
      Auditor({"probe", "--target=" + cluster.decode(), "--tenants=" + tenants,
               "--db=" + db, "--max-probes=5", "--quiet"});
  EXPECT_EQ(garbage.exit_code, 2);
  // Wrong keys.
  const std::string wrong = TempPath("wrong.json");
  std::ofstream(wrong) << R"({"tenants": [{"id": "a", "api_key": "sk-no"},
                                          {"id": "b", "api_key": "sk-nope"}]})";
  CliRun unauthorized =
      Auditor({"probe", "--target=" + cluster.router(), "--tenants=" + wrong,
               "--db=" + db, "--max-probes=5", "--quiet"});
  EXPECT_EQ(unauthorized.exit_code, 2);
  // None of it was recorded as a finding.
  if (std::ifstream(db)) {
    EXPECT_TRUE(FindingRows(db).empty());
  }
}

TEST(AuditorTest, UnknownFlagsAndBadValuesExitTwoNamingTheFlag) {
  CliRun unknown = Auditor({"probe", "--durration=3"});
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_NE(unknown.out.find("--durration"), std::string::npos);
  CliRun bad = Auditor({"probe", "--duration=abc"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.out.find("--duration"), std::string::npos);
  CliRun floor = Auditor({"probe", "--target=http://127.0.0.1:1",
                          "--tenants=" + WriteTenantsFile(), "--db=x.db",
                          "--floor=psychic=3"});
  EXPECT_EQ(floor.exit_code, 2);
  EXPECT_NE(floor.out.find("psychic"), std::string::npos);
  CliRun help = Auditor({"probe", "--help"});
  EXPECT_EQ(help.exit_code, 0);
  for (const char* flag : {"--target", "--floor", "--require", "--junit",
                           "--html", "--max-consecutive-failures"}) {
    EXPECT_NE(help.out.find(flag), std::string::npos) << flag;
  }
  EXPECT_EQ(help.out.find("--test-break"), std::string::npos);
}

TEST(AuditorTest, SidecarServesMetricsThatPromtoolAccepts) {
  Cluster cluster({});
  ASSERT_TRUE(cluster.ok());
  std::unique_ptr<Process> sidecar = StartSidecar(cluster, "sidecar.db");
  const std::string target = SidecarTarget(*sidecar);
  ASSERT_FALSE(target.empty());
  const std::string url = "http://" + target;
  std::string metrics;
  for (int i = 0; i < 300; ++i) {
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
  // 30 probes cannot reach the floors: the verdict says so.
  EXPECT_EQ(MetricValue(metrics, "kvcanary_auditor_last_verdict",
                        "verdict=\"inconclusive\""),
            1)
      << metrics;
  EXPECT_EQ(MetricValue(metrics, "kvcanary_auditor_detector_state",
                        "detector=\"golden\",state=\"inconclusive\""),
            1)
      << metrics;
  // Findings exported from 0, before any.
  EXPECT_EQ(MetricValue(metrics, "kvcanary_auditor_findings_total",
                        "kind=\"trace_foreign_tenant_read\""),
            0);
  // No tenant or marker ever appears as a label.
  EXPECT_EQ(metrics.find("acme"), std::string::npos);
  const std::string file = TempPath("metrics.txt");
  std::ofstream(file) << metrics;
  const int rc =
      std::system(("promtool check metrics < '" + file + "'").c_str());
  EXPECT_EQ(rc, 0) << metrics;
  sidecar->Signal(SIGTERM);
  EXPECT_EQ(sidecar->Wait(), 0);
}

}  // namespace
}  // namespace kvcanary::testing
