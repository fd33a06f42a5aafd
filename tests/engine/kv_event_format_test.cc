// The prefix cache's block events as the engine hands them on (one batch
// per step), and their msgpack encoding, decoded here with msgpack-cxx
// directly (tests/engine/kv_events_client.h) against vLLM's shapes.
#include "engine/kv_events/kv_event_format.h"

#include <cstring>
#include <random>
#include <vector>

#include "engine/core/engine.h"
#include "gtest/gtest.h"
#include "tests/engine/kv_events_client.h"

namespace kvcanary::engine {
namespace {

using testing::DecodeKvEventBatch;
using Type = KvCacheEvent::Type;

constexpr TenantId kAcme{1}, kGlobex{2};
constexpr int kPageTokens = 16;  // EngineOptions' default

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
    EXPECT_FALSE(batch.events.empty()) << "an empty batch";
    batches.push_back(std::move(batch));
  }
  // Every event since the last call, in order.
  std::vector<KvCacheEvent> Take() {
    std::vector<KvCacheEvent> out;
    for (KvEventBatch& b : batches) {
      for (KvCacheEvent& e : b.events) out.push_back(std::move(e));
    }
    batches.clear();
    return out;
  }
  std::vector<KvEventBatch> batches;
};

struct EngineWithSink {
  explicit EngineWithSink(PrefixCacheMode mode, int num_pages = 0,
                          bool weak_keys = false) {
    EngineOptions o;
    o.watermark = WatermarkMode::kDetect;
    o.prefix_cache = mode;
    o.num_pages = num_pages;
    if (weak_keys) o.faults.add(Fault::kPrefixHashCollision);
    o.kv_events = &sink;
    engine = std::make_unique<Engine>(&TestModel(), o);
  }
  void Run(TenantId tenant, const std::vector<int>& prompt) {
    SamplingParams s;
    s.max_tokens = 12;
    auto id = engine->Submit(tenant, prompt, s);
    ASSERT_TRUE(id.ok()) << id.status();
    engine->RunUntilIdle();
    engine->Release(*id);
  }
  std::vector<BlockHash> Keys(TenantId tenant, const std::vector<int>& prompt,
                              int pages) {
    return engine->prefix_cache()->Keys(tenant, prompt, pages);
  }
  RecordingSink sink;
  std::unique_ptr<Engine> engine;
};

std::vector<int> Tokens(const std::vector<int>& prompt, int from_page,
                        int to_page) {
  return std::vector<int>(prompt.begin() + from_page * kPageTokens,
                          prompt.begin() + to_page * kPageTokens);
}

TEST(KvCacheEventsTest, APromptsNewPagesAreOneStoredEventInChainOrder) {
  EngineWithSink e(PrefixCacheMode::kTenant);
  const auto prompt = Prompt(50, 7);  // three full pages, then 2 tokens
  e.Run(kAcme, prompt);
  ASSERT_EQ(e.sink.batches.size(), 1u);
  const auto events = e.sink.Take();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].type, Type::kStored);
  EXPECT_EQ(events[0].block_hashes, e.Keys(kAcme, prompt, 3));
  EXPECT_FALSE(events[0].parent.has_value());
  EXPECT_EQ(events[0].token_ids, Tokens(prompt, 0, 3));

  // Two pages in common, then another third page: stored alone, its parent
  // the second page's key.
  auto other = prompt;
  other[40] += 1;
  e.Run(kAcme, other);
  const auto more = e.sink.Take();
  ASSERT_EQ(more.size(), 1u);
  const auto keys = e.Keys(kAcme, other, 3);
  EXPECT_EQ(more[0].block_hashes, std::vector<BlockHash>{keys[2]});
  ASSERT_TRUE(more[0].parent.has_value());
  EXPECT_EQ(*more[0].parent, keys[1]);
  EXPECT_EQ(more[0].token_ids, Tokens(other, 2, 3));
}

TEST(KvCacheEventsTest, HitsRecordNothing) {
  EngineWithSink e(PrefixCacheMode::kTenant);
  const auto prompt = Prompt(50, 7);
  e.Run(kAcme, prompt);
  e.sink.Take();
  e.Run(kAcme, prompt);
  EXPECT_EQ(e.engine->prefix_cache()->hit_pages(), 3u);
  EXPECT_TRUE(e.sink.batches.empty());
}

TEST(KvCacheEventsTest, EvictionIsARemovedEventBeforeTheStoreItMadeRoomFor) {
  EngineWithSink e(PrefixCacheMode::kTenant, /*num_pages=*/8);
  const auto a = Prompt(50, 1), b = Prompt(50, 2), c = Prompt(50, 3);
  e.Run(kAcme, a);  // 4 pages held, 3 of them cached after
  e.Run(kAcme, b);  // 4 more: 6 cached, 2 free
  e.sink.Take();
  e.Run(kAcme, c);  // needs 4: the two least recently used go
  ASSERT_EQ(e.sink.batches.size(), 1u) << "one step, one batch";
  const auto events = e.sink.Take();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].type, Type::kRemoved);
  const auto a_keys = e.Keys(kAcme, a, 3);
  EXPECT_EQ(events[0].block_hashes,
            (std::vector<BlockHash>{a_keys[0], a_keys[1]}));
  EXPECT_EQ(events[1].type, Type::kStored);
  EXPECT_EQ(events[1].block_hashes, e.Keys(kAcme, c, 3));
}

TEST(KvCacheEventsTest, GlobalModeStoresAPrefixOnceForEveryTenant) {
  EngineWithSink e(PrefixCacheMode::kGlobal);
  const auto prompt = Prompt(50, 7);
  e.Run(kAcme, prompt);
  const auto acme = e.sink.Take();
  e.Run(kGlobex, prompt);
  ASSERT_EQ(acme.size(), 1u);
  EXPECT_EQ(acme[0].block_hashes, e.Keys(kGlobex, prompt, 3));
  EXPECT_TRUE(e.sink.batches.empty()) << "globex hit acme's pages";
}

TEST(KvCacheEventsTest, TenantModeStoresTheSamePrefixUnderEachTenantsKeys) {
  EngineWithSink e(PrefixCacheMode::kTenant);
  const auto prompt = Prompt(50, 7);
  e.Run(kAcme, prompt);
  e.Run(kGlobex, prompt);
  const auto events = e.sink.Take();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].token_ids, events[1].token_ids);
  for (const BlockHash& h : events[1].block_hashes) {
    for (const BlockHash& g : events[0].block_hashes) EXPECT_NE(h, g);
  }
}

TEST(KvCacheEventsTest, TheWeakKeyFaultPublishesItsHashWidened) {
  EngineWithSink e(PrefixCacheMode::kTenant, 0, /*weak_keys=*/true);
  const auto prompt = Prompt(50, 7);
  e.Run(kAcme, prompt);
  const auto events = e.sink.Take();
  ASSERT_EQ(events.size(), 1u);
  const BlockHash& first = events[0].block_hashes.at(0);
  const uint32_t h = PrefixCache::WeakHash(0, prompt.data(), kPageTokens);
  uint32_t published;
  std::memcpy(&published, first.data(), 4);
  EXPECT_EQ(published, h);
  for (size_t i = 4; i < first.size(); ++i) EXPECT_EQ(first[i], 0);
}

BlockHash HashOf(uint8_t b) {
  BlockHash h;
  h.fill(b);
  return h;
}

TEST(KvEventFormatTest, ABatchIsVllmsArrayOfTaggedMaps) {
  KvEventBatch batch;
  batch.time = absl::FromUnixMillis(1700000000123);
  KvCacheEvent first{Type::kStored, {HashOf(1), HashOf(2)}, {}, {}};
  for (int i = 0; i < 2 * kPageTokens; ++i) first.token_ids.push_back(i + 3);
  KvCacheEvent next{Type::kStored, {HashOf(3)}, HashOf(2), {}};
  next.token_ids.assign(kPageTokens, 70000);  // past a 16-bit int
  KvCacheEvent removed{Type::kRemoved, {HashOf(1)}, {}, {}};
  KvCacheEvent cleared{Type::kAllCleared, {}, {}, {}};
  batch.events = {first, next, removed, cleared};

  const auto decoded =
      DecodeKvEventBatch(EncodeKvEventBatch(batch, kPageTokens));
  ASSERT_TRUE(decoded.has_value());
  EXPECT_DOUBLE_EQ(decoded->ts, 1700000000.123);
  EXPECT_EQ(decoded->data_parallel_rank, 0);
  ASSERT_EQ(decoded->events.size(), 4u);
  const auto& s = decoded->events[0];
  EXPECT_EQ(s.keys,
            (std::vector<std::string>{
                "type", "block_hashes", "parent_block_hash", "token_ids",
                "block_size", "lora_id", "medium", "lora_name"}));
  EXPECT_EQ(s.type, "BlockStored");
  EXPECT_EQ(s.block_hashes, (std::vector<std::string>{std::string(32, '\1'),
                                                      std::string(32, '\2')}));
  EXPECT_TRUE(s.has_parent_field);
  EXPECT_FALSE(s.parent.has_value());
  EXPECT_EQ(s.token_ids.size(), 32u);
  EXPECT_EQ(s.token_ids[0], 3);
  EXPECT_EQ(s.block_size, kPageTokens);
  EXPECT_TRUE(s.lora_id_nil);
  EXPECT_TRUE(s.lora_name_nil);
  EXPECT_EQ(s.medium, "GPU");
  EXPECT_EQ(decoded->events[1].parent, std::string(32, '\2'));
  EXPECT_EQ(decoded->events[1].token_ids[0], 70000);
  const auto& r = decoded->events[2];
  EXPECT_EQ(r.keys,
            (std::vector<std::string>{"type", "block_hashes", "medium"}));
  EXPECT_EQ(r.type, "BlockRemoved");
  EXPECT_EQ(r.block_hashes, std::vector<std::string>{std::string(32, '\1')});
  EXPECT_EQ(r.medium, "GPU");
  EXPECT_EQ(decoded->events[3].keys, std::vector<std::string>{"type"});
  EXPECT_EQ(decoded->events[3].type, "AllBlocksCleared");
}

TEST(KvEventFormatTest, SeqFramesAreEightBytesBigEndian) {
  EXPECT_EQ(EncodeSeq(0), std::string(8, '\0'));
  EXPECT_EQ(EncodeSeq(258), std::string("\0\0\0\0\0\0\1\2", 8));
  EXPECT_EQ(EncodeSeq(-1), std::string(8, '\xff'));  // the replay's end
  for (int64_t seq : {int64_t{0}, int64_t{1}, int64_t{1} << 40, int64_t{-1}}) {
    EXPECT_EQ(*DecodeSeq(EncodeSeq(seq)), seq);
  }
  EXPECT_EQ(DecodeSeq(std::string(7, '\0')).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DecodeSeq(std::string(9, '\0')).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvcanary::engine
