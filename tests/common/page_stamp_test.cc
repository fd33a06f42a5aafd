// The page stamp: its version-2 wire layout (docs/watermarks.md) and the
// shared-prefix rule, which comes from the stamp's flag, not from a
// reserved writer request.
#include "common/page_stamp.h"

#include <string>

#include "common/wire.h"
#include "gtest/gtest.h"

namespace kvcanary {
namespace {

constexpr TenantId kAcme{1}, kGlobex{2};

StampIdentity Id(TenantId tenant, uint64_t request, uint32_t gen) {
  return StampIdentity{RequestId(request), tenant, PageGeneration(gen)};
}

PageStamp Stamp() {
  PageStamp s;
  s.layer = 3;
  s.page = PageId(7);
  s.owner = Id(kAcme, 20, 5);
  s.writer = Id(kAcme, 20, 5);
  s.filled = 16;
  return s;
}

std::string Encoded(const PageStamp& s) {
  std::string out;
  s.EncodeTo(&out);
  return out;
}

TEST(PageStampTest, WireLayoutIsVersionTwoWithFlagsLast) {
  PageStamp s = Stamp();
  s.set_shared(true);
  const std::string bytes = Encoded(s);
  ASSERT_EQ(bytes.size(), PageStamp::kEncodedSizeBytes);
  ASSERT_EQ(bytes.size(), 52u);
  WireReader r(bytes);
  EXPECT_EQ(r.Fixed32(), PageStamp::kMagic);
  EXPECT_EQ(r.Fixed16(), 2u);             // version
  EXPECT_EQ(r.Fixed16(), 3u);             // layer
  EXPECT_EQ(r.Fixed32(), 7u);             // page
  EXPECT_EQ(r.Fixed32(), kAcme.value());  // owner
  EXPECT_EQ(r.Fixed64(), 20u);
  EXPECT_EQ(r.Fixed32(), 5u);
  EXPECT_EQ(r.Fixed32(), kAcme.value());  // writer: the real request
  EXPECT_EQ(r.Fixed64(), 20u);
  EXPECT_EQ(r.Fixed32(), 5u);
  EXPECT_EQ(r.Fixed32(), 16u);           // filled
  EXPECT_EQ(r.Fixed32(), kStampShared);  // flags
  EXPECT_EQ(r.remaining(), 0u);
}

TEST(PageStampTest, RoundTripKeepsTheSharedFlagAndTheRealWriter) {
  for (bool shared : {false, true}) {
    PageStamp s = Stamp();
    s.set_shared(shared);
    absl::StatusOr<PageStamp> back = PageStamp::Decode(Encoded(s));
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->shared(), shared);
    EXPECT_EQ(back->writer, s.writer);
    EXPECT_EQ(back->owner, s.owner);
    EXPECT_EQ(back->filled, s.filled);
    EXPECT_EQ(Encoded(*back), Encoded(s));
  }
}

TEST(PageStampTest, TruncatedBadMagicOldVersionAndUnknownFlagsAreDataLoss) {
  const std::string good = Encoded(Stamp());
  for (size_t n = 0; n < good.size(); ++n) {
    EXPECT_EQ(PageStamp::Decode(good.substr(0, n)).status().code(),
              absl::StatusCode::kDataLoss)
        << n;
  }
  std::string magic = good;
  magic[0] ^= 1;
  std::string v1 = good;
  v1[4] = 1;
  std::string flags = good;
  flags[48] = static_cast<char>(0x81);  // bit 0 is known, bit 7 is not
  for (const auto& [bytes, why] :
       {std::pair<std::string, std::string>{magic, "bad magic"},
        {v1, "unknown version 1"},
        {flags, "unknown flags 0x80"}}) {
    absl::StatusOr<PageStamp> s = PageStamp::Decode(bytes);
    ASSERT_FALSE(s.ok()) << why;
    EXPECT_EQ(s.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_NE(s.status().message().find(why), absl::string_view::npos)
        << s.status();
  }
}

TEST(PageStampTest, SharedPageIsReadableByEveryRequestOfItsTenant) {
  PageStamp s = Stamp();
  s.set_shared(true);
  EXPECT_EQ(ClassifyRead(s, Id(kAcme, 21, 5), 16), std::nullopt);
  EXPECT_EQ(ClassifyRead(s, Id(kAcme, 20, 5), 16), std::nullopt);
}

TEST(PageStampTest, SharedPageReadByAnotherTenantNamesTheRealWriter) {
  PageStamp s = Stamp();
  s.set_shared(true);
  StampIdentity source;
  bool source_shared = false;
  EXPECT_EQ(ClassifyRead(s, Id(kGlobex, 30, 5), 16, &source, &source_shared),
            ViolationKind::kForeignTenantRead);
  EXPECT_EQ(source, Id(kAcme, 20, 5));
  EXPECT_TRUE(source_shared);
}

TEST(PageStampTest, SharedOnlyInTheAllocationItWasSharedIn) {
  PageStamp s = Stamp();
  s.set_shared(true);
  s.owner = Id(kAcme, 21, 6);  // reallocated, not rewritten
  StampIdentity source;
  bool source_shared = false;
  EXPECT_EQ(ClassifyRead(s, Id(kAcme, 21, 6), 16, &source, &source_shared),
            ViolationKind::kStaleRequestRead);
  EXPECT_EQ(source.request, RequestId(20));
  EXPECT_TRUE(source_shared);
}

TEST(PageStampTest, ReservedWriterRequestWithoutTheFlagIsNotShared) {
  PageStamp s = Stamp();
  s.writer.request = kReservedRequestId;
  bool source_shared = true;
  EXPECT_EQ(ClassifyRead(s, Id(kAcme, 21, 5), 16, nullptr, &source_shared),
            ViolationKind::kStaleRequestRead);
  EXPECT_FALSE(source_shared);
}

TEST(PageStampTest, TailReadIntoAPriorWritersBytesIsNotShared) {
  PageStamp s = Stamp();
  s.set_shared(true);
  // acme's request 21 takes the page over for 4 slots: the flag goes.
  EXPECT_EQ(StampWrite(&s, Id(kAcme, 21, 5), 0, 4), std::nullopt);
  EXPECT_FALSE(s.shared());
  EXPECT_EQ(s.prior, Id(kAcme, 20, 5));
  StampIdentity source;
  bool source_shared = true;
  EXPECT_EQ(ClassifyRead(s, Id(kAcme, 21, 5), 8, &source, &source_shared),
            ViolationKind::kStaleRequestRead);
  EXPECT_EQ(source, Id(kAcme, 20, 5));
  EXPECT_FALSE(source_shared);
}

TEST(PageStampTest, SameWriterContinuingKeepsTheFlag) {
  PageStamp s = Stamp();
  s.filled = 8;
  s.set_shared(true);
  EXPECT_EQ(StampWrite(&s, Id(kAcme, 20, 5), 8, 9), std::nullopt);
  EXPECT_TRUE(s.shared());
  EXPECT_EQ(s.filled, 9u);
}

TEST(PageStampTest, ViolationDebugStringSaysShared) {
  WatermarkViolation v;
  v.writer = Id(kAcme, 20, 5);
  v.writer_shared = true;
  EXPECT_NE(v.DebugString().find("request 20, gen 5, shared)"),
            std::string::npos)
      << v.DebugString();
}

}  // namespace
}  // namespace kvcanary
