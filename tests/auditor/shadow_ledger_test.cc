// The shadow ledger re-derives leaks from page lifecycle events alone.
#include "auditor/shadow_ledger.h"

#include "gtest/gtest.h"

namespace kvcanary::auditor {
namespace {

constexpr TenantId kAcme{1}, kGlobex{2};

TraceEvent Alloc(uint32_t page, uint32_t gen, TenantId t, uint64_t req) {
  TraceEvent e;
  e.type = TraceEventType::kPageAlloc;
  e.node = TraceNode::kDecode;
  e.page = PageId(page);
  e.gen = PageGeneration(gen);
  e.tenant = t;
  e.request = RequestId(req);
  return e;
}
TraceEvent Free(uint32_t page, uint32_t gen, TraceScrub scrub) {
  TraceEvent e;
  e.type = TraceEventType::kPageFree;
  e.node = TraceNode::kDecode;
  e.page = PageId(page);
  e.gen = PageGeneration(gen);
  e.scrub = scrub;
  return e;
}
TraceEvent Write(uint32_t page, uint32_t gen, TenantId t, uint64_t req,
                 uint32_t first, uint32_t end, uint32_t writer_gen = 0) {
  TraceEvent e;
  e.type = TraceEventType::kPageWrite;
  e.node = TraceNode::kDecode;
  e.page = PageId(page);
  e.gen = PageGeneration(gen);
  e.tenant = t;
  e.request = RequestId(req);
  e.first_slot = first;
  e.last_slot_exclusive = end;
  e.writer_gen = PageGeneration(writer_gen == 0 ? gen : writer_gen);
  return e;
}
TraceEvent Read(uint32_t page, uint32_t gen, TenantId t, uint64_t req,
                uint32_t slots) {
  TraceEvent e;
  e.type = TraceEventType::kPageRead;
  e.node = TraceNode::kDecode;
  e.page = PageId(page);
  e.gen = PageGeneration(gen);
  e.tenant = t;
  e.request = RequestId(req);
  e.slots = slots;
  return e;
}

// globex writes page 3 fully, frees it unscrubbed; acme gets it.
void GlobexThenAcme(ShadowLedger& ledger, TraceScrub scrub) {
  ledger.Apply(Alloc(3, 1, kGlobex, 10));
  ledger.Apply(Write(3, 1, kGlobex, 10, 0, 16));
  ledger.Apply(Read(3, 1, kGlobex, 10, 16));
  ledger.Apply(Free(3, 1, scrub));
  ledger.Apply(Alloc(3, 2, kAcme, 11));
}

TEST(ShadowLedgerTest, OwnReadsAreClean) {
  ShadowLedger ledger;
  GlobexThenAcme(ledger, TraceScrub::kNone);
  ledger.Apply(Write(3, 2, kAcme, 11, 0, 5));
  EXPECT_TRUE(ledger.Apply(Read(3, 2, kAcme, 11, 5)).empty());
  EXPECT_TRUE(ledger.findings().empty());
  EXPECT_EQ(ledger.stats().reads_checked, 2u);
}

TEST(ShadowLedgerTest, ReadOfAReservedPageNeverWrittenIsTheFormerTenants) {
  // The incident: decode attends over a reserved page it never wrote.
  ShadowLedger ledger;
  GlobexThenAcme(ledger, TraceScrub::kNone);
  auto found = ledger.Apply(Read(3, 2, kAcme, 11, 16));
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].kind, LedgerFindingKind::kForeignTenantRead);
  EXPECT_EQ(found[0].reader.tenant, kAcme);
  EXPECT_EQ(found[0].writer.tenant, kGlobex);
  EXPECT_EQ(found[0].writer.request, RequestId(10));
  // Once per (reader request, page, kind).
  EXPECT_TRUE(ledger.Apply(Read(3, 2, kAcme, 11, 16)).empty());
}

TEST(ShadowLedgerTest, StaleTailPastWhatTheReaderWroteIsAttributed) {
  ShadowLedger ledger;
  GlobexThenAcme(ledger, TraceScrub::kNone);
  ledger.Apply(Write(3, 2, kAcme, 11, 0, 4));
  auto found = ledger.Apply(Read(3, 2, kAcme, 11, 16));
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].kind, LedgerFindingKind::kForeignTenantRead);
  EXPECT_EQ(found[0].writer.tenant, kGlobex);
}

TEST(ShadowLedgerTest, ScrubbedPagesHoldNobodysBytes) {
  ShadowLedger ledger;
  GlobexThenAcme(ledger, TraceScrub::kZero);
  auto found = ledger.Apply(Read(3, 2, kAcme, 11, 16));
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].kind, LedgerFindingKind::kUnwrittenRead);
}

TEST(ShadowLedgerTest, LateWriteIsFlaggedWhenItLands) {
  ShadowLedger ledger;
  GlobexThenAcme(ledger, TraceScrub::kNone);
  // globex's transfer, for generation 1, lands after acme got the page.
  auto found = ledger.Apply(Write(3, 2, kGlobex, 10, 0, 16, /*writer_gen=*/1));
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].kind, LedgerFindingKind::kLateWrite);
  EXPECT_EQ(found[0].writer.tenant, kGlobex);
  EXPECT_EQ(found[0].reader.tenant, kAcme);
}

TEST(ShadowLedgerTest, SharedPrefixIsReadableByItsTenantOnly) {
  ShadowLedger ledger;
  ledger.Apply(Alloc(5, 1, kAcme, 20));
  ledger.Apply(Write(5, 1, kAcme, 20, 0, 16));
  TraceEvent share;
  share.type = TraceEventType::kPageShare;
  share.node = TraceNode::kDecode;
  share.page = PageId(5);
  share.gen = PageGeneration(1);
  share.tenant = kAcme;
  share.request = RequestId(20);
  ledger.Apply(share);
  EXPECT_TRUE(ledger.Apply(Read(5, 1, kAcme, 21, 16)).empty());
  auto found = ledger.Apply(Read(5, 1, kGlobex, 22, 16));
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].kind, LedgerFindingKind::kForeignTenantRead);
  EXPECT_EQ(found[0].writer.tenant, kAcme);
}

TEST(ShadowLedgerTest, PagesFirstSeenMidLifeAndAfterADropAreUnchecked) {
  ShadowLedger ledger;
  ledger.Apply(Alloc(7, 4, kAcme, 30));  // its earlier writes were missed
  EXPECT_TRUE(ledger.Apply(Read(7, 4, kAcme, 30, 16)).empty());
  EXPECT_EQ(ledger.stats().reads_unchecked, 1u);
  GlobexThenAcme(ledger, TraceScrub::kNone);
  TraceEvent dropped;
  dropped.type = TraceEventType::kDropped;
  dropped.node = TraceNode::kDecode;
  dropped.count = 9;
  ledger.Apply(dropped);
  EXPECT_TRUE(ledger.Apply(Read(3, 2, kAcme, 11, 16)).empty());
  EXPECT_EQ(ledger.stats().dropped, 9u);
  EXPECT_EQ(ledger.stats().reads_unchecked, 2u);
  EXPECT_TRUE(ledger.findings().empty());
}

TEST(ShadowLedgerTest, FailedTransferCommitIsAFinding) {
  ShadowLedger ledger;
  TraceEvent c;
  c.type = TraceEventType::kTransferCommit;
  c.node = TraceNode::kDecode;
  c.request = RequestId(40);
  c.tenant = kAcme;
  c.pages_sent = 5;
  c.pages_expected = 80;
  c.ok = false;
  auto found = ledger.Apply(c);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].kind, LedgerFindingKind::kTransferMismatch);
  EXPECT_EQ(found[0].pages_expected, 80u);
}

}  // namespace
}  // namespace kvcanary::auditor
