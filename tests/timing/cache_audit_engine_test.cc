// `kvcanary-auditor cache-audit` against the real engine (`kvcanary-engine
// up`, processes on loopback) in each --prefix-cache mode and with the
// prefix-hash-collision fault: global and the fault are cross-tenant (exit
// 1), so is global under the default watermark enforce (by refusal),
// tenant is same-tenant (exit 0), off is none (exit 3). Each run prints
// its p-values, requests and seconds. Timing-sensitive: label `timing`.
//
// The engine accepts up to 500 prompt tokens here (its default is half the
// 512-token context), so the primed prefix is ~370 tokens and a hit saves
// most of its prefill: ~10-40 ms on a loaded 2-core machine, against
// misses that vary by a few ms.
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
  nlohmann::json doc;  // the --json result document
  const nlohmann::json& details() const { return doc["cache_audit"]; }
  std::string Explain() const { return cli.out; }
};

// Starts the engine with `engine_flags`, runs cache-audit against it (the
// tenants file's first two tenants, acme and globex) and prints what it
// found.
AuditRun RunAudit(const std::string& label,
                  std::vector<std::string> engine_flags,
                  const std::vector<std::string>& audit_flags = {}) {
  engine_flags.push_back("--max-prompt-tokens=500");
  Cluster cluster(engine_flags);
  AuditRun run;
  EXPECT_TRUE(cluster.ok()) << "kvcanary-engine up did not start";
  if (!cluster.ok()) return run;
  const std::string json_path = TempPath("cache-audit.json");
  std::vector<std::string> args = {
      "cache-audit", "--target=" + cluster.router(),
      "--tenants=" + WriteTenantsFile(), "--db=" + TempPath("cache-audit.db"),
      "--json=" + json_path};
  args.insert(args.end(), audit_flags.begin(), audit_flags.end());
  run.cli = Auditor(args);
  std::ifstream in(json_path);
  std::stringstream ss;
  ss << in.rdbuf();
  run.doc = nlohmann::json::parse(ss.str(), nullptr, false);
  if (run.doc.is_object() && run.doc.contains("cache_audit")) {
    const auto& d = run.details();
    std::printf(
        "[cache-audit %s] exit %d, level %s (fired by %s): "
        "p(same<control)=%.3g p(cross<control)=%.3g p(same<cross)=%.3g, "
        "medians %s ms, %s per arm, %lld requests, %.1f s\n",
        label.c_str(), run.cli.exit_code, d.value("level", "?").c_str(),
        d.value("fired_by", "?").c_str(),
        d.value("p_same_faster_than_control", -1.0),
        d.value("p_cross_faster_than_control", -1.0),
        d.value("p_same_faster_than_cross", -1.0),
        d.value("median_ttft_ms", "?").c_str(),
        d.value("samples_per_arm", "?").c_str(),
        static_cast<long long>(d.value("requests", 0)),
        d.value("seconds", 0.0));
  }
  return run;
}

TEST(CacheAuditEngineTest, GlobalPrefixCacheIsCrossTenant) {
  const AuditRun r =
      RunAudit("global", {"--prefix-cache=global", "--watermark=detect"});
  ASSERT_EQ(r.cli.exit_code, 1) << r.Explain();
  EXPECT_EQ(r.details()["level"], "cross-tenant");
  // The engine's own cached_tokens fires (the look stops at the first
  // decisive signal, so whether the timing also reached alpha by then
  // depends on the machine's load).
  EXPECT_NE(r.details()["fired_by"].get<std::string>().find("cached_tokens"),
            std::string::npos)
      << r.Explain();
  EXPECT_LE(r.details()["p_cross_faster_than_control"].get<double>(), 1e-6);
}

TEST(CacheAuditEngineTest, GlobalPrefixCacheWithoutWatermarksIsCrossTenant) {
  const AuditRun r = RunAudit("global, watermark off",
                              {"--prefix-cache=global", "--watermark=off"});
  ASSERT_EQ(r.cli.exit_code, 1) << r.Explain();
  EXPECT_EQ(r.details()["level"], "cross-tenant");
}

TEST(CacheAuditEngineTest, PrefixHashCollisionFaultIsCrossTenant) {
  // The weak unsalted key: another tenant's identical prefix hits.
  const AuditRun r =
      RunAudit("prefix-hash-collision",
               {"--fault=prefix-hash-collision", "--watermark=detect"});
  ASSERT_EQ(r.cli.exit_code, 1) << r.Explain();
  EXPECT_EQ(r.details()["level"], "cross-tenant");
  EXPECT_NE(r.details()["fired_by"].get<std::string>().find("cache_timing"),
            std::string::npos);
}

TEST(CacheAuditEngineTest, TenantPrefixCacheIsSameTenant) {
  const AuditRun r = RunAudit("tenant", {"--prefix-cache=tenant"});
  ASSERT_EQ(r.cli.exit_code, 0) << r.Explain();
  EXPECT_EQ(r.details()["level"], "same-tenant");
  EXPECT_LE(r.details()["p_same_faster_than_control"].get<double>(), 1e-6);
  EXPECT_LE(r.details()["p_same_faster_than_cross"].get<double>(), 1e-6);
  EXPECT_EQ(r.details()["cached_tokens"]["cross_tenant"]["hits"], 0);
}

TEST(CacheAuditEngineTest, NoPrefixCacheIsNone) {
  const AuditRun r =
      RunAudit("off", {"--prefix-cache=off"}, {"--max-samples=40"});
  ASSERT_EQ(r.cli.exit_code, 3) << r.Explain();
  EXPECT_EQ(r.details()["level"], "none");
  EXPECT_NE(r.cli.out.find("cannot see a cache hit"), std::string::npos)
      << r.Explain();
}

TEST(CacheAuditEngineTest,
     GlobalPrefixCacheUnderEnforceIsCrossTenantByRefusal) {
  // The engine's default watermark (enforce) refuses the cross-tenant read
  // (502) instead of serving it: nothing to time, but the refusal itself
  // answers "did A send this?" — B's probes of A's prefixes fail, its
  // probes of never-seen ones do not.
  const AuditRun r = RunAudit("global, enforce", {"--prefix-cache=global"});
  ASSERT_EQ(r.cli.exit_code, 1) << r.Explain();
  EXPECT_EQ(r.details()["level"], "cross-tenant");
  EXPECT_NE(r.details()["fired_by"].get<std::string>().find("cache_refusal"),
            std::string::npos)
      << r.Explain();
  EXPECT_LE(r.details()["p_cross_refused_more_than_control"].get<double>(),
            1e-6);
}

// The two commands agree on one engine: against the same global cache
// under enforce, `probe` (black-box) finds the sharing from the same
// refusals `cache-audit` reads (the cache_refusal detector), where before
// it ended inconclusive (its golden answers refused, nothing to compare).
TEST(CacheAuditEngineTest,
     ProbeAgreesWithCacheAuditOnAGlobalCacheUnderEnforce) {
  Cluster cluster({"--prefix-cache=global", "--max-prompt-tokens=500"});
  ASSERT_TRUE(cluster.ok());
  const std::string db = TempPath("agree.db");
  CliRun probe = Auditor({"probe", "--target=" + cluster.router(),
                          "--tenants=" + WriteTenantsFile(), "--db=" + db,
                          "--max-probes=120", "--duration=120", "--quiet"});
  EXPECT_EQ(probe.exit_code, 1) << probe.out;
  EXPECT_NE(probe.out.find("cross_tenant_cache_refusal"), std::string::npos)
      << probe.out;
  CliRun audit = Auditor({"cache-audit", "--target=" + cluster.router(),
                          "--tenants=" + WriteTenantsFile(),
                          "--db=" + TempPath("agree-audit.db")});
  EXPECT_EQ(audit.exit_code, 1) << audit.out;
  EXPECT_NE(audit.out.find("cross-tenant"), std::string::npos) << audit.out;
}

}  // namespace
}  // namespace kvcanary::testing
