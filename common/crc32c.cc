#include "common/crc32c.h"

#include <algorithm>
#include <array>
#include <cstring>

#ifdef KVCANARY_HAVE_ISAL
#include <isa-l/crc.h>
#endif

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <nmmintrin.h>
#define KVCANARY_CRC32C_X86 1
#endif

namespace kvcanary {
namespace {

constexpr uint32_t kPolyReflected = 0x82F63B78u;

constexpr std::array<uint32_t, 256> MakeTable() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k)
      c = (c & 1) ? (c >> 1) ^ kPolyReflected : c >> 1;
    table[i] = c;
  }
  return table;
}

constexpr std::array<uint32_t, 256> kTable = MakeTable();

// Carry-less product of a and b modulo the polynomial, bits reflected (bit
// 31 is x^0), as the CRC register holds them.
constexpr uint32_t MulModPoly(uint32_t a, uint32_t b) {
  uint32_t product = 0;
  for (int i = 0; i < 32; ++i) {
    if (a & 0x80000000u) product ^= b;
    a <<= 1;
    b = (b & 1) ? (b >> 1) ^ kPolyReflected : b >> 1;
  }
  return product;
}

// x^(8 * n) modulo the polynomial: what `n` zero bytes multiply the
// register by.
constexpr uint32_t XPow8N(uint64_t n) {
  uint32_t result = 0x80000000u;  // x^0
  uint32_t square = 0x40000000u;  // x^1, then x^2, x^4, ...
  for (uint64_t e = 8 * n; e != 0; e >>= 1) {
    if (e & 1) result = MulModPoly(result, square);
    square = MulModPoly(square, square);
  }
  return result;
}

// The register after `n` zero bytes, as four byte-indexed tables (the
// operator is linear): how the three streams below are joined.
struct ZerosOperator {
  std::array<std::array<uint32_t, 256>, 4> table{};
  constexpr explicit ZerosOperator(uint64_t n) {
    const uint32_t m = XPow8N(n);
    for (int b = 0; b < 4; ++b) {
      for (uint32_t v = 0; v < 256; ++v) {
        table[b][v] = MulModPoly(v << (8 * b), m);
      }
    }
  }
  uint32_t Apply(uint32_t crc) const {
    return table[0][crc & 0xFF] ^ table[1][(crc >> 8) & 0xFF] ^
           table[2][(crc >> 16) & 0xFF] ^ table[3][crc >> 24];
  }
};

#ifdef KVCANARY_CRC32C_X86
// The CRC32 instruction takes 3 cycles and issues one a cycle, so three
// independent streams over adjacent blocks run about three times faster
// than one; their registers are then joined by shifting each over the
// blocks after it.
constexpr size_t kStreamBlock = 256;
constexpr ZerosOperator kShiftOneBlock(kStreamBlock);
constexpr ZerosOperator kShiftTwoBlocks(2 * kStreamBlock);

__attribute__((target("sse4.2"))) uint64_t ExtendOneStream(uint64_t c,
                                                           const uint8_t* p,
                                                           size_t n) {
  for (; n >= 8; p += 8, n -= 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    c = _mm_crc32_u64(c, word);
  }
  uint32_t c32 = static_cast<uint32_t>(c);
  for (; n > 0; --n) c32 = _mm_crc32_u8(c32, *p++);
  return c32;
}

__attribute__((target("sse4.2"))) uint32_t ExtendHardware(uint32_t crc,
                                                          const uint8_t* p,
                                                          size_t n) {
  uint64_t c0 = ~crc;
  for (; n >= 3 * kStreamBlock; p += 3 * kStreamBlock, n -= 3 * kStreamBlock) {
    uint64_t c1 = 0;
    uint64_t c2 = 0;
    for (size_t i = 0; i < kStreamBlock; i += 8) {
      uint64_t w0, w1, w2;
      std::memcpy(&w0, p + i, 8);
      std::memcpy(&w1, p + kStreamBlock + i, 8);
      std::memcpy(&w2, p + 2 * kStreamBlock + i, 8);
      c0 = _mm_crc32_u64(c0, w0);
      c1 = _mm_crc32_u64(c1, w1);
      c2 = _mm_crc32_u64(c2, w2);
    }
    c0 = kShiftTwoBlocks.Apply(static_cast<uint32_t>(c0)) ^
         kShiftOneBlock.Apply(static_cast<uint32_t>(c1)) ^
         static_cast<uint32_t>(c2);
  }
  return ~static_cast<uint32_t>(ExtendOneStream(c0, p, n));
}

bool DetectHardware() {
  unsigned eax, ebx, ecx, edx;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return false;
  return (ecx & bit_SSE4_2) != 0;
}
#endif

}  // namespace

uint32_t Crc32cExtendPortable(uint32_t crc, const void* data,
                              size_t size_bytes) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t c = ~crc;
  for (size_t i = 0; i < size_bytes; ++i)
    c = kTable[(c ^ p[i]) & 0xFF] ^ (c >> 8);
  return ~c;
}

bool Crc32cHardwareAvailable() {
#ifdef KVCANARY_CRC32C_X86
  static const bool available = DetectHardware();
  return available;
#else
  return false;
#endif
}

uint32_t Crc32cExtendInstruction(uint32_t crc, const void* data,
                                 size_t size_bytes) {
#ifdef KVCANARY_CRC32C_X86
  if (Crc32cHardwareAvailable()) {
    return ExtendHardware(crc, static_cast<const uint8_t*>(data), size_bytes);
  }
#endif
  return Crc32cExtendPortable(crc, data, size_bytes);
}

bool Crc32cUsesIsal() {
#ifdef KVCANARY_HAVE_ISAL
  return true;
#else
  return false;
#endif
}

uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t size_bytes) {
#ifdef KVCANARY_HAVE_ISAL
  // ISA-L picks its fastest code for this CPU at run time; it takes and
  // returns the register (the CRC before its final inversion), and an int
  // length.
  auto* p = static_cast<unsigned char*>(const_cast<void*>(data));
  uint32_t reg = ~crc;
  while (size_bytes > 0) {
    const size_t n = std::min<size_t>(size_bytes, size_t{1} << 30);
    reg = crc32_iscsi(p, static_cast<int>(n), reg);
    p += n;
    size_bytes -= n;
  }
  return ~reg;
#else
  return Crc32cExtendInstruction(crc, data, size_bytes);
#endif
}

}  // namespace kvcanary
