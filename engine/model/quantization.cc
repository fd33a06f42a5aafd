#include "engine/model/quantization.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/check.h"

namespace kvcanary::engine {
namespace {

uint32_t FloatBits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return bits;
}

float BitsFloat(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t LoadHalf(const char* p) {
  return static_cast<uint16_t>(static_cast<uint8_t>(p[0]) |
                               (static_cast<uint8_t>(p[1]) << 8));
}

// `mantissa` (an f32 significand with its implicit bit) shifted right by
// `shift`, rounded to nearest even.
uint32_t ShiftRoundEven(uint32_t mantissa, int shift) {
  const uint32_t kept = mantissa >> shift;
  const uint32_t rest = mantissa & ((1u << shift) - 1);
  const uint32_t half = 1u << (shift - 1);
  return kept + (rest > half || (rest == half && (kept & 1)) ? 1 : 0);
}

}  // namespace

uint16_t F32ToF16(float value) {
  const uint32_t bits = FloatBits(value);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000);
  const uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) {  // NaN: quiet, top payload bits kept
    return sign | 0x7e00 | static_cast<uint16_t>((magnitude >> 13) & 0x1ff);
  }
  // 65520 (0x477ff000) is halfway between 65504, the largest binary16, and
  // 65536; the tie goes to the even neighbour, infinity.
  if (magnitude >= 0x477ff000u) return sign | 0x7c00;
  if (magnitude < 0x38800000u) {  // below 2^-14: a binary16 subnormal or 0
    const int exponent = static_cast<int>(magnitude >> 23);
    if (exponent < 102) return sign;  // below 2^-25: rounds to 0
    // value = significand * 2^(exponent - 150); the subnormal unit is 2^-24.
    const uint32_t significand = (magnitude & 0x7fffff) | 0x800000;
    return sign |
           static_cast<uint16_t>(ShiftRoundEven(significand, 126 - exponent));
  }
  // Normal: rebias the exponent (127 -> 15) and round 23 mantissa bits to
  // 10; a carry out of the mantissa correctly bumps the exponent.
  const uint32_t rebiased = magnitude - (112u << 23);
  return sign | static_cast<uint16_t>(ShiftRoundEven(rebiased, 13));
}

float F16ToF32(uint16_t half) {
  const uint32_t sign = static_cast<uint32_t>(half & 0x8000) << 16;
  const uint32_t exponent = (half >> 10) & 0x1f;
  uint32_t mantissa = half & 0x3ff;
  if (exponent == 0x1f) return BitsFloat(sign | 0x7f800000u | mantissa << 13);
  if (exponent != 0) {
    return BitsFloat(sign | (exponent + 112) << 23 | mantissa << 13);
  }
  if (mantissa == 0) return BitsFloat(sign);
  // Subnormal: mantissa * 2^-24, normalized for f32.
  uint32_t biased = 113;
  while ((mantissa & 0x400) == 0) {
    mantissa <<= 1;
    --biased;
  }
  return BitsFloat(sign | biased << 23 | (mantissa & 0x3ff) << 13);
}

void QuantizeQ8_0(const float* x, int64_t n, std::string* out) {
  CHECK_EQ(n % kQ8_0BlockValues, 0);
  for (int64_t b = 0; b < n; b += kQ8_0BlockValues) {
    float amax = 0.0f;
    for (int j = 0; j < kQ8_0BlockValues; ++j) {
      amax = std::max(amax, std::fabs(x[b + j]));
    }
    const float d = amax / 127.0f;
    const float inverse = d != 0.0f ? 1.0f / d : 0.0f;
    const uint16_t d_half = F32ToF16(d);
    out->push_back(static_cast<char>(d_half & 0xff));
    out->push_back(static_cast<char>(d_half >> 8));
    for (int j = 0; j < kQ8_0BlockValues; ++j) {
      const float q = std::round(x[b + j] * inverse);
      out->push_back(static_cast<char>(
          static_cast<int8_t>(std::min(127.0f, std::max(-128.0f, q)))));
    }
  }
}

void DequantizeQ8_0(const char* blocks, int64_t n, float* out) {
  CHECK_EQ(n % kQ8_0BlockValues, 0);
  for (int64_t b = 0; b < n; b += kQ8_0BlockValues) {
    const float d = F16ToF32(LoadHalf(blocks));
    for (int j = 0; j < kQ8_0BlockValues; ++j) {
      out[b + j] = static_cast<float>(static_cast<int8_t>(blocks[2 + j])) * d;
    }
    blocks += kQ8_0BlockBytes;
  }
}

void DequantizeF16(const char* halves, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = F16ToF32(LoadHalf(halves + 2 * i));
}

}  // namespace kvcanary::engine
