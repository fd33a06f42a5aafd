#include "kernels/split_k_matmul.h"

#include <cmath>
#include <cstdint>
#include <cstring>

#include "common/check.h"

namespace kvcanary::kernels {
namespace {

// Multiply-adds below which the product stays on the calling thread.
constexpr long kParallelMinWork = 1L << 17;

// w · x over n features: eight accumulators (feature j to j % 8), added
// in a fixed tree, then the tail in order. The same operations whatever
// the call, so every output is bitwise reproducible.
float Dot(const float* w, const float* x, int n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  const int n8 = n & ~7;
  for (int j = 0; j < n8; j += 8) {
    for (int l = 0; l < 8; ++l) acc[l] += w[j + l] * x[j + l];
  }
  float sum = ((acc[0] + acc[1]) + (acc[2] + acc[3])) +
              ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (int j = n8; j < n; ++j) sum += w[j] * x[j];
  return sum;
}

// Output rows [o0, o1) of every batch row.
void OutputRows(const WeightMatrix& w, const float* x, float* y, int batch,
                int splits, int o0, int o1) {
  const int n = w.n(), d = w.d();
  const int chunk = (n + splits - 1) / splits;
  for (int b = 0; b < batch; ++b) {
    const float* xb = x + static_cast<size_t>(b) * n;
    for (int o = o0; o < o1; ++o) {
      const float* wo = w.rows() + static_cast<size_t>(o) * n;
      float total = 0.0f;
      for (int begin = 0; begin < n; begin += chunk) {
        const int end = begin + chunk < n ? begin + chunk : n;
        total += RoundToBf16(Dot(wo + begin, xb + begin, end - begin));
      }
      y[static_cast<size_t>(b) * d + o] = total;
    }
  }
}

}  // namespace

float RoundToBf16(float f) {
  if (std::isnan(f)) return f;
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  u += 0x7fffu + ((u >> 16) & 1u);  // to nearest, ties to even
  u &= 0xffff0000u;
  float r;
  std::memcpy(&r, &u, sizeof(r));
  return r;
}

void SplitKMatmul(const WeightMatrix& w, const float* x, float* y, int batch,
                  int splits, ThreadPool* pool) {
  CHECK(x != y);
  CHECK(splits >= 1 && splits <= 64) << "splits " << splits;
  const long work = static_cast<long>(w.n()) * w.d() * batch;
  const int blocks = w.num_blocks();
  if (pool == nullptr || pool->num_threads() == 1 || blocks < 2 ||
      work < kParallelMinWork) {
    OutputRows(w, x, y, batch, splits, 0, w.d());
    return;
  }
  constexpr int kRows = WeightMatrix::kBlockRows;
  pool->ParallelFor(blocks, [&](int b0, int b1) {
    const int o1 = b1 * kRows < w.d() ? b1 * kRows : w.d();
    OutputRows(w, x, y, batch, splits, b0 * kRows, o1);
  });
}

}  // namespace kvcanary::kernels
