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

// What a run adds to the shared start (above), for each fault.
enum class Then {
  // abort-cache-insert: after acme's long request is aborted, acme sends
  // the first 34 tokens of the same prompt: its 2 full pages of prefix are
  // the aborted request's first two pages if those were cached. The decode
  // node reads cached pages instead of the transferred ones; they hold
  // globex's K/V.
  kAcmePrefixAgain,
  // stale-transfer-ref: one metadata slot, so acme's request gets the slot
  // globex's used.
  kOneMetadataSlot,
};

struct AbortRun {
  HttpResult globex, acme;  // acme: its long request
  HttpResult again;         // acme's prefix again (kAcmePrefixAgain)
  std::vector<TraceEvent> decode_trace;
  std::string decode_metrics;
};

// The shared start (the file's header), then what `then` adds; the decode
// node's trace and metrics after it.
AbortRun RunSlowTransfer(const std::vector<std::string>& flags, Then then) {
  std::vector<std::string> args = SlowLinkFlags(flags);
  if (then == Then::kOneMetadataSlot) args.push_back("--metadata_slots=1");
  Cluster cluster(args);
  AbortRun run;
  EXPECT_TRUE(cluster.ok());
  if (!cluster.ok()) return run;
  TraceTap tap(cluster.decode(), cluster.trace_token());
  run.globex = RunGlobex(cluster);
  run.acme = RunAcmeLong(cluster);
  if (then == Then::kAcmePrefixAgain) {
    run.again = Post(cluster.router(), "/v1/completions",
                     Completion(LongPrompt(10), 8), "sk-acme");
  }
  run.decode_trace = tap.Stop();
  run.decode_metrics = Get(cluster.decode(), "/metrics").body;
  return run;
}

// --- abort-cache-insert ------------------------------------------------------

TEST(AbortCacheInsertTest, DetectAttributesTheCachedStalePagesToTheirTenant) {
  AbortRun run =
      RunSlowTransfer({"--fault=abort-cache-insert", "--watermark=detect"},
                      Then::kAcmePrefixAgain);
  ASSERT_EQ(run.globex.status, 200) << run.globex.body;
  EXPECT_NE(run.acme.status, 200) << run.acme.body;  // timed out
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
  AbortRun run =
      RunSlowTransfer({"--fault=abort-cache-insert", "--watermark=enforce"},
                      Then::kAcmePrefixAgain);
  ASSERT_EQ(run.globex.status, 200) << run.globex.body;
  EXPECT_EQ(run.again.status, 502) << run.again.body;
  EXPECT_FALSE(run.again.json.contains("choices")) << run.again.body;
}

TEST(AbortCacheInsertTest, FaultOffTheAbortedPagesAreNotCached) {
  AbortRun run =
      RunSlowTransfer({"--watermark=detect"}, Then::kAcmePrefixAgain);
  ASSERT_EQ(run.globex.status, 200) << run.globex.body;
  EXPECT_NE(run.acme.status, 200) << run.acme.body;
  EXPECT_EQ(run.again.status, 200) << run.again.body;
  EXPECT_EQ(MetricValue(run.decode_metrics,
                        "kvcanary_node_prefix_cache_hit_pages_total", "role"),
            0)
      << run.decode_metrics;
  EXPECT_EQ(CountViolations(run.decode_trace), 0);
}

// --- stale-transfer-ref ------------------------------------------------------

TEST(StaleTransferRefTest, DetectAnswersFromThePreviousTenantsPages) {
  AbortRun run =
      RunSlowTransfer({"--fault=stale-transfer-ref", "--watermark=detect"},
                      Then::kOneMetadataSlot);
  ASSERT_EQ(run.globex.status, 200) << run.globex.body;
  // The incident: a transfer that never arrived, answered 200 with text.
  ASSERT_EQ(run.acme.status, 200) << run.acme.body;
  EXPECT_TRUE(run.acme.json.contains("choices")) << run.acme.body;
  EXPECT_GT(ExpectAcmeReadGlobex(run.decode_trace), 0);
}

TEST(StaleTransferRefTest, EnforceFailsTheRequestWithNoText) {
  AbortRun run =
      RunSlowTransfer({"--fault=stale-transfer-ref", "--watermark=enforce"},
                      Then::kOneMetadataSlot);
  ASSERT_EQ(run.globex.status, 200) << run.globex.body;
  EXPECT_EQ(run.acme.status, 502) << run.acme.body;
  EXPECT_FALSE(run.acme.json.contains("choices")) << run.acme.body;
}

TEST(StaleTransferRefTest, FaultOffTheFailedTransferFailsTheRequest) {
  AbortRun run =
      RunSlowTransfer({"--watermark=detect"}, Then::kOneMetadataSlot);
  ASSERT_EQ(run.globex.status, 200) << run.globex.body;
  EXPECT_NE(run.acme.status, 200) << run.acme.body;
  EXPECT_FALSE(run.acme.json.contains("choices")) << run.acme.body;
  EXPECT_EQ(CountViolations(run.decode_trace), 0);
}

}  // namespace
}  // namespace kvcanary::testing
