// `kvcanary-auditor cache-audit --kv-events` against the real engine
// (`kvcanary-engine up --kv-events`, processes on loopback): the prefill
// node's prefix cache events, followed by the auditor over ZMQ with PLAIN
// credentials (the trace token). --prefix-cache=global is a cross-tenant
// incident from kv_events with block hashes and sequence numbers; tenant is
// clean with the block pairs it checked; batches lost for good (the
// engine's test knob) make the detector inconclusive, and so the audit.
// With a host tier and --evict-tokens, A's blocks move to the CPU tier
// before B probes: a healthy tier is clean with every pair isolated, the
// tier-drops-salt fault is shared pairs (B's hit promoted from the tier).
// Label `timing` (cache-audit's rounds).
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/auditor_cli.h"
#include "tests/integration/cluster.h"

namespace kvcanary::testing {
namespace {

struct AuditRun {
  CliRun cli;
  nlohmann::json doc;
  const nlohmann::json& kv() const { return doc["cache_audit"]["kv_events"]; }
  const nlohmann::json* detector() const {
    for (const nlohmann::json& d : doc["detectors"]) {
      if (d["name"] == "kv_events") return &d;
    }
    return nullptr;
  }
};

// `password_file`: the auditor's --trace-token-file ("": the cluster's);
// `audit_flags`: more of the auditor's.
AuditRun RunAudit(const std::string& label, std::vector<std::string> flags,
                  const std::string& password_file = "",
                  const std::vector<std::string>& audit_flags = {}) {
  flags.push_back("--max-prompt-tokens=500");
  flags.push_back("--watermark=detect");  // a shared page is served, flagged
  flags.push_back("--kv-events=tcp://127.0.0.1:0");
  Cluster cluster(flags);
  AuditRun run;
  EXPECT_TRUE(cluster.ok()) << "kvcanary-engine up did not start";
  if (!cluster.ok()) return run;
  // "kv-events tcp://H:P replay=tcp://H:P", after the trace token's line.
  const std::string line = cluster.process().ReadLine();
  const size_t replay = line.find(" replay=");
  EXPECT_EQ(line.rfind("kv-events tcp://", 0), 0u) << line;
  if (replay == std::string::npos) return run;
  const std::string stream = absl::StrCat(line.substr(10, replay - 10),
                                          ",replay=", line.substr(replay + 8));
  const std::string json_path = TempPath("kv-events-audit.json");
  std::vector<std::string> args = {
      "cache-audit",
      "--target=" + cluster.router(),
      "--tenants=" + WriteTenantsFile(),
      "--db=" + TempPath("kv-events-audit.db"),
      "--json=" + json_path,
      "--kv-events=" + stream,
      "--trace-token-file=" +
          (password_file.empty() ? cluster.trace_token_file() : password_file)};
  args.insert(args.end(), audit_flags.begin(), audit_flags.end());
  run.cli = Auditor(args);
  std::ifstream in(json_path);
  std::stringstream ss;
  ss << in.rdbuf();
  run.doc = nlohmann::json::parse(ss.str(), nullptr, false);
  if (run.doc.is_object() && run.doc.contains("cache_audit")) {
    const nlohmann::json& kv = run.kv();
    std::printf(
        "[kv-events %s] exit %d: %d shared, %d isolated of %d pairs, %d block "
        "pairs checked; stream %s\n",
        label.c_str(), run.cli.exit_code, kv.value("shared_pairs", -1),
        kv.value("isolated_pairs", -1), kv.value("requested_pairs", -1),
        kv.value("block_pairs_checked", -1), kv["stream"].dump().c_str());
  }
  return run;
}

TEST(KvEventsEngineTest, GlobalPrefixCacheIsACrossTenantIncidentFromKvEvents) {
  const AuditRun r = RunAudit("global", {"--prefix-cache=global"});
  ASSERT_EQ(r.cli.exit_code, 1) << r.cli.out;
  EXPECT_EQ(r.kv()["shared_pairs"], 3) << r.kv().dump(2);
  // One incident of three finding rows, one per pair.
  int incidents = 0;
  for (const nlohmann::json& i : r.doc["incidents"]) {
    if (i["detector"] != "kv_events") continue;
    ++incidents;
    EXPECT_EQ(i["kind"], "cross_tenant_kv_block_hit");
    EXPECT_EQ(i["writer"], "acme");
    EXPECT_EQ(i["reader"], "globex");
    EXPECT_EQ(i["rows"], 3);
  }
  EXPECT_EQ(incidents, 1) << r.doc["incidents"].dump(2);
  // The evidence: the engine's block hashes and sequence numbers per pair.
  for (const nlohmann::json& pair : r.kv()["pairs"]) {
    EXPECT_EQ(pair["verdict"], "shared");
    const nlohmann::json& block = pair["block_checks"][0];
    EXPECT_EQ(block["outcome"], "not_stored");
    EXPECT_EQ(block["a_hash"].get<std::string>().size(), 64u);  // SHA-256
    EXPECT_GE(block["a_seq"].get<int64_t>(), pair["first_seq"].get<int64_t>());
    EXPECT_GE(pair["last_seq"].get<int64_t>(), block["a_seq"].get<int64_t>());
  }
  EXPECT_NE(r.cli.out.find("cross_tenant_kv_block_hit"), std::string::npos)
      << r.cli.out;
}

TEST(KvEventsEngineTest, TenantPrefixCacheIsCleanWithTheBlockPairsChecked) {
  const AuditRun r = RunAudit("tenant", {"--prefix-cache=tenant"});
  ASSERT_EQ(r.cli.exit_code, 0) << r.cli.out;
  EXPECT_EQ(r.kv()["isolated_pairs"], 3) << r.kv().dump(2);
  EXPECT_GE(r.kv()["block_pairs_checked"].get<int>(), 3 * 2);
  const nlohmann::json* d = r.detector();
  ASSERT_NE(d, nullptr);
  EXPECT_EQ((*d)["state"], "active") << d->dump(2);
}

TEST(KvEventsEngineTest, BatchesLostForGoodMakeTheAuditInconclusive) {
  const AuditRun r = RunAudit(
      "lost", {"--prefix-cache=tenant", "--test-kv-events-lose-every=2"});
  ASSERT_EQ(r.cli.exit_code, 3) << r.cli.out;
  const nlohmann::json* d = r.detector();
  ASSERT_NE(d, nullptr);
  EXPECT_EQ((*d)["state"], "inconclusive") << d->dump(2);
  EXPECT_GT(r.kv()["stream"]["missing_messages"].get<int>(), 0);
  EXPECT_EQ(r.kv()["isolated_pairs"], 0) << r.kv().dump(2);
}

// A 40-page pool (640 tokens) over a 512-page host tier; 640 tokens of
// fillers after each plant push it into the tier.
const std::vector<std::string> kTier = {
    "--prefix-cache=tenant", "--num_pages=40", "--host_tier_pages=512"};

TEST(KvEventsEngineTest, AHealthyHostTierIsCleanWithPairsMovedAndIsolated) {
  const AuditRun r = RunAudit("host tier", kTier, "", {"--evict-tokens=640"});
  ASSERT_EQ(r.cli.exit_code, 0) << r.cli.out;
  EXPECT_EQ(r.kv()["isolated_pairs"], 3) << r.kv().dump(2);
  for (const nlohmann::json& pair : r.kv()["pairs"]) {
    EXPECT_TRUE(pair.value("evicted", false)) << pair.dump(2);
  }
}

TEST(KvEventsEngineTest, ATierThatDropsTheSaltIsSharedPairsFromTheCpuTier) {
  std::vector<std::string> flags = kTier;
  flags.push_back("--fault=tier-drops-salt");
  const AuditRun r =
      RunAudit("tier-drops-salt", flags, "", {"--evict-tokens=640"});
  ASSERT_EQ(r.cli.exit_code, 1) << r.cli.out;
  EXPECT_EQ(r.kv()["shared_pairs"], 3) << r.kv().dump(2);
  for (const nlohmann::json& pair : r.kv()["pairs"]) {
    // A's blocks went to the CPU tier first; B's hit came from there.
    EXPECT_GT(pair.value("moved", 0), 0) << pair.dump(2);
    EXPECT_NE(pair.value("reason", "").find("CPU tier"), std::string::npos)
        << pair.dump(2);
  }
  int incidents = 0;
  for (const nlohmann::json& i : r.doc["incidents"]) {
    incidents += i["detector"] == "kv_events" &&
                 i["kind"] == "cross_tenant_kv_block_hit";
  }
  EXPECT_EQ(incidents, 1) << r.doc["incidents"].dump(2);
  // Timing found it too.
  EXPECT_NE(r.cli.out.find("cross_tenant_cache_hit"), std::string::npos)
      << r.cli.out;
}

TEST(KvEventsEngineTest, AWrongPasswordIsAnErrorNotAVerdict) {
  const std::string wrong = TempPath("wrong.token");
  std::ofstream(wrong) << "not-the-trace-token\n";
  const AuditRun r =
      RunAudit("wrong password", {"--prefix-cache=tenant"}, wrong);
  EXPECT_EQ(r.cli.exit_code, 2) << r.cli.out;
  EXPECT_NE(r.cli.out.find("refused the handshake"), std::string::npos)
      << r.cli.out;
}

}  // namespace
}  // namespace kvcanary::testing
