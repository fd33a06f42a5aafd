#include "engine/core/page_pool.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/paged_attention.h"

namespace kvcanary::engine {
namespace {

constexpr TenantId kAcme{1}, kGlobex{2};

PagePoolOptions SmallPool(int pages = 4) {
  PagePoolOptions o;
  o.num_pages = pages;
  o.n_layers = 2;
  o.layout.page_tokens = 4;
  o.layout.kv_heads = 2;
  o.layout.head_dim = 4;
  return o;
}

// Writes `tokens` K/V rows of (tenant, request) into its pages, layer 0.
void WriteTokens(PagePool& pool, const std::vector<PageRef>& pages,
                 TenantId tenant, RequestId request, int tokens) {
  std::vector<float> row(8, 0.25f);
  for (int pos = 0; pos < tokens; ++pos) {
    const PageRef ref = pages[pos / pool.page_tokens()];
    kernels::WriteKvRow(pool.layer_base(0), pool.layout(), ref,
                        pos % pool.page_tokens(), row.data(), row.data(),
                        StampIdentity{request, tenant, ref.generation}, 0,
                        nullptr);
  }
}

// Runs decode attention at position `pos` for (tenant, request) over
// `pages` in `mode`; returns the violations.
std::vector<WatermarkViolation> Read(PagePool& pool,
                                     const std::vector<PageRef>& pages,
                                     TenantId tenant, RequestId request,
                                     int pos, WatermarkMode mode,
                                     bool* served = nullptr) {
  std::vector<float> q(16, 0.5f), out(16);
  std::vector<WatermarkViolation> violations;
  kernels::PagedAttentionArgs a;
  a.q = q.data();
  a.out = out.data();
  a.first_pos = pos;
  a.num_queries = 1;
  a.n_heads = 4;
  a.n_kv_heads = 2;
  a.head_dim = 4;
  a.layer_base = pool.layer_base(0);
  a.layout = pool.layout();
  a.block_table = pages.data();
  a.num_block_pages = static_cast<int>(pages.size());
  a.mode = mode;
  a.reader_tenant = tenant;
  a.reader_request = request;
  a.violations = &violations;
  const bool ok = kernels::PagedAttention(a);
  if (served != nullptr) *served = ok;
  return violations;
}

TEST(PagePoolTest, AllocationStampsOwnerInEveryLayer) {
  PagePool pool(SmallPool());
  auto pages = pool.Allocate(kAcme, RequestId(7), 2);
  ASSERT_EQ(pages.size(), 2u);
  EXPECT_EQ(pool.num_free_pages(), 2);
  for (int l = 0; l < 2; ++l) {
    for (const PageRef& ref : pages) {
      const PageStamp& s = pool.stamp(l, ref.page);
      EXPECT_EQ(s.owner.tenant, kAcme);
      EXPECT_EQ(s.owner.request, RequestId(7));
      EXPECT_EQ(s.owner.generation, ref.generation);
      EXPECT_EQ(s.layer, l);
      EXPECT_EQ(s.page, ref.page);
    }
  }
}

TEST(PagePoolTest, ReallocationBumpsGeneration) {
  PagePool pool(SmallPool(1));
  auto first = pool.Allocate(kAcme, RequestId(1), 1);
  pool.Free(first);
  auto second = pool.Allocate(kGlobex, RequestId(2), 1);
  ASSERT_EQ(first[0].page, second[0].page);  // the same page, reused
  EXPECT_EQ(second[0].generation.value(), first[0].generation.value() + 1);
  EXPECT_EQ(pool.generation(second[0].page), second[0].generation);
}

TEST(PagePoolTest, CanAllocateIsExact) {
  PagePool pool(SmallPool(3));
  EXPECT_TRUE(pool.CanAllocate(3));
  EXPECT_FALSE(pool.CanAllocate(4));
  auto pages = pool.Allocate(kAcme, RequestId(1), 2);
  EXPECT_FALSE(pool.CanAllocate(2));
  EXPECT_TRUE(pool.CanAllocate(1));
  pool.Free(pages);
  EXPECT_TRUE(pool.CanAllocate(3));
}

TEST(PagePoolTest, LegitimateReadHasNoViolation) {
  PagePool pool(SmallPool());
  auto pages = pool.Allocate(kAcme, RequestId(1), 2);
  WriteTokens(pool, pages, kAcme, RequestId(1), 6);
  EXPECT_TRUE(Read(pool, pages, kAcme, RequestId(1), 5, WatermarkMode::kEnforce)
                  .empty());
}

TEST(PagePoolTest, StaleReadAfterReallocationIsDetected) {
  PagePool pool(SmallPool(1));
  auto old_pages = pool.Allocate(kAcme, RequestId(1), 1);
  WriteTokens(pool, old_pages, kAcme, RequestId(1), 4);
  pool.Free(old_pages);
  auto new_pages = pool.Allocate(kAcme, RequestId(2), 1);
  WriteTokens(pool, new_pages, kAcme, RequestId(2), 4);
  // Request 1 kept its stale block table and reads the page again.
  auto v =
      Read(pool, old_pages, kAcme, RequestId(1), 3, WatermarkMode::kDetect);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].kind, ViolationKind::kStaleRequestRead);
  EXPECT_EQ(v[0].writer.request, RequestId(2));
  EXPECT_EQ(v[0].owner.generation, new_pages[0].generation);
  EXPECT_EQ(v[0].reader.generation, old_pages[0].generation);
}

TEST(PagePoolTest, UnwrittenSlotReadIsDetected) {
  PagePool pool(SmallPool());
  auto pages = pool.Allocate(kAcme, RequestId(1), 2);
  WriteTokens(pool, pages, kAcme, RequestId(1), 5);  // page 1 holds 1 token
  auto v = Read(pool, pages, kAcme, RequestId(1), 6, WatermarkMode::kDetect);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].kind, ViolationKind::kUnwrittenRead);
  EXPECT_EQ(v[0].page, pages[1].page);
  EXPECT_EQ(v[0].slots_read, 3u);
  EXPECT_EQ(v[0].filled, 1u);
}

TEST(PagePoolTest, ForeignTenantReadIsAttributedToTheWriterTenant) {
  PagePool pool(SmallPool(2));
  auto globex = pool.Allocate(kGlobex, RequestId(5), 2);
  WriteTokens(pool, globex, kGlobex, RequestId(5), 8);
  pool.Free(globex);
  // Acme gets the same pages and, before writing, reads them (the
  // incident's decode attending over reserved pages).
  auto acme = pool.Allocate(kAcme, RequestId(6), 2);
  WriteTokens(pool, acme, kAcme, RequestId(6), 1);  // wrote only slot 0
  bool served = true;
  auto v = Read(pool, acme, kAcme, RequestId(6), 7, WatermarkMode::kEnforce,
                &served);
  EXPECT_FALSE(served);
  ASSERT_EQ(v.size(), 2u);
  // Page 0: acme's own token 0, but slots 1..3 were never written by acme:
  // they still hold globex's bytes, and the stamp's prior writer says so.
  EXPECT_EQ(v[0].kind, ViolationKind::kForeignTenantRead);
  EXPECT_EQ(v[0].writer.tenant, kGlobex);
  EXPECT_EQ(v[0].filled, 1u);
  // Page 1: still globex's bytes.
  EXPECT_EQ(v[1].kind, ViolationKind::kForeignTenantRead);
  EXPECT_EQ(v[1].writer.tenant, kGlobex);
  EXPECT_EQ(v[1].writer.request, RequestId(5));
  EXPECT_EQ(v[1].reader.tenant, kAcme);
  EXPECT_EQ(v[1].owner.tenant, kAcme);
}

TEST(PagePoolTest, ScrubZeroClearsBytesAndStamp) {
  PagePoolOptions o = SmallPool(1);
  o.scrub = ScrubPolicy::kZero;
  PagePool pool(o);
  auto pages = pool.Allocate(kGlobex, RequestId(5), 1);
  WriteTokens(pool, pages, kGlobex, RequestId(5), 4);
  pool.Free(pages);
  auto again = pool.Allocate(kAcme, RequestId(6), 1);
  for (int l = 0; l < 2; ++l) {
    const char* page = pool.layout().page(pool.layer_base(l), again[0].page);
    const float* k = KvPageLayout::keys(page);
    for (size_t i = 0; i < 2 * pool.layout().kv_floats(); ++i)
      ASSERT_EQ(k[i], 0.0f);
    EXPECT_EQ(pool.stamp(l, again[0].page).writer.tenant, kNoTenant);
  }
  // A read before writing is now "unwritten", not globex's data.
  auto v = Read(pool, again, kAcme, RequestId(6), 3, WatermarkMode::kDetect);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].kind, ViolationKind::kUnwrittenRead);
}

TEST(PagePoolTest, ScrubPoisonFillsNaN) {
  PagePoolOptions o = SmallPool(1);
  o.scrub = ScrubPolicy::kPoison;
  PagePool pool(o);
  auto pages = pool.Allocate(kGlobex, RequestId(5), 1);
  WriteTokens(pool, pages, kGlobex, RequestId(5), 4);
  pool.Free(pages);
  const float* k =
      KvPageLayout::keys(pool.layout().page(pool.layer_base(0), pages[0].page));
  EXPECT_TRUE(std::isnan(k[0]));
}

TEST(PagePoolTest, NoScrubLeavesThePreviousWritersStamp) {
  PagePool pool(SmallPool(1));
  auto pages = pool.Allocate(kGlobex, RequestId(5), 1);
  WriteTokens(pool, pages, kGlobex, RequestId(5), 4);
  pool.Free(pages);
  auto again = pool.Allocate(kAcme, RequestId(6), 1);
  EXPECT_EQ(pool.stamp(0, again[0].page).writer.tenant, kGlobex);
}

// The pages handed out, in order, by `n` one-page allocations.
std::vector<uint32_t> HandOut(PagePool& pool, int n) {
  std::vector<uint32_t> out;
  for (int i = 0; i < n; ++i) {
    out.push_back(pool.Allocate(kAcme, RequestId(100 + i), 1)[0].page.value());
  }
  return out;
}

TEST(PagePoolTest, FreshPoolHandsOutPageZeroFirstEitherWay) {
  for (FreeListOrder order : {FreeListOrder::kLifo, FreeListOrder::kFifo}) {
    PagePoolOptions o = SmallPool(4);
    o.free_list = order;
    PagePool pool(o);
    EXPECT_EQ(HandOut(pool, 4), (std::vector<uint32_t>{0, 1, 2, 3}))
        << FreeListOrderName(order);
  }
}

// Pages 0..3 allocated, then freed in the order 1, 3, 0 (2 stays in use).
PagePool PoolFreedInOrder(FreeListOrder order) {
  PagePoolOptions o = SmallPool(4);
  o.free_list = order;
  PagePool pool(o);
  const auto pages = pool.Allocate(kGlobex, RequestId(1), 4);
  pool.Free({pages[1]});
  pool.Free({pages[3]});
  pool.Free({pages[0]});
  return pool;
}

TEST(PagePoolTest, LifoHandsOutTheMostRecentlyFreedPageFirst) {
  PagePool pool = PoolFreedInOrder(FreeListOrder::kLifo);
  EXPECT_EQ(HandOut(pool, 3), (std::vector<uint32_t>{0, 3, 1}));
}

TEST(PagePoolTest, FifoHandsOutTheLeastRecentlyFreedPageFirst) {
  PagePool pool = PoolFreedInOrder(FreeListOrder::kFifo);
  EXPECT_EQ(HandOut(pool, 3), (std::vector<uint32_t>{1, 3, 0}));
}

TEST(PagePoolTest, FifoReachesAFreedPageOnlyAfterTheUntouchedOnes) {
  PagePoolOptions o = SmallPool(4);
  o.free_list = FreeListOrder::kFifo;
  PagePool pool(o);
  pool.Free(pool.Allocate(kGlobex, RequestId(1), 1));  // page 0
  EXPECT_EQ(HandOut(pool, 4), (std::vector<uint32_t>{1, 2, 3, 0}));
}

TEST(PagePoolTest, FreeListOrderParsesItsNames) {
  EXPECT_EQ(*ParseFreeListOrder("lifo"), FreeListOrder::kLifo);
  EXPECT_EQ(*ParseFreeListOrder("fifo"), FreeListOrder::kFifo);
  EXPECT_STREQ(FreeListOrderName(FreeListOrder::kFifo), "fifo");
  EXPECT_EQ(ParseFreeListOrder("random").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PagePoolOptions().free_list, FreeListOrder::kLifo);  // default
}

TEST(PagePoolDeathTest, DoubleFreeCrashes) {
  PagePool pool(SmallPool());
  auto pages = pool.Allocate(kAcme, RequestId(1), 1);
  pool.Free(pages);
  EXPECT_DEATH(pool.Free(pages), "double free");
}

TEST(PagePoolDeathTest, FreeOfAnOldGenerationCrashes) {
  PagePool pool(SmallPool(1));
  auto old_pages = pool.Allocate(kAcme, RequestId(1), 1);
  pool.Free(old_pages);
  auto new_pages = pool.Allocate(kAcme, RequestId(2), 1);
  EXPECT_DEATH(pool.Free(old_pages), "generation");
}

}  // namespace
}  // namespace kvcanary::engine
