// The weight encodings GGUF files carry besides f32 (docs/gguf.md): IEEE 754
// binary16 ("F16") and ggml's Q8_0 blocks. Conversions both ways, written
// from the formats' definitions; the engine dequantizes to f32 at load.
//
// Q8_0 block (34 bytes, 32 values): a binary16 scale d, then 32 int8 q;
// value j is q[j] * d. Quantizing follows ggml's reference
// (quantize_row_q8_0_ref): d = max|x| / 127 (rounded to binary16 for
// storage), q[j] = round-half-away(x[j] * (1/d)) with the f32 d, 0 when d is
// 0.
#ifndef KVCANARY_ENGINE_MODEL_QUANTIZATION_H_
#define KVCANARY_ENGINE_MODEL_QUANTIZATION_H_

#include <cstdint>
#include <string>

namespace kvcanary::engine {

// f32 to binary16, rounding to nearest even; beyond the binary16 range it
// gives infinity (±65520 and up), NaN stays NaN (quiet).
uint16_t F32ToF16(float value);
// binary16 to f32, exactly (every binary16 value is an f32 value).
float F16ToF32(uint16_t half);

inline constexpr int kQ8_0BlockValues = 32;
inline constexpr int kQ8_0BlockBytes = 2 + kQ8_0BlockValues;

// Appends the Q8_0 blocks of x[0, n). REQUIRES: n % kQ8_0BlockValues == 0.
void QuantizeQ8_0(const float* x, int64_t n, std::string* out);
// out[0, n) from n / kQ8_0BlockValues blocks at `blocks`.
// REQUIRES: n % kQ8_0BlockValues == 0.
void DequantizeQ8_0(const char* blocks, int64_t n, float* out);
// out[0, n) from n binary16 values (little-endian) at `halves`.
void DequantizeF16(const char* halves, int64_t n, float* out);

}  // namespace kvcanary::engine

#endif  // KVCANARY_ENGINE_MODEL_QUANTIZATION_H_
