#include "canaries/marker_key.h"

#include <cstdint>
#include <set>
#include <string>

#include "absl/status/status.h"
#include "gtest/gtest.h"

namespace kvcanary {
namespace {

std::string HexOf(absl::StatusOr<std::array<uint8_t, kHmacSha256Bytes>> mac) {
  EXPECT_TRUE(mac.ok()) << mac.status();
  if (!mac.ok()) return "";
  return HexEncode(*mac);
}

// RFC 4231 section 4: test vectors for HMAC-SHA-256.
TEST(HmacSha256Test, Rfc4231Case1) {
  EXPECT_EQ(HexOf(HmacSha256(std::string(20, '\x0b'), "Hi There")),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
}

TEST(HmacSha256Test, Rfc4231Case2KeyShorterThanOutput) {
  EXPECT_EQ(HexOf(HmacSha256("Jefe", "what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
}

TEST(HmacSha256Test, Rfc4231Case3CombinedLengthAboveBlockSize) {
  EXPECT_EQ(HexOf(HmacSha256(std::string(20, '\xaa'), std::string(50, '\xdd'))),
            "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");
}

TEST(HmacSha256Test, Rfc4231Case4) {
  std::string key;
  for (int i = 1; i <= 25; ++i) key.push_back(static_cast<char>(i));
  EXPECT_EQ(HexOf(HmacSha256(key, std::string(50, '\xcd'))),
            "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b");
}

TEST(HmacSha256Test, Rfc4231Case6KeyLargerThanBlockSize) {
  EXPECT_EQ(HexOf(HmacSha256(
                std::string(131, '\xaa'),
                "Test Using Larger Than Block-Size Key - Hash Key First")),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}

TEST(HmacSha256Test, Rfc4231Case7KeyAndDataLargerThanBlockSize) {
  EXPECT_EQ(
      HexOf(HmacSha256(
          std::string(131, '\xaa'),
          "This is a test using a larger than block-size key and a larger "
          "than block-size data. The key needs to be hashed before being "
          "used by the HMAC algorithm.")),
      "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2");
}

// HMAC-SHA-256 with an empty key and an empty message (widely published
// value); the empty key must mean the all-zero key, not "no key".
TEST(HmacSha256Test, EmptyKeyAndMessage) {
  EXPECT_EQ(HexOf(HmacSha256("", "")),
            "b613679a0814d9ec772f95d778c35fc5ff1697c493715653c6c712144292c5ad");
}

TEST(HexEncodeTest, LowerCaseTwoDigitsPerByte) {
  const uint8_t bytes[] = {0x00, 0x0f, 0xa0, 0xff};
  EXPECT_EQ(HexEncode(bytes), "000fa0ff");
  EXPECT_EQ(HexEncode({}), "");
}

constexpr absl::string_view kKey = "auditor-secret-key-for-tests";

TEST(DeriveMarkerSeedTest, IsDeterministic) {
  EXPECT_EQ(DeriveMarkerSeed(kKey, "tenant-a", "campaign-1", 7),
            DeriveMarkerSeed(kKey, "tenant-a", "campaign-1", 7));
}

TEST(DeriveMarkerSeedTest, IsHmacOfDocumentedEncoding) {
  auto mac = HmacSha256(kKey, EncodeMarkerSeedMessage("t", "c", 1));
  ASSERT_TRUE(mac.ok()) << mac.status();
  EXPECT_EQ(DeriveMarkerSeed(kKey, "t", "c", 1).bytes, *mac);
}

TEST(DeriveMarkerSeedTest, EncodingMatchesHeaderLayout) {
  const std::string expected = std::string("kvcanary/marker-seed/v1") +
                               std::string("\x02\0\0\0\0\0\0\0", 8) + "ab" +
                               std::string("\x01\0\0\0\0\0\0\0", 8) + "c" +
                               std::string("\x05\x01\0\0\0\0\0\0", 8);
  EXPECT_EQ(EncodeMarkerSeedMessage("ab", "c", 0x0105), expected);
}

TEST(DeriveMarkerSeedTest, AnyFieldChangeChangesSeed) {
  const MarkerSeed base = DeriveMarkerSeed(kKey, "tenant-a", "campaign-1", 7);
  EXPECT_NE(base, DeriveMarkerSeed("other-key", "tenant-a", "campaign-1", 7));
  EXPECT_NE(base, DeriveMarkerSeed(kKey, "tenant-b", "campaign-1", 7));
  EXPECT_NE(base, DeriveMarkerSeed(kKey, "tenant-a", "campaign-2", 7));
  EXPECT_NE(base, DeriveMarkerSeed(kKey, "tenant-a", "campaign-1", 8));
  EXPECT_NE(base, DeriveMarkerSeed(kKey, "tenant-a", "campaign-1",
                                   7 + (uint64_t{1} << 32)));
}

TEST(DeriveMarkerSeedTest, LengthPrefixSeparatesFieldBoundaries) {
  EXPECT_NE(EncodeMarkerSeedMessage("ab", "c", 0),
            EncodeMarkerSeedMessage("a", "bc", 0));
  EXPECT_NE(DeriveMarkerSeed(kKey, "ab", "c", 0),
            DeriveMarkerSeed(kKey, "a", "bc", 0));
  EXPECT_NE(DeriveMarkerSeed(kKey, "", "abc", 0),
            DeriveMarkerSeed(kKey, "abc", "", 0));
}

TEST(DeriveMarkerSeedTest, CountersGiveDistinctSeeds) {
  std::set<std::string> seen;
  for (uint64_t counter = 0; counter < 1000; ++counter) {
    seen.insert(HexEncode(DeriveMarkerSeed(kKey, "t", "c", counter).bytes));
  }
  EXPECT_EQ(seen.size(), 1000u);
}

}  // namespace
}  // namespace kvcanary
