// The shadow ledger re-derives leaks from page lifecycle events alone.
#include "auditor/trace/shadow_ledger.h"

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

TraceEvent Share(uint32_t page, uint32_t gen, TenantId t, uint64_t req) {
  TraceEvent e = Alloc(page, gen, t, req);
  e.type = TraceEventType::kPageShare;
  return e;
}

// The same events as a kvt1 engine sent them.
TraceEvent V1(TraceEvent e) {
  e.version = kTraceVersion1;
  return e;
}

// acme's request 20 computes page 5 and publishes it as acme's prefix.
void AcmePublishesPage5(ShadowLedger& ledger, uint8_t version) {
  for (TraceEvent e : {Alloc(5, 1, kAcme, 20), Write(5, 1, kAcme, 20, 0, 16),
                       Share(5, 1, kAcme, 20)}) {
    e.version = version;
    ledger.Apply(e);
  }
}

TEST(ShadowLedgerTest, SharedPrefixIsReadableByItsTenantOnly) {
  for (uint8_t version : {kTraceVersion1, kTraceVersion2}) {
    SCOPED_TRACE(static_cast<int>(version));
    ShadowLedger ledger;
    AcmePublishesPage5(ledger, version);
    TraceEvent acme = Read(5, 1, kAcme, 21, 16);
    acme.version = version;
    EXPECT_TRUE(ledger.Apply(acme).empty());
    TraceEvent globex = Read(5, 1, kGlobex, 22, 16);
    globex.version = version;
    auto found = ledger.Apply(globex);
    ASSERT_EQ(found.size(), 1u);
    EXPECT_EQ(found[0].kind, LedgerFindingKind::kForeignTenantRead);
    EXPECT_EQ(found[0].writer.tenant, kAcme);
    EXPECT_TRUE(found[0].writer_shared);
  }
}

TEST(ShadowLedgerTest, Kvt2SharedPrefixFindingNamesTheRealWriterRequest) {
  ShadowLedger ledger;
  AcmePublishesPage5(ledger, kTraceVersion2);
  auto found = ledger.Apply(Read(5, 1, kGlobex, 22, 16));
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].writer.request, RequestId(20));
}

TEST(ShadowLedgerTest, Kvt1SharedPrefixFindingStillNamesTheAllOnesWriter) {
  ShadowLedger ledger;
  AcmePublishesPage5(ledger, kTraceVersion1);
  auto found = ledger.Apply(V1(Read(5, 1, kGlobex, 22, 16)));
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].writer.request, kReservedRequestId);  // as kvt1 said
}

TEST(ShadowLedgerTest, SharedPrefixOfAnEarlierAllocationIsStale) {
  for (uint8_t version : {kTraceVersion1, kTraceVersion2}) {
    SCOPED_TRACE(static_cast<int>(version));
    ShadowLedger ledger;
    AcmePublishesPage5(ledger, version);
    // Evicted unscrubbed, reallocated to acme's request 23, never written.
    TraceEvent free = Free(5, 1, TraceScrub::kNone);
    TraceEvent alloc = Alloc(5, 2, kAcme, 23);
    TraceEvent read = Read(5, 2, kAcme, 23, 16);
    free.version = alloc.version = read.version = version;
    ledger.Apply(free);
    ledger.Apply(alloc);
    auto found = ledger.Apply(read);
    ASSERT_EQ(found.size(), 1u);
    EXPECT_EQ(found[0].kind, LedgerFindingKind::kStaleRequestRead);
    EXPECT_EQ(found[0].writer.request,
              version == kTraceVersion1 ? kReservedRequestId : RequestId(20));
  }
}

TEST(ShadowLedgerTest, Kvt2ShareNamingAnotherWriterSharesNothing) {
  ShadowLedger ledger;
  ledger.Apply(Alloc(5, 1, kAcme, 20));
  ledger.Apply(Write(5, 1, kAcme, 20, 0, 16));
  ledger.Apply(Share(5, 1, kAcme, 19));  // not the writer the ledger saw
  auto found = ledger.Apply(Read(5, 1, kAcme, 21, 16));
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].kind, LedgerFindingKind::kStaleRequestRead);
  EXPECT_FALSE(found[0].writer_shared);
}

TEST(ShadowLedgerTest, Kvt1TransferredSharedPrefixWriteIsShared) {
  // A kvt1 decode node installed a shared prefix as a write by the all-ones
  // request: readers of its tenant were never flagged, and still are not.
  ShadowLedger ledger;
  ledger.Apply(V1(Alloc(6, 1, kAcme, 30)));
  ledger.Apply(V1(Write(6, 1, kAcme, kReservedRequestId.value(), 0, 16)));
  EXPECT_TRUE(ledger.Apply(V1(Read(6, 1, kAcme, 30, 16))).empty());
  auto found = ledger.Apply(V1(Read(6, 1, kGlobex, 31, 16)));
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].kind, LedgerFindingKind::kForeignTenantRead);
}

TEST(ShadowLedgerTest, Kvt2TransferredSharedPrefixIsSharedByItsPageShare) {
  // A kvt2 decode node installs the prefill node's shared page as written
  // by the real request (20), then says it is shared.
  ShadowLedger ledger;
  ledger.Apply(Alloc(6, 1, kAcme, 30));
  ledger.Apply(Write(6, 1, kAcme, 20, 0, 16));
  ledger.Apply(Share(6, 1, kAcme, 20));
  EXPECT_TRUE(ledger.Apply(Read(6, 1, kAcme, 30, 16)).empty());
}

TEST(ShadowLedgerTest, ScrubClearsTheSharedMark) {
  ShadowLedger ledger;
  AcmePublishesPage5(ledger, kTraceVersion2);
  ledger.Apply(Free(5, 1, TraceScrub::kZero));
  ledger.Apply(Alloc(5, 2, kAcme, 23));
  auto found = ledger.Apply(Read(5, 2, kAcme, 23, 16));
  ASSERT_EQ(found.size(), 1u);  // nobody's bytes, shared by nobody
  EXPECT_EQ(found[0].kind, LedgerFindingKind::kUnwrittenRead);
  EXPECT_FALSE(found[0].writer_shared);
}

TEST(ShadowLedgerTest, FindingsCarryTheirEventAndWhenItWasSeen) {
  ShadowLedger ledger;
  GlobexThenAcme(ledger, TraceScrub::kNone);
  TraceEvent read = Read(3, 2, kAcme, 11, 16);
  read.seq = 41;
  read.ts_us = 5000;
  auto found = ledger.Apply(read, /*now_unix_us=*/1700000000123456);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].event_seq, 41u);
  EXPECT_EQ(found[0].event_ts_us, 5000u);
  EXPECT_EQ(found[0].seen_unix_us, 1700000000123456);
  ASSERT_EQ(ledger.findings().size(), 1u);
  EXPECT_EQ(ledger.findings()[0].event_seq, 41u);
  EXPECT_EQ(ledger.findings()[0].seen_unix_us, 1700000000123456);
}

TEST(ShadowLedgerTest, EngineViolationCarriesWriterSharedAndItsEvent) {
  ShadowLedger ledger;
  TraceEvent v;
  v.type = TraceEventType::kViolation;
  v.node = TraceNode::kPrefill;
  v.seq = 9;
  v.ts_us = 70;
  v.kind = ViolationKind::kForeignTenantRead;
  v.reader = StampIdentity{RequestId(22), kGlobex, PageGeneration(1)};
  v.writer = StampIdentity{RequestId(20), kAcme, PageGeneration(1)};
  v.writer_shared = true;
  auto found = ledger.Apply(v, 123);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].kind, LedgerFindingKind::kEngineViolation);
  EXPECT_TRUE(found[0].writer_shared);
  EXPECT_EQ(found[0].writer.request, RequestId(20));
  EXPECT_EQ(found[0].event_seq, 9u);
  EXPECT_EQ(found[0].event_ts_us, 70u);
  EXPECT_EQ(found[0].seen_unix_us, 123);
}

TEST(ShadowLedgerTest, CountsCheckedReadsAndReadersPerTenant) {
  ShadowLedger ledger;
  GlobexThenAcme(ledger, TraceScrub::kNone);  // globex 10 reads once
  ledger.Apply(Write(3, 2, kAcme, 11, 0, 5));
  ledger.Apply(Read(3, 2, kAcme, 11, 5));
  ledger.Apply(Read(3, 2, kAcme, 11, 5));
  ledger.Apply(Alloc(4, 1, kAcme, 12));
  ledger.Apply(Write(4, 1, kAcme, 12, 0, 5));
  ledger.Apply(Read(4, 1, kAcme, 12, 5));
  ledger.Apply(Alloc(8, 1, kAcme, 13));
  ledger.Apply(Read(8, 9, kAcme, 13, 5));  // unknown page: unchecked
  const LedgerStats& st = ledger.stats();
  EXPECT_EQ(st.reads_checked, 4u);
  EXPECT_EQ(st.reads_unchecked, 1u);
  EXPECT_EQ(st.reads_checked_by_tenant.at(kAcme.value()), 3u);
  EXPECT_EQ(st.reads_checked_by_tenant.at(kGlobex.value()), 1u);
  EXPECT_EQ(st.requests_checked_by_tenant.at(kAcme.value()), 2u);  // 11, 12
  EXPECT_EQ(st.requests_checked_by_tenant.at(kGlobex.value()), 1u);
}

TEST(ShadowLedgerTest, KnowsTheTenantOfEveryRequestItSaw) {
  ShadowLedger ledger;
  TraceEvent lifecycle;
  lifecycle.type = TraceEventType::kRequest;
  lifecycle.request = RequestId(50);
  lifecycle.tenant = kGlobex;
  ledger.Apply(lifecycle);
  ledger.Apply(Alloc(1, 1, kAcme, 51));
  ledger.Apply(Write(1, 1, kAcme, 52, 0, 1));
  ledger.Apply(Read(1, 1, kAcme, 53, 1));
  TraceEvent commit;
  commit.type = TraceEventType::kTransferCommit;
  commit.request = RequestId(54);
  commit.tenant = kGlobex;
  commit.ok = true;
  ledger.Apply(commit);
  // Not requests: none (0), and kvt1's all-ones shared-prefix writer.
  ledger.Apply(V1(Write(2, 1, kAcme, kReservedRequestId.value(), 0, 1)));
  ledger.Apply(Alloc(2, 1, kAcme, 0));
  const auto& tenants = ledger.request_tenants();
  EXPECT_EQ(tenants.size(), 5u);
  EXPECT_EQ(tenants.at(50), kGlobex.value());
  EXPECT_EQ(tenants.at(51), kAcme.value());
  EXPECT_EQ(tenants.at(52), kAcme.value());
  EXPECT_EQ(tenants.at(53), kAcme.value());
  EXPECT_EQ(tenants.at(54), kGlobex.value());
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
