// The prefix cache on the single-node engine: tenant-salted (the default),
// global (one key space for all tenants) and off; and the
// prefix-hash-collision fault that weakens its key.
#include <random>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "engine/core/engine.h"
#include "gtest/gtest.h"

namespace kvcanary::engine {
namespace {

constexpr TenantId kAcme{1}, kGlobex{2};

const Model& TestModel() {
  static const Model* model = new Model(DefaultModel());
  return *model;
}

SamplingParams Greedy(int max_tokens) {
  SamplingParams s;
  s.max_tokens = max_tokens;
  return s;
}

// A prompt of `n` tokens: BOS, then a fixed pseudo-random run.
std::vector<int> Prompt(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int> p = {1};
  while (static_cast<int>(p.size()) < n) p.push_back(3 + rng() % 400);
  return p;
}

struct Result {
  RequestId id;
  std::vector<int> output;
  std::vector<WatermarkViolation> violations;
  absl::Status status;
};

Result Generate(Engine& engine, TenantId tenant,
                const std::vector<int>& prompt) {
  auto id = engine.Submit(tenant, prompt, Greedy(12));
  EXPECT_TRUE(id.ok()) << id.status();
  engine.RunUntilIdle();
  const Sequence& seq = *engine.Get(*id);
  Result r{*id, seq.output, seq.violations, seq.state.abort_status()};
  engine.Release(*id);
  return r;
}

// What a fresh engine with no cache answers.
std::vector<int> Clean(const std::vector<int>& prompt) {
  EngineOptions o;
  o.prefix_cache = PrefixCacheMode::kOff;
  Engine engine(&TestModel(), o);
  return Generate(engine, kAcme, prompt).output;
}

EngineOptions WithCache(WatermarkMode mode, bool fault = false,
                        PrefixCacheMode cache = PrefixCacheMode::kTenant) {
  EngineOptions o;
  o.watermark = mode;
  o.prefix_cache = cache;
  if (fault) o.faults.add(Fault::kPrefixHashCollision);
  return o;
}

EngineOptions Global(WatermarkMode mode) {
  return WithCache(mode, false, PrefixCacheMode::kGlobal);
}

// The prompt tokens a request was served from the cache at admission.
int CachedTokens(Engine& engine, TenantId tenant,
                 const std::vector<int>& prompt) {
  auto id = engine.Submit(tenant, prompt, Greedy(4));
  EXPECT_TRUE(id.ok()) << id.status();
  engine.RunUntilIdle();
  const int cached = engine.Get(*id)->cached_tokens;
  engine.Release(*id);
  return cached;
}

TEST(PrefixCacheTest, SameTenantSamePrefixIsServedFromTheCacheExactly) {
  Engine engine(&TestModel(), WithCache(WatermarkMode::kEnforce));
  const auto prompt = Prompt(40, 7);  // two full pages, then 8 tokens
  Result first = Generate(engine, kAcme, prompt);
  EXPECT_EQ(engine.prefix_cache()->hit_pages(), 0u);
  EXPECT_EQ(engine.prefix_cache()->size(), 2);
  auto longer = prompt;
  longer.push_back(42);
  Result second = Generate(engine, kAcme, longer);
  EXPECT_EQ(engine.prefix_cache()->hit_pages(), 2u);
  EXPECT_TRUE(first.violations.empty());
  EXPECT_TRUE(second.violations.empty());
  // Bitwise the same as computing everything.
  EXPECT_EQ(first.output, Clean(prompt));
  EXPECT_EQ(second.output, Clean(longer));
}

TEST(PrefixCacheTest, CachedPagesKeepTheirRealWriterAndAreFlaggedShared) {
  Engine engine(&TestModel(), WithCache(WatermarkMode::kEnforce));
  Result first = Generate(engine, kAcme, Prompt(40, 7));
  ASSERT_EQ(engine.prefix_cache()->size(), 2);
  int cached = 0;
  for (int p = 0; p < engine.pool().num_pages(); ++p) {
    const PageId page(static_cast<uint32_t>(p));
    if (engine.pool().is_free(page)) continue;  // only the cache holds pages
    for (int l = 0; l < engine.pool().n_layers(); ++l) {
      const PageStamp& s = engine.pool().stamp(l, page);
      EXPECT_TRUE(s.shared());
      EXPECT_EQ(s.writer.tenant, kAcme);
      EXPECT_EQ(s.writer.request, first.id);  // not a reserved marker
    }
    ++cached;
  }
  EXPECT_EQ(cached, 2);
}

TEST(PrefixCacheTest, AnotherTenantWithTheSamePrefixMisses) {
  Engine engine(&TestModel(), WithCache(WatermarkMode::kDetect));
  const auto prompt = Prompt(40, 7);
  Generate(engine, kAcme, prompt);
  Result globex = Generate(engine, kGlobex, prompt);
  EXPECT_EQ(engine.prefix_cache()->hit_pages(), 0u);  // salted apart
  EXPECT_TRUE(globex.violations.empty());
  EXPECT_EQ(globex.output, Clean(prompt));
}

TEST(PrefixCacheTest, UnusedCachedPagesAreEvictedWhenThePoolRunsShort) {
  EngineOptions o = WithCache(WatermarkMode::kEnforce);
  o.num_pages = 8;
  Engine engine(&TestModel(), o);
  for (uint32_t seed = 0; seed < 6; ++seed) {
    Result r = Generate(engine, kAcme, Prompt(70, seed));  // 4 full pages each
    EXPECT_TRUE(r.status.ok()) << r.status;
    EXPECT_TRUE(r.violations.empty());
  }
  EXPECT_GT(engine.prefix_cache()->evicted_pages(), 0u);
  EXPECT_LE(engine.pool().num_used_pages(), 8);
}

TEST(PrefixCollisionFaultTest, AnotherTenantsPrefixIsServedAndCaught) {
  Engine engine(&TestModel(), WithCache(WatermarkMode::kDetect, true));
  const auto prompt = Prompt(40, 7);
  Result acme = Generate(engine, kAcme, prompt);
  Result globex = Generate(engine, kGlobex, prompt);
  EXPECT_EQ(engine.prefix_cache()->hit_pages(), 2u);
  ASSERT_FALSE(globex.violations.empty());
  for (const WatermarkViolation& v : globex.violations) {
    EXPECT_EQ(v.kind, ViolationKind::kForeignTenantRead);
    EXPECT_EQ(v.reader.tenant, kGlobex);
    EXPECT_EQ(v.writer.tenant, kAcme);     // whose prompt's K/V was read
    EXPECT_EQ(v.writer.request, acme.id);  // and which request's
    EXPECT_TRUE(v.writer_shared);
  }
}

TEST(PrefixCollisionFaultTest, EnforceRefusesTheRequest) {
  Engine engine(&TestModel(), WithCache(WatermarkMode::kEnforce, true));
  const auto prompt = Prompt(40, 7);
  Generate(engine, kAcme, prompt);
  Result globex = Generate(engine, kGlobex, prompt);
  EXPECT_EQ(globex.status.code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(globex.output.empty());
}

// Two different first pages with the same 32-bit weak key, found by a
// birthday search: with the fault, the second prompt is answered from the
// first prompt's K/V — another tenant's text, not a copy of its own.
TEST(PrefixCollisionFaultTest, ACraftedCollisionServesADifferentPrompt) {
  const int pt = EngineOptions().page_tokens;
  absl::flat_hash_map<uint32_t, std::vector<int>> seen;
  std::vector<int> a, b;
  std::mt19937 rng(1);
  while (a.empty()) {
    std::vector<int> page = {1};
    while (static_cast<int>(page.size()) < pt) page.push_back(3 + rng() % 500);
    const uint32_t h = PrefixCache::WeakHash(0, page.data(), pt);
    auto [it, inserted] = seen.emplace(h, page);
    if (!inserted && it->second != page) {
      a = it->second;
      b = page;
    }
  }
  const std::vector<int> tail = {300, 301, 302, 303};
  std::vector<int> acme = a, globex = b;
  acme.insert(acme.end(), tail.begin(), tail.end());
  globex.insert(globex.end(), tail.begin(), tail.end());
  ASSERT_NE(Clean(acme), Clean(globex)) << "pick another tail";

  // With the fault, globex's prompt hits acme's page and is answered as if
  // it were acme's (watermarks off: nothing stops it).
  {
    Engine engine(&TestModel(), WithCache(WatermarkMode::kOff, true));
    Generate(engine, kAcme, acme);
    Result r = Generate(engine, kGlobex, globex);
    EXPECT_EQ(engine.prefix_cache()->hit_pages(), 1u);
    EXPECT_EQ(r.output, Clean(acme));
    EXPECT_NE(r.output, Clean(globex));
  }
  // Detect names it.
  {
    Engine engine(&TestModel(), WithCache(WatermarkMode::kDetect, true));
    Generate(engine, kAcme, acme);
    Result r = Generate(engine, kGlobex, globex);
    ASSERT_FALSE(r.violations.empty());
    EXPECT_EQ(r.violations[0].kind, ViolationKind::kForeignTenantRead);
    EXPECT_EQ(r.violations[0].writer.tenant, kAcme);
  }
  // Without the fault the keys are salted SHA-256: no hit, the right answer.
  {
    Engine engine(&TestModel(), WithCache(WatermarkMode::kEnforce));
    Generate(engine, kAcme, acme);
    Result r = Generate(engine, kGlobex, globex);
    EXPECT_EQ(engine.prefix_cache()->hit_pages(), 0u);
    EXPECT_EQ(r.output, Clean(globex));
  }
}

TEST(PrefixCacheModeTest, ParsesTheModesAndTheOldBooleanSpellings) {
  EXPECT_EQ(*ParsePrefixCacheMode("tenant"), PrefixCacheMode::kTenant);
  EXPECT_EQ(*ParsePrefixCacheMode("global"), PrefixCacheMode::kGlobal);
  EXPECT_EQ(*ParsePrefixCacheMode("off"), PrefixCacheMode::kOff);
  EXPECT_EQ(*ParsePrefixCacheMode("true"), PrefixCacheMode::kTenant);
  EXPECT_EQ(*ParsePrefixCacheMode("false"), PrefixCacheMode::kOff);
  EXPECT_EQ(ParsePrefixCacheMode("shared").status().code(),
            absl::StatusCode::kInvalidArgument);
  for (PrefixCacheMode m : {PrefixCacheMode::kOff, PrefixCacheMode::kTenant,
                            PrefixCacheMode::kGlobal}) {
    EXPECT_EQ(*ParsePrefixCacheMode(PrefixCacheModeName(m)), m);
  }
}

TEST(PrefixCacheModeTest, TenantKeysAreSaltedByTenantGlobalKeysAreNot) {
  PagePool pool(PoolOptionsFor(TestModel().config, EngineOptions()));
  const auto prompt = Prompt(40, 7);
  PrefixCache tenant(&pool, PrefixCacheMode::kTenant, false, nullptr);
  EXPECT_NE(tenant.Keys(kAcme, prompt, 2), tenant.Keys(kGlobex, prompt, 2));
  EXPECT_EQ(tenant.Keys(kAcme, prompt, 2), tenant.Keys(kAcme, prompt, 2));
  PrefixCache global(&pool, PrefixCacheMode::kGlobal, false, nullptr);
  EXPECT_EQ(global.Keys(kAcme, prompt, 2), global.Keys(kGlobex, prompt, 2));
  // Still a chain over the tokens: another prefix, another key.
  EXPECT_NE(global.Keys(kAcme, prompt, 1),
            global.Keys(kAcme, Prompt(40, 8), 1));
  // And still secret-salted: another cache (node) has other keys.
  PrefixCache other(&pool, PrefixCacheMode::kGlobal, false, nullptr);
  EXPECT_NE(global.Keys(kAcme, prompt, 1), other.Keys(kAcme, prompt, 1));
}

TEST(PrefixCacheModeTest, OffMakesNoCache) {
  EngineOptions o;
  o.prefix_cache = PrefixCacheMode::kOff;
  Engine engine(&TestModel(), o);
  EXPECT_EQ(engine.prefix_cache(), nullptr);
  const auto prompt = Prompt(40, 7);
  EXPECT_EQ(CachedTokens(engine, kAcme, prompt), 0);
  EXPECT_EQ(CachedTokens(engine, kAcme, prompt), 0);
}

TEST(PrefixCacheModeTest, CachedTokensCountTheFullPagesHitAtAdmission) {
  Engine engine(&TestModel(), WithCache(WatermarkMode::kEnforce));
  const auto prompt = Prompt(40, 7);  // two full pages, then 8 tokens
  EXPECT_EQ(CachedTokens(engine, kAcme, prompt), 0);  // it published them
  EXPECT_EQ(CachedTokens(engine, kAcme, prompt), 32);
  EXPECT_EQ(CachedTokens(engine, kGlobex, prompt), 0);  // salted apart
}

TEST(PrefixCacheModeTest, GlobalServesAnotherTenantsPagesAndDetectFlagsIt) {
  Engine engine(&TestModel(), Global(WatermarkMode::kDetect));
  const auto prompt = Prompt(40, 7);
  Result acme = Generate(engine, kAcme, prompt);
  Result globex = Generate(engine, kGlobex, prompt);
  EXPECT_EQ(engine.prefix_cache()->hit_pages(), 2u);
  EXPECT_TRUE(globex.status.ok()) << globex.status;  // served
  EXPECT_EQ(globex.output, Clean(prompt));  // identical prompt, same K/V
  ASSERT_FALSE(globex.violations.empty());  // and flagged
  for (const WatermarkViolation& v : globex.violations) {
    EXPECT_EQ(v.kind, ViolationKind::kForeignTenantRead);
    EXPECT_EQ(v.reader.tenant, kGlobex);
    EXPECT_EQ(v.writer.tenant, kAcme);
    EXPECT_EQ(v.writer.request, acme.id);
    EXPECT_TRUE(v.writer_shared);
  }
}

TEST(PrefixCacheModeTest, GlobalHitOfAnotherTenantIsRefusedInEnforce) {
  Engine engine(&TestModel(), Global(WatermarkMode::kEnforce));
  const auto prompt = Prompt(40, 7);
  Generate(engine, kAcme, prompt);
  Result globex = Generate(engine, kGlobex, prompt);
  EXPECT_EQ(globex.status.code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(globex.output.empty());
  // The tenant's own repeat is a legitimate hit in any mode.
  Result again = Generate(engine, kAcme, prompt);
  EXPECT_TRUE(again.status.ok()) << again.status;
  EXPECT_TRUE(again.violations.empty());
}

TEST(PrefixCacheModeTest, GlobalWithWatermarksOffServesSilently) {
  Engine engine(&TestModel(), Global(WatermarkMode::kOff));
  const auto prompt = Prompt(40, 7);
  Generate(engine, kAcme, prompt);
  EXPECT_EQ(CachedTokens(engine, kGlobex, prompt), 32);
  Result globex = Generate(engine, kGlobex, prompt);
  EXPECT_TRUE(globex.violations.empty());
  EXPECT_EQ(globex.output, Clean(prompt));
}

}  // namespace
}  // namespace kvcanary::engine
