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
  // ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7))
  float HorizontalSum() const {
    __m128 lo = _mm256_castps256_ps128(v);
    __m128 hi = _mm256_extractf128_ps(v, 1);
    __m128 s = _mm_add_ps(lo, hi);   // l0+l4, l1+l5, l2+l6, l3+l7
    __m128 t = _mm_movehl_ps(s, s);  // l2+l6, l3+l7
    __m128 u = _mm_add_ps(s, t);     // (l0+l4)+(l2+l6), (l1+l5)+(l3+l7)
    __m128 w = _mm_shuffle_ps(u, u, 0x55);
    return _mm_cvtss_f32(_mm_add_ss(u, w));
  }
};
// a * b + c with a single rounding.
inline F32x8 MulAdd(F32x8 a, F32x8 b, F32x8 c) {
  return {_mm256_fmadd_ps(a.v, b.v, c.v)};
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
    return ((v[0] + v[4]) + (v[2] + v[6])) + ((v[1] + v[5]) + (v[3] + v[7]));
  }
};
inline F32x8 MulAdd(F32x8 a, F32x8 b, F32x8 c) {
  F32x8 r;
  for (int i = 0; i < 8; ++i) r.v[i] = a.v[i] * b.v[i] + c.v[i];
  return r;
}
#endif

}  // namespace kvcanary::kernels

#endif  // KVCANARY_KERNELS_SIMD_H_
