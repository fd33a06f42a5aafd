// The faults of a failed or aborted transfer, with real processes:
// abort-cache-insert and stale-transfer-ref. Each is caught in the decode
// node's trace with the right kind and attributed to the tenant whose data
// was exposed (detect), fails the affected client with no text (enforce),
// and is clean with the fault off.
//
// Both start the same way: globex's short request fills four of the decode
// node's pages and frees them; then acme's long prompt (244 tokens) crosses
// a slow link (100 KB/s, about 3 s for its K/V) and the decode node gives
// up on it after 1 s. Its reservation got globex's freed pages first (the
// free list is LIFO), and nothing of acme's was written into them.
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/integration/cluster.h"

namespace kvcanary::testing {
namespace {

// Tenant ids, in the order of the tenants file.
constexpr uint32_t kAcme = 1, kGlobex = 2;

std::vector<std::string> SlowLinkFlags(std::vector<std::string> flags) {
  flags.insert(flags.end(),
               {"--transfer_timeout_ms=1000",
                "--test_kv_receive_bytes_per_s=100000", "--num_pages=64"});
  return flags;
}

// globex's request: 34 tokens (about 0.5 s over the slow link), 4 pages.
HttpResult RunGlobex(const Cluster& cluster) {
  return Post(cluster.router(), "/v1/completions",
              Completion(LongPrompt(10), 24), "sk-globex");
}

// acme's long prompt: it starts with the 34 tokens of LongPrompt(10).
HttpResult RunAcmeLong(const Cluster& cluster) {
  return Post(cluster.router(), "/v1/completions",
              Completion(LongPrompt(80), 8), "sk-acme");
}

// Every foreign_tenant_read is acme reading globex's bytes; returns how
// many there are.
int ExpectAcmeReadGlobex(const std::vector<TraceEvent>& trace) {
  const auto found = ViolationsOf(trace, ViolationKind::kForeignTenantRead);
  for (const TraceEvent& v : found) {
    EXPECT_EQ(v.reader.tenant.value(), kAcme);
    EXPECT_EQ(v.writer.tenant.value(), kGlobex);  // whose K/V acme read
  }
  return static_cast<int>(found.size());
}

// --- abort-cache-insert ------------------------------------------------------

// After acme's long request is aborted, acme sends the first 34 tokens of
// the same prompt: its 2 full pages of prefix are the aborted request's
// first two pages if those were cached. The decode node reads cached pages
// instead of the transferred ones; they hold globex's K/V.
struct CacheRun {
  HttpResult globex, aborted, again;
  std::vector<TraceEvent> decode_trace;
  std::string decode_metrics;
};

CacheRun RunAbortCacheInsert(const std::vector<std::string>& flags) {
  Cluster cluster(SlowLinkFlags(flags));
  CacheRun run;
  EXPECT_TRUE(cluster.ok());
  if (!cluster.ok()) return run;
  TraceTap tap(cluster.decode(), cluster.trace_token());
  run.globex = RunGlobex(cluster);
  run.aborted = RunAcmeLong(cluster);
  run.again = Post(cluster.router(), "/v1/completions",
                   Completion(LongPrompt(10), 8), "sk-acme");
  run.decode_trace = tap.Stop();
  run.decode_metrics = Get(cluster.decode(), "/metrics").body;
  return run;
}

TEST(AbortCacheInsertTest, DetectAttributesTheCachedStalePagesToTheirTenant) {
  CacheRun run =
      RunAbortCacheInsert({"--fault=abort-cache-insert", "--watermark=detect"});
  ASSERT_EQ(run.globex.status, 200) << run.globex.body;
  EXPECT_NE(run.aborted.status, 200) << run.aborted.body;  // timed out
  ASSERT_EQ(run.again.status, 200) << run.again.body;
  // The decode node served acme's second request from its prefix cache.
  EXPECT_GT(MetricValue(run.decode_metrics,
                        "kvcanary_node_prefix_cache_hit_pages_total", "role"),
            0)
      << run.decode_metrics;
  EXPECT_GT(ExpectAcmeReadGlobex(run.decode_trace), 0);
  // The cached pages were published by acme although acme never wrote them.
  int shares = 0;
  for (const TraceEvent& e : run.decode_trace) {
    shares += e.type == TraceEventType::kPageShare && e.tenant.value() == kAcme;
  }
  EXPECT_GT(shares, 0);
}

TEST(AbortCacheInsertTest, EnforceFailsTheNextRequestWithNoText) {
  CacheRun run = RunAbortCacheInsert(
      {"--fault=abort-cache-insert", "--watermark=enforce"});
  ASSERT_EQ(run.globex.status, 200) << run.globex.body;
  EXPECT_EQ(run.again.status, 502) << run.again.body;
  EXPECT_FALSE(run.again.json.contains("choices")) << run.again.body;
}

TEST(AbortCacheInsertTest, FaultOffTheAbortedPagesAreNotCached) {
  CacheRun run = RunAbortCacheInsert({"--watermark=detect"});
  ASSERT_EQ(run.globex.status, 200) << run.globex.body;
  EXPECT_NE(run.aborted.status, 200) << run.aborted.body;
  EXPECT_EQ(run.again.status, 200) << run.again.body;
  EXPECT_EQ(MetricValue(run.decode_metrics,
                        "kvcanary_node_prefix_cache_hit_pages_total", "role"),
            0)
      << run.decode_metrics;
  EXPECT_EQ(CountViolations(run.decode_trace), 0);
}

// --- stale-transfer-ref ------------------------------------------------------

// One metadata slot, so acme's request gets the slot globex's used.
struct StaleRun {
  HttpResult globex, acme;
  std::vector<TraceEvent> decode_trace;
};

StaleRun RunStaleTransferRef(const std::vector<std::string>& flags) {
  std::vector<std::string> args = SlowLinkFlags(flags);
  args.push_back("--metadata_slots=1");
  Cluster cluster(args);
  StaleRun run;
  EXPECT_TRUE(cluster.ok());
  if (!cluster.ok()) return run;
  TraceTap tap(cluster.decode(), cluster.trace_token());
  run.globex = RunGlobex(cluster);
  run.acme = RunAcmeLong(cluster);
  run.decode_trace = tap.Stop();
  return run;
}

TEST(StaleTransferRefTest, DetectAnswersFromThePreviousTenantsPages) {
  StaleRun run =
      RunStaleTransferRef({"--fault=stale-transfer-ref", "--watermark=detect"});
  ASSERT_EQ(run.globex.status, 200) << run.globex.body;
  // The incident: a transfer that never arrived, answered 200 with text.
  ASSERT_EQ(run.acme.status, 200) << run.acme.body;
  EXPECT_TRUE(run.acme.json.contains("choices")) << run.acme.body;
  EXPECT_GT(ExpectAcmeReadGlobex(run.decode_trace), 0);
}

TEST(StaleTransferRefTest, EnforceFailsTheRequestWithNoText) {
  StaleRun run = RunStaleTransferRef(
      {"--fault=stale-transfer-ref", "--watermark=enforce"});
  ASSERT_EQ(run.globex.status, 200) << run.globex.body;
  EXPECT_EQ(run.acme.status, 502) << run.acme.body;
  EXPECT_FALSE(run.acme.json.contains("choices")) << run.acme.body;
}

TEST(StaleTransferRefTest, FaultOffTheFailedTransferFailsTheRequest) {
  StaleRun run = RunStaleTransferRef({"--watermark=detect"});
  ASSERT_EQ(run.globex.status, 200) << run.globex.body;
  EXPECT_NE(run.acme.status, 200) << run.acme.body;
  EXPECT_FALSE(run.acme.json.contains("choices")) << run.acme.body;
  EXPECT_EQ(CountViolations(run.decode_trace), 0);
}

}  // namespace
}  // namespace kvcanary::testing
