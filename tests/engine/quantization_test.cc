#include "engine/model/quantization.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace kvcanary::engine {
namespace {

uint32_t Bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

float FromBits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

TEST(F16Test, EveryHalfRoundTripsThroughF32) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const uint16_t half = static_cast<uint16_t>(h);
    const float f = F16ToF32(half);
    if ((half & 0x7c00) == 0x7c00 && (half & 0x3ff) != 0) {
      EXPECT_TRUE(std::isnan(f)) << h;
      EXPECT_EQ(F32ToF16(f) & 0x7e00, 0x7e00) << h;  // still a NaN
      continue;
    }
    EXPECT_EQ(F32ToF16(f), half) << "half 0x" << std::hex << h;
  }
}

TEST(F16Test, KnownValues) {
  EXPECT_EQ(F32ToF16(1.0f), 0x3c00);
  EXPECT_EQ(F32ToF16(-2.0f), 0xc000);
  EXPECT_EQ(F32ToF16(65504.0f), 0x7bff);  // the largest half
  EXPECT_EQ(F32ToF16(65519.0f), 0x7bff);
  EXPECT_EQ(F32ToF16(65520.0f), 0x7c00);  // the tie rounds to even: inf
  EXPECT_EQ(F32ToF16(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_EQ(F32ToF16(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(F32ToF16(std::ldexp(1.0f, -25)), 0x0000);  // tie to even: 0
  EXPECT_EQ(F32ToF16(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(F32ToF16(std::ldexp(3.0f, -25)), 0x0002);  // tie to even: 2
  EXPECT_EQ(F32ToF16(std::ldexp(1.0f, -14)), 0x0400);  // smallest normal
  // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: even, 1.
  EXPECT_EQ(F32ToF16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  EXPECT_EQ(F32ToF16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  EXPECT_EQ(F16ToF32(0x3555), FromBits(0x3eaaa000));  // 0.333251953125
}

// Any f32 converts to a nearest half: no neighbour is strictly closer.
TEST(F16Test, RandomFloatsRoundToANearestHalf) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> exponent(-26.0f, 16.0f);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  for (int i = 0; i < 200000; ++i) {
    const float x = unit(rng) * std::exp2(exponent(rng));
    const uint16_t h = F32ToF16(x);
    if ((h & 0x7fff) >= 0x7c00) continue;  // overflow checked above
    const double err = std::fabs(double{F16ToF32(h)} - x);
    for (int step : {-1, 1}) {
      const uint16_t n = static_cast<uint16_t>(h + step);
      if ((n & 0x7fff) >= 0x7c00) continue;
      EXPECT_LE(err, std::fabs(double{F16ToF32(n)} - x))
          << "x=" << x << " h=" << h;
    }
  }
}

TEST(Q8_0Test, BlockIsScaleThenThirtyTwoBytes) {
  std::vector<float> x(32);
  for (int j = 0; j < 32; ++j) x[j] = static_cast<float>(j - 16) / 4.0f;
  std::string blocks;
  QuantizeQ8_0(x.data(), 32, &blocks);
  ASSERT_EQ(blocks.size(), 34u);
  // max |x| = 4: d = 4/127, q[0] = round(-4 * 127/4) = -127.
  const uint16_t d = static_cast<uint16_t>(
      static_cast<uint8_t>(blocks[0]) | static_cast<uint8_t>(blocks[1]) << 8);
  EXPECT_EQ(d, F32ToF16(4.0f / 127.0f));
  EXPECT_EQ(static_cast<int8_t>(blocks[2]), -127);
  EXPECT_EQ(static_cast<int8_t>(blocks[2 + 16]), 0);
  EXPECT_EQ(static_cast<int8_t>(blocks[2 + 18]), 16);  // 0.5 * 31.75
}

TEST(Q8_0Test, RoundTripErrorIsWithinHalfAStep) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 0.2f);
  std::vector<float> x(32 * 64);
  for (float& v : x) v = normal(rng);
  x[5] = 0.0f;
  std::fill(x.begin() + 64, x.begin() + 96, 0.0f);  // an all-zero block
  std::string blocks;
  QuantizeQ8_0(x.data(), static_cast<int64_t>(x.size()), &blocks);
  ASSERT_EQ(blocks.size(), x.size() / 32 * 34);
  std::vector<float> y(x.size());
  DequantizeQ8_0(blocks.data(), static_cast<int64_t>(x.size()), y.data());
  for (size_t b = 0; b < x.size(); b += 32) {
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b + j]));
    // Half a step, plus the scale's binary16 rounding (2^-11 relative) at
    // the largest value.
    const float bound = amax / 127.0f * 0.5f + amax * 0.0005f + 1e-12f;
    for (int j = 0; j < 32; ++j) {
      EXPECT_LE(std::fabs(x[b + j] - y[b + j]), bound) << b + j;
    }
  }
  EXPECT_EQ(y[5], 0.0f);
  for (int j = 64; j < 96; ++j) EXPECT_EQ(y[j], 0.0f);
}

TEST(F16Test, DequantizeReadsLittleEndianHalves) {
  const char halves[] = {0x00, 0x3c, 0x00, static_cast<char>(0xc0)};
  float out[2];
  DequantizeF16(halves, 2, out);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], -2.0f);
  EXPECT_EQ(Bits(F16ToF32(0x8000)), 0x80000000u);  // -0
}

}  // namespace
}  // namespace kvcanary::engine
