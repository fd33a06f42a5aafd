#include "common/crc32c.h"

#include <array>
#include <cstring>

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

#ifdef KVCANARY_CRC32C_X86
__attribute__((target("sse4.2"))) uint32_t ExtendHardware(uint32_t crc,
                                                          const uint8_t* p,
                                                          size_t n) {
  uint64_t c = ~crc;
  while (n >= 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    c = _mm_crc32_u64(c, word);
    p += 8;
    n -= 8;
  }
  uint32_t c32 = static_cast<uint32_t>(c);
  while (n > 0) {
    c32 = _mm_crc32_u8(c32, *p++);
    --n;
  }
  return ~c32;
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

uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t size_bytes) {
#ifdef KVCANARY_CRC32C_X86
  if (Crc32cHardwareAvailable()) {
    return ExtendHardware(crc, static_cast<const uint8_t*>(data), size_bytes);
  }
#endif
  return Crc32cExtendPortable(crc, data, size_bytes);
}

}  // namespace kvcanary
