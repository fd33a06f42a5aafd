// The page-reuse faults with real processes: abort-transfer-race,
// no-scrub-reuse and metadata-slot-reuse. Each is caught in the decode
// node's trace with the right kind and attributed to the tenant whose data
// was exposed (detect), fails the affected client with no text (enforce),
// and is clean with the fault off.
#include <atomic>
#include <map>
#include <set>
#include <thread>

#include "gtest/gtest.h"
#include "tests/integration/cluster.h"

namespace kvcanary::testing {
namespace {

// Tenant ids, in the order of the tenants file.
constexpr uint32_t kAcme = 1, kGlobex = 2;
const char* const kKeys[] = {"sk-acme", "sk-globex", "sk-initech",
                             "sk-umbrella"};

// Results of `clients` threads each running `fn(client, i)` for i = 0, 1,
// ... until `stop` returns true.
template <typename Fn, typename Stop>
std::vector<HttpResult> RunClients(int clients, Fn fn, Stop stop) {
  std::mutex mu;
  std::vector<HttpResult> results;
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      for (int i = 0; !stop(); ++i) {
        HttpResult r = fn(c, i);
        std::lock_guard<std::mutex> lock(mu);
        results.push_back(std::move(r));
      }
    });
  }
  for (auto& t : threads) t.join();
  return results;
}

// --- no-scrub-reuse ----------------------------------------------------------

// globex's requests fill the decode node's pages and free them; acme's short
// request gets them next (LIFO) and decodes over a partly written last page.
// globex's own later requests read its earlier ones' tails (stale reads of
// its own data), which enforce refuses: `warm_must_succeed` is false there.
HttpResult RunNoScrubReuse(const Cluster& cluster,
                           bool warm_must_succeed = true) {
  for (int i = 0; i < 3; ++i) {
    HttpResult r = Post(cluster.router(), "/v1/completions",
                        Completion(LongPrompt(60) + " " + std::to_string(i), 8),
                        "sk-globex");
    if (warm_must_succeed) {
      EXPECT_EQ(r.status, 200) << r.body;
    }
  }
  return Post(cluster.router(), "/v1/completions", Completion("a cat sat", 12),
              "sk-acme");
}

TEST(NoScrubReuseTest, DetectAttributesTheStaleTailToThePreviousTenant) {
  Cluster cluster(
      {"--fault=no-scrub-reuse", "--watermark=detect", "--num_pages=64"});
  ASSERT_TRUE(cluster.ok());
  TraceTap tap(cluster.decode(), cluster.trace_token());
  HttpResult r = RunNoScrubReuse(cluster);
  ASSERT_EQ(r.status, 200) << r.body;
  const auto found =
      ViolationsOf(tap.Stop(), ViolationKind::kForeignTenantRead);
  ASSERT_FALSE(found.empty());
  for (const TraceEvent& v : found) {
    EXPECT_EQ(v.reader.tenant.value(), kAcme);
    EXPECT_EQ(v.writer.tenant.value(), kGlobex);  // whose bytes the tail holds
    EXPECT_GT(v.slots, v.filled);                 // a read past what acme wrote
  }
}

TEST(NoScrubReuseTest, EnforceFailsTheRequestWithNoText) {
  Cluster cluster(
      {"--fault=no-scrub-reuse", "--watermark=enforce", "--num_pages=64"});
  ASSERT_TRUE(cluster.ok());
  HttpResult r = RunNoScrubReuse(cluster, /*warm_must_succeed=*/false);
  EXPECT_EQ(r.status, 502) << r.body;
  EXPECT_FALSE(r.json.contains("choices")) << r.body;
}

TEST(NoScrubReuseTest, FaultOffTheSameRequestsAreClean) {
  Cluster cluster({"--watermark=detect", "--num_pages=64", "--scrub=none"});
  ASSERT_TRUE(cluster.ok());
  TraceTap tap(cluster.decode(), cluster.trace_token());
  HttpResult r = RunNoScrubReuse(cluster);
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(CountViolations(tap.Stop()), 0);
}

// --- abort-transfer-race -----------------------------------------------------

// globex's long prompt crosses a slow link (100 KB/s, about 3.4 s for its
// K/V), and after 1 s its request is given up — by the decode node (its
// transfer timeout) or by globex's client, which hangs up (the router and
// the decode node notice at once: engine/nodes/hangup_watch.h) — freeing its
// 16 pages; then 10 clients of acme, initech and umbrella send short
// requests (3 pages each, their transfers take tens of ms): the freed pages,
// on top of the free list, are all reallocated, again and again, while
// globex's transfer is still writing into them.
enum class GivesUp { kDecodeTimeout, kClientHangsUp };

struct RaceRun {
  HttpResult globex;
  // The decode node's cancelled requests 300 ms after globex's client hung
  // up, with its transfer still ~2 s from done (kClientHangsUp only).
  double cancelled_before_transfer_end = 0;
  std::vector<HttpResult> others;
  std::vector<TraceEvent> trace;
};

RaceRun RunAbortTransferRace(const std::vector<std::string>& flags,
                             GivesUp gives_up = GivesUp::kDecodeTimeout) {
  std::vector<std::string> args = {"--test_kv_receive_bytes_per_s=100000",
                                   "--num_pages=64"};
  if (gives_up == GivesUp::kDecodeTimeout) {
    args.push_back("--transfer_timeout_ms=1000");
  }
  args.insert(args.end(), flags.begin(), flags.end());
  Cluster cluster(args);
  RaceRun run;
  EXPECT_TRUE(cluster.ok());
  if (!cluster.ok()) return run;
  TraceTap tap(cluster.decode(), cluster.trace_token());
  // globex's client hears of the abort (or gives up) at once; its
  // transfer goes on for about 2.4 s more.
  run.globex =
      Post(cluster.router(), "/v1/completions", Completion(LongPrompt(80), 8),
           "sk-globex",
           /*read_timeout_s=*/gives_up == GivesUp::kClientHangsUp ? 1 : 120);
  if (gives_up == GivesUp::kClientHangsUp) {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    run.cancelled_before_transfer_end =
        MetricValue(Get(cluster.decode(), "/metrics").body,
                    "kvcanary_node_requests_total", "outcome=\"cancelled\"");
  }
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(3000);
  run.others = RunClients(
      10,
      [&](int c, int i) {
        const char* key = c % 3 == 0   ? "sk-acme"
                          : c % 3 == 1 ? "sk-initech"
                                       : "sk-umbrella";
        return Post(cluster.router(), "/v1/completions",
                    Completion("a cat sat " + std::to_string(i), 40), key);
      },
      [&] { return std::chrono::steady_clock::now() > deadline; });
  run.trace = tap.Stop();
  return run;
}

TEST(AbortTransferRaceTest, DetectTracesLateWritesOfTheAbortedTenant) {
  RaceRun run = RunAbortTransferRace(
      {"--fault=abort-transfer-race", "--watermark=detect"});
  EXPECT_NE(run.globex.status, 200) << run.globex.body;  // it timed out
  const auto late = ViolationsOf(run.trace, ViolationKind::kLateWrite);
  ASSERT_FALSE(late.empty());
  for (const TraceEvent& v : late) {
    EXPECT_EQ(v.writer.tenant.value(), kGlobex);  // whose K/V landed
    EXPECT_NE(v.owner.generation, v.writer.generation);
  }
  // A next owner that read the page read globex's bytes.
  for (const TraceEvent& v :
       ViolationsOf(run.trace, ViolationKind::kForeignTenantRead)) {
    EXPECT_EQ(v.writer.tenant.value(), kGlobex);
    EXPECT_NE(v.reader.tenant.value(), kGlobex);
  }
}

TEST(AbortTransferRaceTest, EnforceFailsTheNextOwnerWithNoText) {
  RaceRun run = RunAbortTransferRace(
      {"--fault=abort-transfer-race", "--watermark=enforce"});
  ASSERT_FALSE(ViolationsOf(run.trace, ViolationKind::kLateWrite).empty());
  int refused = 0;
  for (const HttpResult& r : run.others) {
    if (r.status == 200) continue;
    EXPECT_EQ(r.status, 502) << r.body;
    EXPECT_FALSE(r.json.contains("choices")) << r.body;
    ++refused;
  }
  EXPECT_GT(refused, 0) << "no late write landed on a live request";
}

TEST(AbortTransferRaceTest, FaultOffTheSameRaceIsClean) {
  RaceRun run = RunAbortTransferRace({"--watermark=detect"});
  EXPECT_NE(run.globex.status, 200) << run.globex.body;
  EXPECT_EQ(CountViolations(run.trace), 0);
  for (const HttpResult& r : run.others) EXPECT_EQ(r.status, 200) << r.body;
}

// The same race from the client's side: it hangs up mid-transfer, and the
// decode node, noticing, aborts the request while its K/V still arrives.
TEST(AbortTransferRaceTest, AClientHangingUpMidTransferLeavesLateWrites) {
  RaceRun run = RunAbortTransferRace(
      {"--fault=abort-transfer-race", "--watermark=detect"},
      GivesUp::kClientHangsUp);
  EXPECT_EQ(run.globex.status, 0) << run.globex.body;  // it hung up
  EXPECT_GE(run.cancelled_before_transfer_end, 1);
  const auto late = ViolationsOf(run.trace, ViolationKind::kLateWrite);
  ASSERT_FALSE(late.empty());
  for (const TraceEvent& v : late) {
    EXPECT_EQ(v.writer.tenant.value(), kGlobex);
  }
}

// Without the fault a client that hangs up mid-transfer frees its pages at
// once (the decode node counts it cancelled ~2 s before its K/V would have
// arrived), and nothing it sent lands anywhere.
TEST(AbortTransferRaceTest, FaultOffAClientHangingUpIsGivenUpAtOnceAndClean) {
  RaceRun run =
      RunAbortTransferRace({"--watermark=detect"}, GivesUp::kClientHangsUp);
  EXPECT_EQ(run.globex.status, 0) << run.globex.body;
  EXPECT_GE(run.cancelled_before_transfer_end, 1);
  EXPECT_EQ(CountViolations(run.trace), 0);
  for (const HttpResult& r : run.others) EXPECT_EQ(r.status, 200) << r.body;
}

// --- metadata-slot-reuse -----------------------------------------------------

// 16 clients of 4 tenants through 2 metadata slots, same-length prompts.
// Rounds of 16 concurrent requests until a violation shows up (at most 5).
struct SlotRun {
  std::vector<HttpResult> results;
  std::vector<TraceEvent> trace;
};

SlotRun RunMetadataSlotReuse(const std::vector<std::string>& flags,
                             bool until_violation) {
  std::vector<std::string> args = {"--metadata_slots=2", "--num_pages=256"};
  args.insert(args.end(), flags.begin(), flags.end());
  Cluster cluster(args);
  SlotRun run;
  EXPECT_TRUE(cluster.ok());
  if (!cluster.ok()) return run;
  TraceTap tap(cluster.decode(), cluster.trace_token());
  for (int round = 0; round < 5; ++round) {
    std::atomic<int> left{16};
    auto results = RunClients(
        16,
        [&](int c, int) {
          return Post(cluster.router(), "/v1/completions",
                      Completion(LongPrompt(20), 16), kKeys[c % 4]);
        },
        [&] { return left.fetch_sub(1) <= 0; });
    run.results.insert(run.results.end(), results.begin(), results.end());
    if (!until_violation) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    if (std::any_of(run.results.begin(), run.results.end(),
                    [](const HttpResult& r) { return r.status != 200; }))
      break;
    // Detect mode answers 200: look at the metrics instead.
    if (MetricValue(Get(cluster.decode(), "/metrics").body,
                    "kvcanary_node_watermark_violations_total", "kind=") > 0)
      break;
  }
  run.trace = tap.Stop();
  return run;
}

TEST(MetadataSlotReuseTest, DetectAttributesTheInstalledKvToItsTenant) {
  SlotRun run = RunMetadataSlotReuse(
      {"--fault=metadata-slot-reuse", "--watermark=detect"}, true);
  // Which tenant each request belongs to, from the lifecycle events.
  std::map<uint64_t, uint32_t> tenant_of;
  for (const TraceEvent& e : run.trace) {
    if (e.type == TraceEventType::kRequest) {
      tenant_of[e.request.value()] = e.tenant.value();
    }
  }
  const auto found = ViolationsOf(run.trace, ViolationKind::kForeignTenantRead);
  ASSERT_FALSE(found.empty());
  for (const TraceEvent& v : found) {
    EXPECT_NE(v.writer.tenant, v.reader.tenant);
    // The writer named is the request whose K/V was installed, of its
    // tenant (for a shared prefix, the request that computed it): the one
    // whose prompt was exposed.
    ASSERT_TRUE(tenant_of.count(v.writer.request.value()))
        << v.writer.request.value();
    EXPECT_EQ(tenant_of[v.writer.request.value()], v.writer.tenant.value());
  }
}

TEST(MetadataSlotReuseTest, EnforceFailsTheAffectedRequestsWithNoText) {
  SlotRun run = RunMetadataSlotReuse(
      {"--fault=metadata-slot-reuse", "--watermark=enforce"}, true);
  int refused = 0;
  for (const HttpResult& r : run.results) {
    if (r.status == 200) continue;
    EXPECT_EQ(r.status, 502) << r.body;
    EXPECT_FALSE(r.json.contains("choices")) << r.body;
    ++refused;
  }
  EXPECT_GT(refused, 0);
}

TEST(MetadataSlotReuseTest, FaultOffTwoSlotsServeSixteenClientsCleanly) {
  SlotRun run = RunMetadataSlotReuse({"--watermark=detect"}, false);
  ASSERT_EQ(run.results.size(), 16u);
  std::set<std::string> texts;
  for (const HttpResult& r : run.results) {
    ASSERT_EQ(r.status, 200) << r.body;
    texts.insert(r.json["choices"][0]["text"].get<std::string>());
  }
  EXPECT_EQ(texts.size(), 1u);  // the same greedy prompt, the same answer
  EXPECT_EQ(CountViolations(run.trace), 0);
}

// --- prefix-hash-collision ---------------------------------------------------

// acme's prompt is prefilled and its full pages cached on the prefill node;
// then globex sends a prompt with the same first 48 tokens.
struct PrefixRun {
  HttpResult acme, acme_again, globex;
  std::vector<TraceEvent> prefill_trace;
  std::string prefill_metrics;
};

PrefixRun RunPrefixCollision(const std::vector<std::string>& flags) {
  Cluster cluster(flags);
  PrefixRun run;
  EXPECT_TRUE(cluster.ok());
  if (!cluster.ok()) return run;
  TraceTap tap(cluster.prefill(), cluster.trace_token());
  const std::string shared = LongPrompt(30);
  run.acme = Post(cluster.router(), "/v1/completions",
                  Completion(shared + " cat", 8), "sk-acme");
  run.acme_again = Post(cluster.router(), "/v1/completions",
                        Completion(shared + " cat", 8), "sk-acme");
  run.globex = Post(cluster.router(), "/v1/completions",
                    Completion(shared + " sun", 8), "sk-globex");
  run.prefill_trace = tap.Stop();
  run.prefill_metrics = Get(cluster.prefill(), "/metrics").body;
  return run;
}

TEST(PrefixHashCollisionTest, DetectAttributesTheCachedPagesToTheirTenant) {
  PrefixRun run = RunPrefixCollision(
      {"--fault=prefix-hash-collision", "--watermark=detect"});
  ASSERT_EQ(run.globex.status, 200) << run.globex.body;
  const auto found =
      ViolationsOf(run.prefill_trace, ViolationKind::kForeignTenantRead);
  ASSERT_FALSE(found.empty());
  // The router's id of acme's first request, the one that computed the
  // cached pages: "cmpl-<id>".
  ASSERT_EQ(run.acme.status, 200) << run.acme.body;
  const uint64_t acme_id =
      std::stoull(run.acme.json["id"].get<std::string>().substr(5));
  for (const TraceEvent& v : found) {
    EXPECT_EQ(v.version, kTraceVersion2);
    EXPECT_EQ(v.reader.tenant.value(), kGlobex);
    EXPECT_EQ(v.writer.tenant.value(), kAcme);  // acme's prompt was exposed
    EXPECT_EQ(v.writer.request, RequestId(acme_id));  // by this request
    EXPECT_TRUE(v.writer_shared);
  }
  // The prefill node said which of acme's pages it shared, naming the same
  // request (globex may publish pages of its own after the shared ones).
  int shares = 0;
  for (const TraceEvent& e : run.prefill_trace) {
    if (e.type != TraceEventType::kPageShare || e.tenant.value() != kAcme) {
      continue;
    }
    ++shares;
    EXPECT_EQ(e.request, RequestId(acme_id));
  }
  EXPECT_GT(shares, 0);
}

TEST(PrefixHashCollisionTest, EnforceFailsTheRequestWithNoText) {
  PrefixRun run = RunPrefixCollision(
      {"--fault=prefix-hash-collision", "--watermark=enforce"});
  EXPECT_EQ(run.acme.status, 200) << run.acme.body;
  EXPECT_EQ(run.globex.status, 502) << run.globex.body;
  EXPECT_FALSE(run.globex.json.contains("choices")) << run.globex.body;
}

TEST(PrefixHashCollisionTest, FaultOffTheCacheServesOnlyItsOwnTenant) {
  PrefixRun run = RunPrefixCollision({"--watermark=detect"});
  ASSERT_EQ(run.acme.status, 200) << run.acme.body;
  ASSERT_EQ(run.acme_again.status, 200) << run.acme_again.body;
  ASSERT_EQ(run.globex.status, 200) << run.globex.body;
  // acme's second request was served from the cache, with the same answer.
  EXPECT_GT(MetricValue(run.prefill_metrics,
                        "kvcanary_node_prefix_cache_hit_pages_total", "role"),
            0)
      << run.prefill_metrics;
  EXPECT_EQ(run.acme.json["choices"][0]["text"],
            run.acme_again.json["choices"][0]["text"]);
  EXPECT_EQ(CountViolations(run.prefill_trace), 0);
}

}  // namespace
}  // namespace kvcanary::testing
