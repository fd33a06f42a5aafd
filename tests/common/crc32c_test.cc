#include "common/crc32c.h"

#include <cstdint>
#include <string>

#include "gtest/gtest.h"

namespace kvcanary {
namespace {

TEST(Crc32cTest, KnownVectors) {
  EXPECT_EQ(Crc32c("", 0), 0u);
  EXPECT_EQ(Crc32c("123456789"), 0xE3069283u);  // RFC 3720, the check value
  EXPECT_EQ(Crc32c(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(Crc32c(std::string(32, '\xff')), 0x62A8AB43u);
}

// The fast path (ISA-L, or the instruction) and the instruction path (three
// interleaved streams over 768-byte chunks, one stream for the rest) agree
// with the table at every length around the chunk sizes and at every
// alignment, from a fresh and an extended CRC.
TEST(Crc32cTest, EveryPathAgreesWithTheTableAtEveryLengthAndAlignment) {
  std::string bytes(5000, '\0');
  uint32_t x = 12345;
  for (char& c : bytes) {
    x = x * 1103515245u + 12345u;
    c = static_cast<char>(x >> 24);
  }
  for (size_t offset = 0; offset < 8; ++offset) {
    for (size_t n = 0; n + offset <= bytes.size(); n += (n < 2400 ? 1 : 97)) {
      const char* p = bytes.data() + offset;
      const uint32_t want = Crc32cExtendPortable(0, p, n);
      ASSERT_EQ(Crc32cExtend(0, p, n), want)
          << "offset " << offset << " length " << n;
      ASSERT_EQ(Crc32cExtendInstruction(0, p, n), want)
          << "offset " << offset << " length " << n;
      const uint32_t extended = Crc32cExtendPortable(0xDEADBEEF, p, n);
      ASSERT_EQ(Crc32cExtend(0xDEADBEEF, p, n), extended)
          << "offset " << offset << " length " << n;
      ASSERT_EQ(Crc32cExtendInstruction(0xDEADBEEF, p, n), extended)
          << "offset " << offset << " length " << n;
    }
  }
}

TEST(Crc32cTest, ExtendingInPiecesEqualsOnePass) {
  std::string bytes(4164, 'k');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i);
  const uint32_t whole = Crc32c(bytes);
  for (size_t cut : {0, 1, 68, 767, 768, 2000, 4163, 4164}) {
    const uint32_t first = Crc32cExtend(0, bytes.data(), cut);
    EXPECT_EQ(Crc32cExtend(first, bytes.data() + cut, bytes.size() - cut),
              whole)
        << "cut at " << cut;
  }
}

}  // namespace
}  // namespace kvcanary
