// The KV-cache event stream with a second tier (a host-memory or disk tier
// behind the prefix cache): the ledger keeping each event's medium, the
// per-pair decision on A's blocks moved to the tier and promoted or
// recomputed for B, and the probes' eviction step against a scripted vLLM.
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "auditor/kv_events/ledger.h"
#include "auditor/kv_events/pairs.h"
#include "auditor/kv_events/subscriber.h"
#include "auditor/kv_events/wire.h"
#include "auditor/target/target.h"
#include "gtest/gtest.h"
#include "tests/auditor/fakes/fake_kv_publisher.h"
#include "tests/auditor/fakes/fake_target.h"
#include "tests/auditor/kv_events/pair_builder.h"

namespace kvcanary::auditor::kv_events {
namespace {

using testing::EncodeBatch;
using testing::FakeEvent;
using testing::FakeKvPublisher;
using testing::In;
using testing::PairBuilder;
using testing::Removed;
using testing::Stored;

TEST(KvEventsLedgerTest, KeepsEachEventsMediumFromTheWire) {
  Ledger ledger;
  ledger.Ingest(0,
                *DecodeBatch(EncodeBatch(
                    {Stored({1}, {}, 10), In("CPU", Stored({2}, {}, 10)),
                     In("CPU_PINNED", Removed({3})),
                     In("", Stored({4}, {}, 20)), In("NVME", Removed({5}))})),
                0);
  const Span s = ledger.Since(Mark());
  ASSERT_EQ(s.entries.size(), 5u);
  EXPECT_EQ(s.entries[0].medium, Medium::kGpu);
  EXPECT_EQ(s.entries[1].medium, Medium::kCpu);
  EXPECT_EQ(s.entries[2].medium, Medium::kCpuPinned);
  EXPECT_EQ(s.entries[3].medium, Medium::kNone);
  EXPECT_EQ(s.entries[4].medium, Medium::kOther);
  EXPECT_TRUE(FirstTier(s.entries[0].medium) && FirstTier(s.entries[3].medium));
  EXPECT_FALSE(FirstTier(s.entries[1].medium));
  EXPECT_STREQ(MediumName(s.entries[2].medium), "CPU_PINNED");
  // The same tokens in either tier: the same digest.
  EXPECT_EQ(s.entries[0].token_digest, s.entries[1].token_digest);
  // One byte, in the padding after the event type: no cost per entry.
  static_assert(sizeof(Medium) == 1);
}

// --- DecidePair with a second tier -----------------------------------------

// A's three blocks (hashes 1-3, tokens 100-111) pushed out of the GPU by
// filler requests (a block of other tokens) and spilled to the CPU tier
// under `tier_hashes`.
std::vector<FakeEvent> SpillToCpu(std::vector<uint64_t> tier_hashes) {
  return {Stored({50}, {}, 600), Removed({1, 2, 3}),
          In("CPU", Stored(std::move(tier_hashes), {}, 100))};
}

TEST(KvEventsSecondTierTest, AMoveThenAPromotionWithCachedTokensIsShared) {
  // The tier drops the salt (keys of the tokens alone): B's lookup hits
  // A's spilled copy, promoted under B's own hashes, and B's usage reports
  // A's 12 tokens cached.
  PairBuilder p;
  p.Plant({Stored({1, 2, 3}, {}, 100)});
  p.Evict(SpillToCpu({101, 102, 103}));
  p.Probe({Stored({11, 12, 13, 14}, {}, 100)});
  p.Control({Stored({21}, {}, 900)});
  const PairResult r = DecidePair(p.Observe(/*cached=*/12));
  EXPECT_EQ(r.verdict, PairVerdict::kShared) << r.reason;
  EXPECT_NE(r.reason.find("from the CPU tier"), std::string::npos) << r.reason;
  EXPECT_NE(r.reason.find("promoted under B's hashes"), std::string::npos);
  EXPECT_TRUE(r.evicted);
  EXPECT_EQ(r.moved, 3);
  EXPECT_EQ(r.promoted, 3);
  EXPECT_EQ(r.tier_medium, "CPU");
  // A note, not the verdict: the tier keyed A's blocks other than A did.
  EXPECT_EQ(r.tier_rehashed, 3);
  EXPECT_NE(r.reason.find("keys blocks differently"), std::string::npos);
  const nlohmann::json j = r.ToJson();
  EXPECT_EQ(j["promoted"], 3);
  EXPECT_EQ(j["evicted"], true);
  EXPECT_EQ(j["block_checks"][0]["moved"], true);
}

TEST(KvEventsSecondTierTest, AWriteThroughTiersCopyBeforeTheRemovalIsAMove) {
  // A write-through tier (LMCache's store path) copies A's blocks while A
  // computes them; the fillers later only remove them from the GPU.
  PairBuilder p;
  p.Plant({Stored({1, 2, 3}, {}, 100), In("CPU", Stored({1, 2, 3}, {}, 100))});
  p.Evict({Stored({50}, {}, 600), Removed({1, 2, 3})});
  p.Probe({Stored({11, 12, 13, 14}, {}, 100)});
  p.Control({Stored({21}, {}, 900)});
  const PairResult r = DecidePair(p.Observe(/*cached=*/12));
  EXPECT_EQ(r.verdict, PairVerdict::kShared) << r.reason;
  EXPECT_EQ(r.moved, 3);
  EXPECT_EQ(r.tier_rehashed, 0);
  // The same with 0 cached tokens: B recomputed, isolated.
  EXPECT_EQ(DecidePair(p.Observe(/*cached=*/0)).verdict,
            PairVerdict::kIsolated);
}

TEST(KvEventsSecondTierTest, AnEvictionStepThatDidNotCompleteIsInconclusive) {
  PairBuilder p;
  p.Plant({Stored({1, 2, 3}, {}, 100)});
  p.Evict(SpillToCpu({101, 102, 103}));
  p.Probe({Stored({11, 12, 13, 14}, {}, 100)});
  p.Control({Stored({21}, {}, 900)});
  PairObservation o = p.Observe(/*cached=*/0);
  o.evict_done = false;  // a filler failed
  const PairResult r = DecidePair(o);
  EXPECT_EQ(r.verdict, PairVerdict::kInconclusive);
  EXPECT_NE(r.reason.find("did not complete"), std::string::npos) << r.reason;
}

TEST(KvEventsSecondTierTest, APromotionWithoutACachedTokenCountGoesByTiming) {
  PairBuilder p;
  p.Plant({Stored({1, 2, 3}, {}, 100)});
  p.Evict(SpillToCpu({1, 2, 3}));
  p.Probe({Stored({11, 12, 13, 14}, {}, 100)});
  p.Control({Stored({21}, {}, 900)});
  const PairResult r = DecidePair(p.Observe(/*cached=*/-1, 2, 10));
  EXPECT_EQ(r.verdict, PairVerdict::kShared) << r.reason;
  EXPECT_EQ(r.tier_rehashed, 0);
  EXPECT_EQ(r.reason.find("note"), std::string::npos) << r.reason;
}

TEST(KvEventsSecondTierTest, AMoveThenARecomputeWithNoCachedTokensIsIsolated) {
  // A healthy tier keys A's copy by A's salted hash: B misses it,
  // recomputes and stores under its own hashes, and reports 0 cached.
  PairBuilder p;
  p.Plant({Stored({1, 2, 3}, {}, 100)});
  p.Evict(SpillToCpu({1, 2, 3}));
  p.Probe({Stored({11, 12, 13, 14}, {}, 100)});
  p.Control({Stored({21}, {}, 900)});
  const PairResult r = DecidePair(p.Observe(/*cached=*/0));
  EXPECT_EQ(r.verdict, PairVerdict::kIsolated) << r.reason;
  EXPECT_EQ(r.moved, 3);
  EXPECT_EQ(r.promoted, 0);
  EXPECT_NE(r.reason.find("recompute"), std::string::npos) << r.reason;
  // No count and no faster first token: isolated too.
  PairBuilder q;
  q.Plant({Stored({1, 2, 3}, {}, 100)});
  q.Evict(SpillToCpu({1, 2, 3}));
  q.Probe({Stored({11, 12, 13, 14}, {}, 100)});
  q.Control({Stored({21}, {}, 900)});
  EXPECT_EQ(DecidePair(q.Observe(-1, 10, 10)).verdict, PairVerdict::kIsolated);
}

TEST(KvEventsSecondTierTest, CachedTokensCoveringPartOfTheMovedBlocksAreNot) {
  PairBuilder p;
  p.Plant({Stored({1, 2, 3}, {}, 100)});
  p.Evict(SpillToCpu({101, 102, 103}));
  p.Probe({Stored({11, 12, 13, 14}, {}, 100)});
  p.Control({Stored({21}, {}, 900)});
  const PairResult r = DecidePair(p.Observe(/*cached=*/12, 10, 10, 8));
  EXPECT_EQ(r.verdict, PairVerdict::kInconclusive) << r.reason;
}

TEST(KvEventsSecondTierTest, ARemovalWithoutASecondTierStoreIsInconclusive) {
  PairBuilder p;
  p.Plant({Stored({1, 2, 3}, {}, 100)});
  // Removed from the GPU; the CPU tier stored other tokens only.
  p.Evict({Stored({50}, {}, 600), Removed({1, 2, 3}),
           In("CPU", Stored({101}, {}, 600))});
  p.Probe({Stored({11, 12, 13, 14}, {}, 100)});
  p.Control({Stored({21}, {}, 900)});
  const PairResult r = DecidePair(p.Observe(/*cached=*/0));
  EXPECT_EQ(r.verdict, PairVerdict::kInconclusive) << r.reason;
  EXPECT_NE(r.reason.find("evicted"), std::string::npos) << r.reason;
  EXPECT_EQ(r.moved, 0);
}

TEST(KvEventsSecondTierTest,
     ACopyRemovedFromTheTierBeforeTheProbeIsInconclusive) {
  PairBuilder p;
  p.Plant({Stored({1, 2, 3}, {}, 100)});
  std::vector<FakeEvent> evict = SpillToCpu({1, 2, 3});
  evict.push_back(In("CPU", Removed({2})));
  p.Evict(evict);
  p.Probe({Stored({11, 12, 13, 14}, {}, 100)});
  p.Control({Stored({21}, {}, 900)});
  const PairResult r = DecidePair(p.Observe(/*cached=*/12));
  EXPECT_EQ(r.verdict, PairVerdict::kInconclusive) << r.reason;
  EXPECT_NE(r.reason.find("removed from it too"), std::string::npos)
      << r.reason;
}

TEST(KvEventsSecondTierTest, TheTierDroppingACopyAfterTheProbeIsNoMatter) {
  // B's request had its chance: the tier evicting the copy after it was
  // promoted changes nothing.
  PairBuilder p;
  p.Plant({Stored({1, 2, 3}, {}, 100)});
  p.Evict(SpillToCpu({101, 102, 103}));
  p.Probe({Stored({11, 12, 13, 14}, {}, 100), In("CPU", Removed({101}))});
  p.Control({Stored({21}, {}, 900)});
  EXPECT_EQ(DecidePair(p.Observe(/*cached=*/12)).verdict, PairVerdict::kShared);
}

TEST(KvEventsSecondTierTest, TheFillersStoresAreNotTakenForAsBlocks) {
  // Without the eviction mark the filler's block (tokens 600-603) would be
  // one of A's, and B never stores it: not all isolated.
  PairBuilder p;
  p.Plant({Stored({1, 2, 3}, {}, 100)});
  p.Evict({Stored({50}, {}, 600)});
  p.Probe({Stored({11, 12, 13, 14}, {}, 100)});
  p.Control({Stored({21}, {}, 900)});
  const PairResult r = DecidePair(p.Observe(/*cached=*/0));
  EXPECT_EQ(r.verdict, PairVerdict::kIsolated) << r.reason;
  EXPECT_EQ(r.isolated, 3);
  EXPECT_EQ(r.moved, 0);
}

// --- The eviction step, against a scripted vLLM ---------------------------

TEST(KvEventsProbesTest, TheEvictionStepRunsBetweenThePlantAndTheProbe) {
  // A vLLM salted per key whose stream the auditor follows; the eviction
  // step spills A's last stored blocks to a CPU tier under A's own hashes
  // (a healthy tier), so B's request recomputes: isolated, A's blocks
  // moved, and the step saw A's plant stored and B's probe not yet sent.
  FakeKvPublisher pub;
  std::mutex mu;
  std::vector<testing::FakeTargetOptions::StoredBlock> last;
  int stores = 0;
  testing::FakeTargetOptions fo;
  fo.per_key_prompt_cache = true;
  fo.report_cached_tokens = true;
  fo.cache_block_tokens = 4;
  fo.api_keys = {{"sk-a", "acme"}, {"sk-g", "globex"}};
  fo.on_blocks_stored =
      [&](const std::vector<testing::FakeTargetOptions::StoredBlock>& b) {
        std::lock_guard<std::mutex> lock(mu);
        last = b;
        ++stores;
        pub.Publish(EncodeBatch({testing::StoredEvent(b, 4)}));
      };
  testing::FakeTarget fake(fo);
  AuditTenant a, b;
  a.name = "acme";
  a.api_key = "sk-a";
  b.name = "globex";
  b.api_key = "sk-g";
  TargetOptions to;
  to.target = fake.url();
  to.tenants = {a, b};
  Target session(to);
  ASSERT_TRUE(session.Discover().ok());
  Ledger ledger;
  Subscriber sub(*ParseKvEventsFlag(pub.flag()), &ledger);
  ASSERT_TRUE(sub.Start().ok());
  std::vector<int> stores_at_evict;
  auto evict = [&]() -> absl::StatusOr<bool> {
    std::lock_guard<std::mutex> lock(mu);
    stores_at_evict.push_back(stores);
    FakeEvent gone = Removed({});
    for (const auto& blk : last) gone.hashes.push_back(blk.hash);
    pub.Publish(EncodeBatch({gone, In("CPU", testing::StoredEvent(last, 4))}));
    return true;
  };
  KvEventsProbeOptions po;
  po.pairs = 2;
  po.settle_quiet = absl::Milliseconds(40);
  int n = 0;
  absl::StatusOr<KvEventsOutcome> out = RunKvEventsProbes(
      session, a, b, sub, ledger, po,
      [&n](int units) {
        std::string p = "Nonce" + std::to_string(++n);
        for (int i = 0; i < units; ++i) p += " w" + std::to_string(n * 100 + i);
        return p;
      },
      nullptr, evict);
  sub.Stop();
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(stores_at_evict.size(), 2u);
  // Each step came right after A's plant (one store each of the plant and
  // of B's probe and control before the next pair's plant).
  EXPECT_EQ(stores_at_evict[1] - stores_at_evict[0], 3);
  for (const PairResult& r : out->pairs) {
    EXPECT_EQ(r.verdict, PairVerdict::kIsolated) << r.reason;
    EXPECT_TRUE(r.evicted);
    EXPECT_GT(r.moved, 0) << r.ToJson().dump();
    EXPECT_EQ(r.promoted, 0);
  }
  EXPECT_FALSE(out->notes.empty());
}

}  // namespace
}  // namespace kvcanary::auditor::kv_events
