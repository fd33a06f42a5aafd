// An 8-lane f32 vector with exactly one implementation per build: AVX2+FMA
// where the compiler targets it, portable scalar lanes otherwise. Results are
// identical for every caller within one build (the determinism contract of
// cpu_kernels.h); they may differ in the last bit between the two
// implementations, which is why golden tests run on the build they test.
#ifndef KVCANARY_KERNELS_SIMD_H_
#define KVCANARY_KERNELS_SIMD_H_

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define KVCANARY_SIMD_AVX2 1
#endif

namespace kvcanary::kernels {

#ifdef KVCANARY_SIMD_AVX2
struct F32x8 {
  __m256 v;
  static F32x8 Zero() { return {_mm256_setzero_ps()}; }
  static F32x8 Load(const float* p) { return {_mm256_loadu_ps(p)}; }
  static F32x8 Broadcast(float s) { return {_mm256_set1_ps(s)}; }
  void Store(float* p) const { _mm256_storeu_ps(p, v); }
  // ((l0+l1)+(l2+l3)) + ((l4+l5)+(l6+l7)), the order of HorizontalSums8.
  float HorizontalSum() const {
    __m128 lo = _mm256_castps256_ps128(v);
    __m128 hi = _mm256_extractf128_ps(v, 1);
    __m128 pairs = _mm_hadd_ps(lo, hi);        // l0+l1, l2+l3, l4+l5, l6+l7
    __m128 quads = _mm_hadd_ps(pairs, pairs);  // (01)+(23), (45)+(67), ...
    __m128 hi2 = _mm_shuffle_ps(quads, quads, 0x55);
    return _mm_cvtss_f32(_mm_add_ss(quads, hi2));
  }
};
inline F32x8 operator+(F32x8 a, F32x8 b) { return {_mm256_add_ps(a.v, b.v)}; }
inline F32x8 operator-(F32x8 a, F32x8 b) { return {_mm256_sub_ps(a.v, b.v)}; }
inline F32x8 operator*(F32x8 a, F32x8 b) { return {_mm256_mul_ps(a.v, b.v)}; }
inline F32x8 operator/(F32x8 a, F32x8 b) { return {_mm256_div_ps(a.v, b.v)}; }
inline F32x8 Max(F32x8 a, F32x8 b) { return {_mm256_max_ps(a.v, b.v)}; }
// a * b + c with a single rounding.
inline F32x8 MulAdd(F32x8 a, F32x8 b, F32x8 c) {
  return {_mm256_fmadd_ps(a.v, b.v, c.v)};
}
inline F32x8 Floor(F32x8 a) { return {_mm256_floor_ps(a.v)}; }
// -|a|: a with its sign bit set.
inline F32x8 NegAbs(F32x8 a) {
  return {_mm256_or_ps(a.v, _mm256_set1_ps(-0.0f))};
}
// Per lane: if_neg where x's sign bit is set (-0 included), else otherwise.
inline F32x8 IfNegative(F32x8 x, F32x8 if_neg, F32x8 otherwise) {
  return {_mm256_blendv_ps(otherwise.v, if_neg.v, x.v)};
}
// 2^n for integral n in [-126, 127].
inline F32x8 Pow2(F32x8 n) {
  __m256i e = _mm256_add_epi32(_mm256_cvtps_epi32(n.v), _mm256_set1_epi32(127));
  return {_mm256_castsi256_ps(_mm256_slli_epi32(e, 23))};
}
// Lane i of the result is a[i].HorizontalSum(), for 8 vectors at once.
inline F32x8 HorizontalSums8(const F32x8* a) {
  __m256 t0 = _mm256_hadd_ps(a[0].v, a[1].v);
  __m256 t1 = _mm256_hadd_ps(a[2].v, a[3].v);
  __m256 t2 = _mm256_hadd_ps(a[4].v, a[5].v);
  __m256 t3 = _mm256_hadd_ps(a[6].v, a[7].v);
  __m256 u0 = _mm256_hadd_ps(t0, t1);  // a0..a3: low halves | high halves
  __m256 u1 = _mm256_hadd_ps(t2, t3);  // a4..a7
  __m256 lo = _mm256_permute2f128_ps(u0, u1, 0x20);
  __m256 hi = _mm256_permute2f128_ps(u0, u1, 0x31);
  return {_mm256_add_ps(lo, hi)};
}
#else
struct F32x8 {
  float v[8];
  static F32x8 Zero() { return F32x8{{0, 0, 0, 0, 0, 0, 0, 0}}; }
  static F32x8 Load(const float* p) {
    F32x8 r;
    for (int i = 0; i < 8; ++i) r.v[i] = p[i];
    return r;
  }
  static F32x8 Broadcast(float s) { return F32x8{{s, s, s, s, s, s, s, s}}; }
  void Store(float* p) const {
    for (int i = 0; i < 8; ++i) p[i] = v[i];
  }
  float HorizontalSum() const {
    return ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]));
  }
};
#define KVC_F32X8_BINARY(name, expr)           \
  inline F32x8 name(F32x8 a, F32x8 b) {        \
    F32x8 r;                                   \
    for (int i = 0; i < 8; ++i) r.v[i] = expr; \
    return r;                                  \
  }
KVC_F32X8_BINARY(operator+, a.v[i] + b.v[i])
KVC_F32X8_BINARY(operator-, a.v[i] - b.v[i])
KVC_F32X8_BINARY(operator*, a.v[i] * b.v[i])
KVC_F32X8_BINARY(operator/, a.v[i] / b.v[i])
KVC_F32X8_BINARY(Max, a.v[i] > b.v[i] ? a.v[i] : b.v[i])
#undef KVC_F32X8_BINARY
inline F32x8 MulAdd(F32x8 a, F32x8 b, F32x8 c) {
  F32x8 r;
  for (int i = 0; i < 8; ++i) r.v[i] = __builtin_fmaf(a.v[i], b.v[i], c.v[i]);
  return r;
}
inline F32x8 Floor(F32x8 a) {
  F32x8 r;
  for (int i = 0; i < 8; ++i) r.v[i] = __builtin_floorf(a.v[i]);
  return r;
}
inline F32x8 NegAbs(F32x8 a) {
  F32x8 r;
  for (int i = 0; i < 8; ++i) r.v[i] = -__builtin_fabsf(a.v[i]);
  return r;
}
inline F32x8 IfNegative(F32x8 x, F32x8 if_neg, F32x8 otherwise) {
  F32x8 r;
  for (int i = 0; i < 8; ++i)
    r.v[i] = __builtin_signbit(x.v[i]) ? if_neg.v[i] : otherwise.v[i];
  return r;
}
inline F32x8 Pow2(F32x8 n) {
  F32x8 r;
  for (int i = 0; i < 8; ++i) {
    const unsigned bits = static_cast<unsigned>(static_cast<int>(n.v[i]) + 127)
                          << 23;
    __builtin_memcpy(&r.v[i], &bits, 4);
  }
  return r;
}
inline F32x8 HorizontalSums8(const F32x8* a) {
  F32x8 r;
  for (int i = 0; i < 8; ++i) r.v[i] = a[i].HorizontalSum();
  return r;
}
#endif

// e^x for x <= 0 (softmax arguments after subtracting the max), within
// 2 ulp of the true value; flushes to 0 below -87. Cephes-style: x = n ln2 +
// r with |r| <= ln2/2, e^r by a degree-6 polynomial, times 2^n.
inline F32x8 ExpNonPositive(F32x8 x) {
  const F32x8 lo = F32x8::Broadcast(-87.0f);
  const F32x8 clamped = Max(x, lo);
  const F32x8 n = Floor(MulAdd(clamped, F32x8::Broadcast(1.44269504088896341f),
                               F32x8::Broadcast(0.5f)));
  // r = x - n ln2, with ln2 split in two for precision.
  F32x8 r = MulAdd(n, F32x8::Broadcast(-0.693359375f), clamped);
  r = MulAdd(n, F32x8::Broadcast(2.12194440e-4f), r);
  F32x8 p = F32x8::Broadcast(1.9875691500e-4f);
  p = MulAdd(p, r, F32x8::Broadcast(1.3981999507e-3f));
  p = MulAdd(p, r, F32x8::Broadcast(8.3334519073e-3f));
  p = MulAdd(p, r, F32x8::Broadcast(4.1665795894e-2f));
  p = MulAdd(p, r, F32x8::Broadcast(1.6666665459e-1f));
  p = MulAdd(p, r, F32x8::Broadcast(5.0000001201e-1f));
  const F32x8 r2 = r * r;
  p = MulAdd(p, r2, r + F32x8::Broadcast(1.0f));
  F32x8 result = p * Pow2(n);
  // Below the clamp the true value is < 2^-125: return 0 there.
#ifdef KVCANARY_SIMD_AVX2
  result.v = _mm256_and_ps(result.v, _mm256_cmp_ps(x.v, lo.v, _CMP_GE_OQ));
#else
  for (int i = 0; i < 8; ++i) {
    if (!(x.v[i] >= -87.0f)) result.v[i] = 0.0f;
  }
#endif
  return result;
}

}  // namespace kvcanary::kernels

#endif  // KVCANARY_KERNELS_SIMD_H_
