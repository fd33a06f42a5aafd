// The decoder held to real engines' bytes: payloads vLLM and SGLang wrote
// (or that follow their structs field by field), in both event shapes,
// from tests/auditor/testdata/kv_events/ (README.md there names each one's
// source and what it must decode to).
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "auditor/kv_events/wire.h"
#include "gtest/gtest.h"

namespace kvcanary::auditor::kv_events {
namespace {

std::string Fixture(const std::string& name) {
  std::ifstream in(absl::StrCat(KVCANARY_SOURCE_DIR,
                                "/tests/auditor/testdata/kv_events/", name));
  EXPECT_TRUE(in.good()) << name;
  std::string line, hex;
  while (std::getline(in, line)) {
    if (!line.empty() && line[0] == '#') continue;
    for (char c : line) {
      if (!isspace(static_cast<unsigned char>(c))) hex.push_back(c);
    }
  }
  return absl::HexStringToBytes(hex);
}

Batch Decode(const std::string& name) {
  absl::StatusOr<Batch> b = DecodeBatch(Fixture(name));
  EXPECT_TRUE(b.ok()) << name << ": " << b.status();
  return b.ok() ? *b : Batch{};
}

BlockHash U64(uint64_t v) { return BlockHash::FromInt(v); }

TEST(KvEventsFixturesTest, VllmCapturePositional) {
  const Batch b = Decode("vllm_capture_positional.hex");
  EXPECT_DOUBLE_EQ(b.ts, 1767666073.8055613);
  EXPECT_EQ(b.data_parallel_rank, 0);
  EXPECT_TRUE(b.array_events);
  ASSERT_EQ(b.events.size(), 1u);
  const Event& e = b.events[0];
  EXPECT_EQ(e.type, EventType::kBlockStored);
  EXPECT_EQ(e.block_hashes, std::vector<BlockHash>{U64(0xf35fe17b0d81a24cULL)});
  EXPECT_EQ(e.parent, U64(0xda329fe1bf8aac01ULL));
  EXPECT_EQ(e.token_ids, (std::vector<int64_t>{4217, 315, 678, 882, 151645, 198,
                                               151644, 77091, 198, 151667, 198,
                                               32313, 11, 773, 358, 1184}));
  EXPECT_EQ(e.block_size, 16);
  EXPECT_FALSE(e.lora_id.has_value());
  EXPECT_EQ(e.medium, "GPU");
}

TEST(KvEventsFixturesTest, SglangCaptureMap) {
  const Batch b = Decode("sglang_capture_map.hex");
  EXPECT_TRUE(b.map_events);
  EXPECT_EQ(b.data_parallel_rank, 0);
  ASSERT_EQ(b.events.size(), 1u);
  const Event& e = b.events[0];
  EXPECT_EQ(e.block_hashes,
            (std::vector<BlockHash>{U64(16196034758909408104ULL),
                                    U64(9213906022183458822ULL)}));
  EXPECT_FALSE(e.parent.has_value());
  EXPECT_EQ(e.block_size, 64);
  ASSERT_EQ(e.token_ids.size(), 128u);
  EXPECT_EQ(e.token_ids[0], 840);
  EXPECT_EQ(e.token_ids[3], 264);
  EXPECT_EQ(e.token_ids[127], 13);
}

TEST(KvEventsFixturesTest, Vllm026MapWithTheNewerFields) {
  const Batch b = Decode("vllm_v026_map_reconstructed.hex");
  ASSERT_EQ(b.events.size(), 1u);
  EXPECT_TRUE(b.map_events);
  EXPECT_EQ(b.events[0].block_hashes,
            std::vector<BlockHash>{U64(0xdab89baa7b5857c0ULL)});
  EXPECT_EQ(b.events[0].token_ids.size(), 16u);
  EXPECT_EQ(b.events[0].block_size, 16);
}

TEST(KvEventsFixturesTest, VllmPositionalWithMediumAllThreeKinds) {
  const Batch b = Decode("vllm_positional_medium.hex");
  ASSERT_EQ(b.events.size(), 3u);
  EXPECT_EQ(b.events[0].block_hashes,
            (std::vector<BlockHash>{U64(9223372036854775809ULL),
                                    U64(81985529216486895ULL)}));
  EXPECT_EQ(b.events[0].parent, U64(3735928559ULL));
  EXPECT_EQ(b.events[0].token_ids.size(), 32u);
  EXPECT_EQ(b.events[0].token_ids[31], 131);
  EXPECT_EQ(b.events[1].type, EventType::kBlockRemoved);
  EXPECT_EQ(b.events[1].medium, "GPU");
  EXPECT_EQ(b.events[2].type, EventType::kAllBlocksCleared);
}

TEST(KvEventsFixturesTest, VllmOldestShapeWithoutMediumOrRank) {
  const Batch b = Decode("vllm_positional_oldest.hex");
  EXPECT_FALSE(b.data_parallel_rank.has_value());
  ASSERT_EQ(b.events.size(), 3u);
  EXPECT_EQ(b.events[0].block_hashes,
            (std::vector<BlockHash>{U64(17212176183586094827ULL), U64(42)}));
  EXPECT_EQ(b.events[0].medium, "");
  EXPECT_EQ(b.events[1].block_hashes[0], U64(17212176183586094827ULL));
}

TEST(KvEventsFixturesTest, VllmLastPositionalShapeWithTwelveElements) {
  const Batch b = Decode("vllm_positional_late.hex");
  ASSERT_EQ(b.events.size(), 3u);
  EXPECT_EQ(b.events[0].block_hashes[0], U64(18364758544493064720ULL));
  EXPECT_EQ(b.events[0].lora_id, 3);
  EXPECT_EQ(b.events[0].token_ids.size(), 32u);
}

TEST(KvEventsFixturesTest, VllmMapWithBytesHashesChained) {
  const Batch b = Decode("vllm_map_bytes_hashes.hex");
  EXPECT_EQ(b.data_parallel_rank, 1);
  ASSERT_EQ(b.events.size(), 4u);
  const std::string b0 = absl::HexStringToBytes(
      "00bf4bbcf7554396a2d192ff0585997e4fc99bc2246aa1ce9a64d7e5377599e3");
  EXPECT_EQ(b.events[0].block_hashes[0], BlockHash::FromBytes(b0));
  EXPECT_EQ(b.events[1].parent, BlockHash::FromBytes(b0));
  EXPECT_EQ(b.events[1].block_hashes.size(), 2u);
  EXPECT_EQ(b.events[2].type, EventType::kBlockRemoved);
  EXPECT_EQ(b.events[3].type, EventType::kAllBlocksCleared);
}

TEST(KvEventsFixturesTest, SglangPositionalWithATrailingSaltElement) {
  const Batch b = Decode("sglang_positional_salted.hex");
  ASSERT_EQ(b.events.size(), 4u);
  EXPECT_EQ(b.events[0].block_hashes[0], U64(0xb000000000000000ULL));
  EXPECT_EQ(b.events[1].block_hashes[0], U64(static_cast<uint64_t>(-3)));
  EXPECT_EQ(b.events[0].block_size, 1);
  EXPECT_EQ(b.events[2].medium, "CPU_PINNED");
}

}  // namespace
}  // namespace kvcanary::auditor::kv_events
