#include "kernels/paged_attention.h"

#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/reference_kernels.h"

namespace kvcanary::kernels {
namespace {

constexpr int kHeads = 8, kKvHeads = 4, kHeadDim = 8, kPageTokens = 4;
constexpr TenantId kAcme{1}, kGlobex{2};
constexpr RequestId kReqA{10}, kReqB{11};

// A layer of pages with a block table that is deliberately not in page order.
class PagedAttentionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    layout_.page_tokens = kPageTokens;
    layout_.kv_heads = kKvHeads;
    layout_.head_dim = kHeadDim;
    buffer_.assign(layout_.page_bytes() * kPages, 0);
    for (int p = 0; p < kPages; ++p) {
      PageStamp* s =
          KvPageLayout::stamp(layout_.page(buffer_.data(), PageId(p)));
      *s = PageStamp();
      s->page = PageId(p);
    }
    for (int i = 0; i < 4; ++i) {
      table_.push_back(PageRef{PageId(kPages - 1 - 2 * i), PageGeneration(3)});
      Own(table_.back(), kAcme, kReqA);
    }
  }
  void Own(PageRef ref, TenantId t, RequestId r) {
    KvPageLayout::stamp(layout_.page(buffer_.data(), ref.page))->owner =
        StampIdentity{r, t, ref.generation};
  }
  // Marks the page's content as its writer tenant's shared prefix.
  void Share(PageRef ref) {
    KvPageLayout::stamp(layout_.page(buffer_.data(), ref.page))
        ->set_shared(true);
  }
  // Writes `tokens` random K/V rows as (tenant, request) into the table's
  // pages; also returns them contiguously for the reference.
  void Fill(int tokens, TenantId t, RequestId r) {
    std::mt19937 rng(42);
    std::uniform_real_distribution<float> dist(-1, 1);
    const int row = kKvHeads * kHeadDim;
    keys_.resize(tokens * row);
    values_.resize(tokens * row);
    for (float& x : keys_) x = dist(rng);
    for (float& x : values_) x = dist(rng);
    for (int pos = 0; pos < tokens; ++pos) {
      const PageRef ref = table_[pos / kPageTokens];
      ASSERT_TRUE(WriteKvRow(buffer_.data(), layout_, ref, pos % kPageTokens,
                             keys_.data() + pos * row,
                             values_.data() + pos * row,
                             StampIdentity{r, t, ref.generation}, 0, nullptr));
    }
  }
  PagedAttentionArgs Args(int first_pos, int num_queries, WatermarkMode mode) {
    q_.resize(num_queries * kHeads * kHeadDim);
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> dist(-1, 1);
    for (float& x : q_) x = dist(rng);
    out_.assign(q_.size(), 1.0f);
    PagedAttentionArgs a;
    a.q = q_.data();
    a.out = out_.data();
    a.first_pos = first_pos;
    a.num_queries = num_queries;
    a.n_heads = kHeads;
    a.n_kv_heads = kKvHeads;
    a.head_dim = kHeadDim;
    a.layer_base = buffer_.data();
    a.layout = layout_;
    a.block_table = table_.data();
    a.num_block_pages = static_cast<int>(table_.size());
    a.mode = mode;
    a.reader_tenant = kAcme;
    a.reader_request = kReqA;
    a.violations = &violations_;
    return a;
  }

  static constexpr int kPages = 12;
  KvPageLayout layout_;
  std::vector<char> buffer_;
  std::vector<PageRef> table_;
  std::vector<float> keys_, values_, q_, out_;
  std::vector<WatermarkViolation> violations_;
};

TEST_F(PagedAttentionTest, DecodeMatchesContiguousReference) {
  Fill(14, kAcme, kReqA);
  auto a = Args(13, 1, WatermarkMode::kEnforce);
  ASSERT_TRUE(PagedAttention(a));
  std::vector<float> ref(kHeads * kHeadDim);
  reference::Attention(q_.data(), keys_.data(), values_.data(), ref.data(), 13,
                       kHeads, kKvHeads, kHeadDim);
  for (size_t i = 0; i < ref.size(); ++i) EXPECT_NEAR(out_[i], ref[i], 1e-5f);
  EXPECT_TRUE(violations_.empty());
}

TEST_F(PagedAttentionTest, PrefillIsCausalPerQuery) {
  Fill(10, kAcme, kReqA);
  auto a = Args(0, 10, WatermarkMode::kEnforce);
  ASSERT_TRUE(PagedAttention(a));
  const int row = kHeads * kHeadDim;
  for (int pos = 0; pos < 10; ++pos) {
    std::vector<float> ref(row);
    reference::Attention(q_.data() + pos * row, keys_.data(), values_.data(),
                         ref.data(), pos, kHeads, kKvHeads, kHeadDim);
    for (int i = 0; i < row; ++i)
      EXPECT_NEAR(out_[pos * row + i], ref[i], 1e-5f);
  }
}

TEST_F(PagedAttentionTest, ForeignTenantReadIsAttributedToTheWriter) {
  Fill(12, kGlobex, RequestId(99));  // another tenant's bytes in acme's pages
  auto a = Args(11, 1, WatermarkMode::kDetect);
  EXPECT_TRUE(PagedAttention(a));     // detect: served
  ASSERT_EQ(violations_.size(), 3u);  // once per page, not per token
  for (const auto& v : violations_) {
    EXPECT_EQ(v.kind, ViolationKind::kForeignTenantRead);
    EXPECT_EQ(v.writer.tenant, kGlobex);
    EXPECT_EQ(v.writer.request, RequestId(99));
    EXPECT_EQ(v.reader.tenant, kAcme);
  }
}

TEST_F(PagedAttentionTest, EnforceRefusesAndZeroesOutput) {
  Fill(12, kGlobex, RequestId(99));
  auto a = Args(11, 1, WatermarkMode::kEnforce);
  EXPECT_FALSE(PagedAttention(a));
  for (float v : out_) EXPECT_EQ(v, 0.0f);
  EXPECT_FALSE(violations_.empty());
}

TEST_F(PagedAttentionTest, OffModeChecksNothing) {
  Fill(12, kGlobex, RequestId(99));
  auto a = Args(11, 1, WatermarkMode::kOff);
  EXPECT_TRUE(PagedAttention(a));
  EXPECT_TRUE(violations_.empty());
}

TEST_F(PagedAttentionTest, StaleRequestOfSameTenantIsItsOwnKind) {
  Fill(4, kAcme, kReqB);
  auto a = Args(3, 1, WatermarkMode::kDetect);
  PagedAttention(a);
  ASSERT_EQ(violations_.size(), 1u);
  EXPECT_EQ(violations_[0].kind, ViolationKind::kStaleRequestRead);
}

TEST_F(PagedAttentionTest, ReadPastFilledIsUnwritten) {
  Fill(6, kAcme, kReqA);                        // page 1 has 2 of 4 slots
  auto a = Args(7, 1, WatermarkMode::kDetect);  // reads slots 0..3 of page 1
  PagedAttention(a);
  ASSERT_EQ(violations_.size(), 1u);
  EXPECT_EQ(violations_[0].kind, ViolationKind::kUnwrittenRead);
  EXPECT_EQ(violations_[0].filled, 2u);
  EXPECT_EQ(violations_[0].page, table_[1].page);
}

TEST_F(PagedAttentionTest, ReadPastFilledIntoPriorWritersBytesIsTheirs) {
  Fill(8, kGlobex, RequestId(99));  // pages 0 and 1 full of globex's bytes
  Fill(6, kAcme, kReqA);            // acme takes page 1 over, 2 of 4 slots
  auto a = Args(7, 1, WatermarkMode::kDetect);  // reads slots 0..3 of page 1
  PagedAttention(a);
  ASSERT_EQ(violations_.size(), 1u);
  EXPECT_EQ(violations_[0].kind, ViolationKind::kForeignTenantRead);
  EXPECT_EQ(violations_[0].writer.tenant, kGlobex);
  EXPECT_EQ(violations_[0].writer.request, RequestId(99));
  EXPECT_EQ(violations_[0].filled, 2u);
}

TEST_F(PagedAttentionTest, SharedPrefixPageIsReadableByItsTenantOnly) {
  Fill(4, kAcme, RequestId(77));  // page 0: computed by acme's request 77
  Share(table_[0]);               // and published as acme's cached prefix
  auto a = Args(3, 1, WatermarkMode::kDetect);
  PagedAttention(a);
  EXPECT_TRUE(violations_.empty());
  a.reader_tenant = kGlobex;
  a.reader_request = RequestId(99);
  PagedAttention(a);
  ASSERT_EQ(violations_.size(), 1u);
  EXPECT_EQ(violations_[0].kind, ViolationKind::kForeignTenantRead);
  EXPECT_EQ(violations_[0].writer.tenant, kAcme);
  // The violation names the request whose prompt the page holds.
  EXPECT_EQ(violations_[0].writer.request, RequestId(77));
  EXPECT_TRUE(violations_[0].writer_shared);
}

TEST_F(PagedAttentionTest, AnotherRequestsPageIsStaleUnlessShared) {
  Fill(4, kAcme, RequestId(77));  // not published: request 77's own
  auto a = Args(3, 1, WatermarkMode::kDetect);
  PagedAttention(a);
  ASSERT_EQ(violations_.size(), 1u);
  EXPECT_EQ(violations_[0].kind, ViolationKind::kStaleRequestRead);
  EXPECT_EQ(violations_[0].writer.request, RequestId(77));
  EXPECT_FALSE(violations_[0].writer_shared);
}

TEST_F(PagedAttentionTest, TheReservedRequestIdIsNotASharedPrefix) {
  // What kvt1-era stamps meant by "shared" is an ordinary writer now.
  Fill(4, kAcme, kReservedRequestId);
  auto a = Args(3, 1, WatermarkMode::kDetect);
  PagedAttention(a);
  ASSERT_EQ(violations_.size(), 1u);
  EXPECT_EQ(violations_[0].kind, ViolationKind::kStaleRequestRead);
}

TEST_F(PagedAttentionTest, SharedPrefixOfAnEarlierAllocationIsStale) {
  Fill(4, kAcme, RequestId(77));
  Share(table_[0]);
  // The page is reallocated to the reader (generation 4) without a rewrite.
  table_[0].generation = PageGeneration(4);
  Own(table_[0], kAcme, kReqA);
  auto a = Args(3, 1, WatermarkMode::kDetect);
  PagedAttention(a);
  ASSERT_EQ(violations_.size(), 1u);
  EXPECT_EQ(violations_[0].kind, ViolationKind::kStaleRequestRead);
  EXPECT_EQ(violations_[0].writer.request, RequestId(77));
  EXPECT_TRUE(violations_[0].writer_shared);
}

TEST_F(PagedAttentionTest, NeverWrittenPageIsUnwritten) {
  auto a = Args(0, 1, WatermarkMode::kDetect);
  PagedAttention(a);
  ASSERT_EQ(violations_.size(), 1u);
  EXPECT_EQ(violations_[0].kind, ViolationKind::kUnwrittenRead);
  EXPECT_EQ(violations_[0].writer.tenant, kNoTenant);
}

TEST_F(PagedAttentionTest, WriteWithOldGenerationIsLate) {
  const PageRef ref = table_[0];
  const PageRef stale{ref.page, PageGeneration(ref.generation.value() - 1)};
  std::vector<float> row(kKvHeads * kHeadDim, 0.5f);
  EXPECT_FALSE(WriteKvRow(
      buffer_.data(), layout_, stale, 0, row.data(), row.data(),
      StampIdentity{kReqB, kGlobex, stale.generation}, 0, &violations_));
  ASSERT_EQ(violations_.size(), 1u);
  EXPECT_EQ(violations_[0].kind, ViolationKind::kLateWrite);
  // The owner reading it sees foreign content.
  auto a = Args(0, 1, WatermarkMode::kDetect);
  violations_.clear();
  PagedAttention(a);
  ASSERT_EQ(violations_.size(), 1u);
  EXPECT_EQ(violations_[0].kind, ViolationKind::kForeignTenantRead);
  EXPECT_EQ(violations_[0].writer.generation, stale.generation);
}

TEST(PageStampTest, EncodeDecodeRoundTrip) {
  PageStamp s;
  s.layer = 3;
  s.page = PageId(77);
  s.owner =
      StampIdentity{RequestId(1ull << 40), TenantId(5), PageGeneration(9)};
  s.writer = StampIdentity{RequestId(12), TenantId(6), PageGeneration(8)};
  s.filled = 13;
  std::string wire;
  s.EncodeTo(&wire);
  ASSERT_EQ(wire.size(), PageStamp::kEncodedSizeBytes);
  auto d = PageStamp::Decode(wire);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->layer, 3);
  EXPECT_EQ(d->page, PageId(77));
  EXPECT_EQ(d->owner, s.owner);
  EXPECT_EQ(d->writer, s.writer);
  EXPECT_EQ(d->filled, 13u);
}

TEST(PageStampTest, TruncatedAndCorruptStampsAreDataLoss) {
  PageStamp s;
  std::string wire;
  s.EncodeTo(&wire);
  for (size_t n = 0; n < wire.size(); ++n) {
    EXPECT_EQ(PageStamp::Decode(wire.substr(0, n)).status().code(),
              absl::StatusCode::kDataLoss);
  }
  std::string bad = wire;
  bad[0] ^= 1;
  EXPECT_EQ(PageStamp::Decode(bad).status().code(),
            absl::StatusCode::kDataLoss);
  bad = wire;
  bad[4] = 9;  // version
  EXPECT_EQ(PageStamp::Decode(bad).status().code(),
            absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace kvcanary::kernels
