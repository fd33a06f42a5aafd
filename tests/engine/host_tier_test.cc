// The host tier (engine/core/host_tier.h) behind the prefix cache: pages the
// pool evicts spill into it and come back by promotion, keeping their
// writer's stamp at a new generation; its LRU bound and CPU events; the
// salt keeping tenants apart; and the tier-drops-salt fault.
#include <random>
#include <vector>

#include "common/trace_event.h"
#include "engine/core/engine.h"
#include "engine/core/trace_bus.h"
#include "gtest/gtest.h"

namespace kvcanary::engine {
namespace {

constexpr TenantId kAcme{1}, kGlobex{2};

const Model& TestModel() {
  static const Model* model = new Model(DefaultModel());
  return *model;
}

// A prompt of `n` tokens: BOS, then a fixed pseudo-random run.
std::vector<int> Prompt(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int> p = {1};
  while (static_cast<int>(p.size()) < n) p.push_back(3 + rng() % 400);
  return p;
}

class RecordingSink : public KvEventSink {
 public:
  void Publish(KvEventBatch batch) override {
    for (KvCacheEvent& e : batch.events) events.push_back(std::move(e));
  }
  std::vector<KvCacheEvent> events;
};

// Four pages: a 40-token prompt with 4 new tokens takes three, and leaves
// two full prompt pages in the cache; the next such prompt evicts one.
EngineOptions Tiered(int host_tier_pages,
                     WatermarkMode mode = WatermarkMode::kEnforce) {
  EngineOptions o;
  o.num_pages = 4;
  o.host_tier_pages = host_tier_pages;
  o.watermark = mode;
  return o;
}

struct Result {
  RequestId id;
  std::vector<int> output;
  int cached_tokens = 0;
  std::vector<WatermarkViolation> violations;
  absl::Status status;
};

Result Generate(Engine& engine, TenantId tenant,
                const std::vector<int>& prompt) {
  SamplingParams greedy;
  greedy.max_tokens = 4;
  auto id = engine.Submit(tenant, prompt, greedy);
  EXPECT_TRUE(id.ok()) << id.status();
  engine.RunUntilIdle();
  const Sequence& seq = *engine.Get(*id);
  Result r{*id, seq.output, seq.cached_tokens, seq.violations,
           seq.state.abort_status()};
  engine.Release(*id);
  return r;
}

TEST(HostTierTest, EvictedPagesSpillAndComeBackAsCachedTokensExactly) {
  Engine engine(&TestModel(), Tiered(8));
  const auto a = Prompt(40, 7), b = Prompt(40, 8), c = Prompt(40, 9);
  const Result first = Generate(engine, kAcme, a);
  Generate(engine, kAcme, b);
  Generate(engine, kAcme, c);
  const PrefixCache& cache = *engine.prefix_cache();
  EXPECT_GE(cache.spilled_pages(), 2u);
  EXPECT_EQ(cache.host_tier()->size(), static_cast<int>(cache.spilled_pages()));
  const Result again = Generate(engine, kAcme, a);
  EXPECT_EQ(again.cached_tokens, 32);
  EXPECT_GE(cache.promoted_pages(), 1u);
  EXPECT_EQ(cache.tier_hit_pages(), cache.promoted_pages());
  EXPECT_TRUE(again.violations.empty());
  EXPECT_TRUE(again.status.ok()) << again.status;
  EXPECT_EQ(again.output, first.output);  // bitwise what was computed
}

TEST(HostTierTest, ARequestWaitingForPagesPromotesNothingUntilItFits) {
  Engine engine(&TestModel(), Tiered(8));
  const auto a = Prompt(40, 7);
  Generate(engine, kAcme, a);
  Generate(engine, kAcme, Prompt(40, 8));
  Generate(engine, kAcme, Prompt(40, 9));  // both of a's pages spilled
  const PrefixCache& cache = *engine.prefix_cache();
  SamplingParams greedy;
  greedy.max_tokens = 4;
  // Another request holds three of the four pages...
  auto busy = engine.Submit(kGlobex, Prompt(40, 10), greedy);
  ASSERT_TRUE(busy.ok());
  engine.Step();
  ASSERT_EQ(engine.Get(*busy)->state.phase(), RequestPhase::kDecoding);
  // ...so a's repeat, needing three, waits without copying a page in.
  const uint64_t promoted = cache.promoted_pages();
  auto again = engine.Submit(kAcme, a, greedy);
  ASSERT_TRUE(again.ok());
  engine.Step();
  EXPECT_EQ(engine.Get(*again)->state.phase(), RequestPhase::kAdmitted);
  EXPECT_EQ(cache.promoted_pages(), promoted);
  engine.RunUntilIdle();
  EXPECT_EQ(engine.Get(*again)->cached_tokens, 32);
  EXPECT_EQ(cache.promoted_pages(), promoted + 2);
}

TEST(HostTierTest, PromotedPageKeepsWriterAndSharedFlagAtANewGeneration) {
  TraceBus trace(TraceNode::kPrefill, 1 << 16, 1);
  auto reader = trace.Subscribe();
  EngineOptions o = Tiered(8);
  o.trace = &trace;
  Engine engine(&TestModel(), o);
  const auto a = Prompt(40, 7);
  const Result first = Generate(engine, kAcme, a);
  Generate(engine, kAcme, Prompt(40, 8));
  Generate(engine, kAcme, Prompt(40, 9));  // both of a's pages spilled
  reader->Wait(absl::ZeroDuration());      // what came before
  SamplingParams greedy;
  greedy.max_tokens = 4;
  auto id = engine.Submit(kAcme, a, greedy);
  ASSERT_TRUE(id.ok());
  engine.Step();  // admitted (promotion) and prefilled
  const Sequence& seq = *engine.Get(*id);
  ASSERT_EQ(seq.shared_pages, 2);
  for (int i = 0; i < 2; ++i) {
    const PageRef ref = seq.block_table[i];
    EXPECT_EQ(engine.pool().generation(ref.page), ref.generation);
    for (int l = 0; l < engine.pool().n_layers(); ++l) {
      const PageStamp& s = engine.pool().stamp(l, ref.page);
      EXPECT_EQ(s.writer.tenant, kAcme);
      EXPECT_EQ(s.writer.request, first.id);  // not the promoting request
      EXPECT_EQ(s.writer.generation, ref.generation);
      EXPECT_TRUE(s.shared());
      EXPECT_EQ(s.owner.request, *id);
    }
  }
  // page_alloc to the request, then page_write naming the writer, then
  // page_share, per promoted page (the page's free, when room was made for
  // the request by evicting it, comes before).
  std::vector<TraceEventType> types;
  for (const std::string& line : reader->Wait(absl::ZeroDuration())) {
    auto e = DecodeTraceLine(line);
    ASSERT_TRUE(e.ok()) << e.status();
    if (e->page != seq.block_table[0].page) continue;
    if (types.empty() && e->type == TraceEventType::kPageFree) continue;
    if (e->type == TraceEventType::kPageWrite) {
      EXPECT_EQ(e->request, first.id);
      EXPECT_EQ(e->writer_gen, seq.block_table[0].generation);
    }
    types.push_back(e->type);
  }
  ASSERT_GE(types.size(), 3u);
  EXPECT_EQ(types[0], TraceEventType::kPageAlloc);
  EXPECT_EQ(types[1], TraceEventType::kPageWrite);
  EXPECT_EQ(types[2], TraceEventType::kPageShare);
  engine.RunUntilIdle();
  EXPECT_TRUE(engine.Get(*id)->violations.empty());
}

TEST(HostTierTest, TierIsBoundedLeastRecentlyUsedWithCpuEvents) {
  RecordingSink sink;
  EngineOptions o = Tiered(1);
  o.kv_events = &sink;
  Engine engine(&TestModel(), o);
  for (uint32_t seed = 1; seed <= 4; ++seed) {
    Generate(engine, kAcme, Prompt(40, seed));
  }
  const PrefixCache& cache = *engine.prefix_cache();
  EXPECT_EQ(cache.host_tier()->size(), 1);
  EXPECT_GE(cache.spilled_pages(), 3u);
  EXPECT_EQ(cache.host_tier()->evicted_pages(), cache.spilled_pages() - 1);
  int gpu_stored = 0, gpu_removed = 0, cpu_stored = 0, cpu_removed = 0;
  for (const KvCacheEvent& e : sink.events) {
    const bool cpu = e.medium == KvCacheEvent::Medium::kCpu;
    if (e.type == KvCacheEvent::Type::kStored) {
      (cpu ? cpu_stored : gpu_stored) += 1;
      EXPECT_EQ(e.token_ids.size(), 16 * e.block_hashes.size());
    } else if (e.type == KvCacheEvent::Type::kRemoved) {
      (cpu ? cpu_removed : gpu_removed) += 1;
    }
  }
  EXPECT_EQ(gpu_stored, 4);  // one run per prompt
  EXPECT_GE(gpu_removed, 1);
  EXPECT_EQ(cpu_stored, static_cast<int>(cache.spilled_pages()));
  EXPECT_EQ(cpu_removed, static_cast<int>(cache.spilled_pages()) - 1);
}

TEST(HostTierTest, PromotionPublishesStoredGpuUnderTheRequestsKeys) {
  RecordingSink sink;
  EngineOptions o = Tiered(8);
  o.kv_events = &sink;
  Engine engine(&TestModel(), o);
  const auto a = Prompt(40, 7);
  Generate(engine, kAcme, a);
  Generate(engine, kAcme, Prompt(40, 8));
  Generate(engine, kAcme, Prompt(40, 9));
  sink.events.clear();
  Generate(engine, kAcme, a);
  const auto keys = engine.prefix_cache()->Keys(kAcme, a, 2);
  std::vector<BlockHash> stored;
  for (const KvCacheEvent& e : sink.events) {
    if (e.type != KvCacheEvent::Type::kStored ||
        e.medium != KvCacheEvent::Medium::kGpu) {
      continue;
    }
    stored.insert(stored.end(), e.block_hashes.begin(), e.block_hashes.end());
  }
  EXPECT_EQ(stored, keys);
}

// The CPU BlockStored of a prompt's first page carries the cache_salt its
// tier key was salted with; under tier-drops-salt it carries none.
std::vector<std::optional<std::string>> FirstPageCpuSalts(bool drops_salt) {
  RecordingSink sink;
  EngineOptions o = Tiered(8);
  o.kv_events = &sink;
  o.cache_salt = CacheSaltMode::kScoped;
  if (drops_salt) o.faults.add(Fault::kTierDropsSalt);
  Engine engine(&TestModel(), o);
  SamplingParams greedy;
  greedy.max_tokens = 4;
  SubmitOptions salted;
  salted.cache_salt = "s1";
  for (uint32_t seed : {7u, 8u, 9u}) {
    auto id = engine.Submit(kAcme, Prompt(40, seed), greedy, salted);
    EXPECT_TRUE(id.ok());
    engine.RunUntilIdle();
    engine.Release(*id);
  }
  std::vector<std::optional<std::string>> salts;
  for (const KvCacheEvent& e : sink.events) {
    if (e.type == KvCacheEvent::Type::kStored &&
        e.medium == KvCacheEvent::Medium::kCpu && !e.parent.has_value()) {
      salts.push_back(e.cache_salt);
    }
  }
  return salts;
}

TEST(HostTierTest, SpillEventsOfAFirstPageCarryTheSaltTheTierKeyHas) {
  const auto salted = FirstPageCpuSalts(false);
  ASSERT_FALSE(salted.empty());
  for (const auto& s : salted) EXPECT_EQ(s, std::optional<std::string>("s1"));
  const auto dropped = FirstPageCpuSalts(true);
  ASSERT_FALSE(dropped.empty());
  for (const auto& s : dropped) EXPECT_FALSE(s.has_value());
}

TEST(HostTierTest, SaltedKeysKeepTwoTenantsApartInTheTier) {
  Engine engine(&TestModel(), Tiered(8, WatermarkMode::kDetect));
  const auto a = Prompt(40, 7);
  Generate(engine, kAcme, a);
  Generate(engine, kAcme, Prompt(40, 8));
  Generate(engine, kAcme, Prompt(40, 9));
  ASSERT_GE(engine.prefix_cache()->host_tier()->size(), 2);
  const Result other = Generate(engine, kGlobex, a);
  EXPECT_EQ(other.cached_tokens, 0);
  EXPECT_EQ(engine.prefix_cache()->tier_hit_pages(), 0u);
  EXPECT_TRUE(other.violations.empty());
}

TEST(HostTierTest, TierDropsSaltLetsAnotherTenantPromoteAndDetectNamesBoth) {
  EngineOptions o = Tiered(8, WatermarkMode::kDetect);
  o.faults.add(Fault::kTierDropsSalt);
  Engine engine(&TestModel(), o);
  const auto a = Prompt(40, 7);
  const Result first = Generate(engine, kAcme, a);
  Generate(engine, kAcme, Prompt(40, 8));
  Generate(engine, kAcme, Prompt(40, 9));
  const Result other = Generate(engine, kGlobex, a);
  EXPECT_EQ(other.cached_tokens, 32);
  EXPECT_GE(engine.prefix_cache()->promoted_pages(), 1u);
  ASSERT_FALSE(other.violations.empty());
  bool foreign = false;
  for (const WatermarkViolation& v : other.violations) {
    if (v.kind != ViolationKind::kForeignTenantRead) continue;
    foreign = true;
    EXPECT_EQ(v.writer.tenant, kAcme);
    EXPECT_EQ(v.writer.request, first.id);
    EXPECT_TRUE(v.writer_shared);
    EXPECT_EQ(v.reader.tenant, kGlobex);
    EXPECT_EQ(v.reader.request, other.id);
  }
  EXPECT_TRUE(foreign);
  EXPECT_TRUE(other.status.ok());  // detect serves it
}

TEST(HostTierTest, TierDropsSaltUnderEnforceIsRefused) {
  EngineOptions o = Tiered(8, WatermarkMode::kEnforce);
  o.faults.add(Fault::kTierDropsSalt);
  Engine engine(&TestModel(), o);
  const auto a = Prompt(40, 7);
  Generate(engine, kAcme, a);
  Generate(engine, kAcme, Prompt(40, 8));
  Generate(engine, kAcme, Prompt(40, 9));
  const Result other = Generate(engine, kGlobex, a);
  EXPECT_EQ(other.status.code(), absl::StatusCode::kDataLoss) << other.status;
  EXPECT_TRUE(other.output.empty());
}

TEST(HostTierTest, ACopyWhoseStampsDoNotNameItsWriterIsNotPromoted) {
  Engine engine(&TestModel(), Tiered(8));
  Generate(engine, kAcme, Prompt(40, 7));
  PageId cached;
  for (uint32_t p = 0; p < 4; ++p) {
    if (!engine.pool().is_free(PageId(p))) cached = PageId(p);
  }
  const auto copy = HostTier::Capture(engine.pool(), cached);
  EXPECT_TRUE(HostTier::Check(engine.pool(), *copy));
  // Another tenant's name in one layer's stamp: the copy is not the page
  // the tier recorded.
  HostTier::Page forged = *copy;
  const size_t page_bytes = engine.pool().layout().page_bytes();
  PageStamp* stamp =
      reinterpret_cast<PageStamp*>(forged.bytes.data() + 2 * page_bytes);
  stamp->writer.tenant = kGlobex;
  EXPECT_FALSE(HostTier::Check(engine.pool(), forged));
  HostTier::Page unshared = *copy;
  unshared.shared = false;
  EXPECT_FALSE(HostTier::Check(engine.pool(), unshared));
}

TEST(HostTierTest, OffByDefaultChangesNothing) {
  EngineOptions off = Tiered(0);
  EXPECT_EQ(EngineOptions().host_tier_pages, 0);
  Engine plain(&TestModel(), off);
  EXPECT_EQ(plain.prefix_cache()->host_tier(), nullptr);
  std::vector<int> cached;
  for (uint32_t seed : {7u, 8u, 9u, 7u}) {
    const Result r = Generate(plain, kAcme, Prompt(40, seed));
    cached.push_back(r.cached_tokens);
  }
  // Without a tier, a's pages were evicted for good and are recomputed.
  EXPECT_EQ(cached, (std::vector<int>{0, 0, 0, 0}));
  EXPECT_EQ(plain.prefix_cache()->spilled_pages(), 0u);
  EXPECT_EQ(plain.prefix_cache()->promoted_pages(), 0u);
}

}  // namespace
}  // namespace kvcanary::engine
