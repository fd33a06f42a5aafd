#include "kernels/weight_matrix.h"

#if defined(__AVX512F__)
#include <immintrin.h>
#define KVCANARY_PACKED_MATMUL 1
#endif

#include <algorithm>
#include <cstdlib>

#include "common/check.h"
#include "kernels/cpu_kernels.h"

namespace kvcanary::kernels {
namespace {

// Multiply-adds below which a matmul runs on the calling thread alone (as
// Matmul() in cpu_kernels.cc).
constexpr long kParallelMinWork = 1L << 17;

#ifdef KVCANARY_PACKED_MATMUL
constexpr int kLanes = WeightMatrix::kBlockRows;

// One block's outputs for C rows of x (n floats apart). acc[l][c], lane i:
// output row i's accumulator of the features j with j % 8 == l, exactly the
// lane l Matmul()'s micro-kernel keeps for that output.
template <int C>
void BlockTile(const float* wp, const float* x, int n, float* y, int d,
               int rows) {
  const int n8 = n & ~7;
  __m512 acc[8][C];
  for (int l = 0; l < 8; ++l)
    for (int c = 0; c < C; ++c) acc[l][c] = _mm512_setzero_ps();
  for (int j = 0; j < n8; j += 8) {
    for (int l = 0; l < 8; ++l) {
      const __m512 w = _mm512_load_ps(wp + static_cast<size_t>(j + l) * kLanes);
      for (int c = 0; c < C; ++c) {
        const __m512 xv = _mm512_set1_ps(x[static_cast<size_t>(c) * n + j + l]);
        acc[l][c] = _mm512_fmadd_ps(w, xv, acc[l][c]);
      }
    }
  }
  const __mmask16 mask = static_cast<__mmask16>((1u << rows) - 1);
  for (int c = 0; c < C; ++c) {
    // HorizontalSum()'s tree, ((a0+a1)+(a2+a3)) + ((a4+a5)+(a6+a7)).
    const __m512 lo = _mm512_add_ps(_mm512_add_ps(acc[0][c], acc[1][c]),
                                    _mm512_add_ps(acc[2][c], acc[3][c]));
    const __m512 hi = _mm512_add_ps(_mm512_add_ps(acc[4][c], acc[5][c]),
                                    _mm512_add_ps(acc[6][c], acc[7][c]));
    __m512 sum = _mm512_add_ps(lo, hi);
    if (n8 < n) {
      // The tail in the scalar form Matmul() uses, so that the compiler
      // treats both alike.
      alignas(64) float s[kLanes];
      _mm512_store_ps(s, sum);
      const float* xc = x + static_cast<size_t>(c) * n;
      for (int j = n8; j < n; ++j) {
        const float* col = wp + static_cast<size_t>(j) * kLanes;
        for (int i = 0; i < kLanes; ++i) s[i] += col[i] * xc[j];
      }
      sum = _mm512_load_ps(s);
    }
    _mm512_mask_storeu_ps(y + static_cast<size_t>(c) * d, mask, sum);
  }
}

// Rows [c, c + C) of x against block `b`.
template <int C>
void Tile(const WeightMatrix& w, int b, const float* x, float* y, int c) {
  const int n = w.n(), d = w.d();
  const int rows = d - b * kLanes < kLanes ? d - b * kLanes : kLanes;
  BlockTile<C>(w.packed_block(b), x + static_cast<size_t>(c) * n, n,
               y + static_cast<size_t>(c) * d + b * kLanes, d, rows);
}

void PackedBlocks(const WeightMatrix& w, const float* x, float* y, int batch,
                  int block_begin, int block_end) {
  for (int b = block_begin; b < block_end; ++b) {
    int c = 0;
    for (; c + 3 <= batch; c += 3) Tile<3>(w, b, x, y, c);
    if (batch - c == 2) Tile<2>(w, b, x, y, c);
    if (batch - c == 1) Tile<1>(w, b, x, y, c);
  }
}
#endif

}  // namespace

WeightMatrix::WeightMatrix(const float* w, int n, int d) : w_(w), n_(n), d_(d) {
  CHECK(w != nullptr);
  CHECK_GT(n, 0);
  CHECK_GT(d, 0);
#ifdef KVCANARY_PACKED_MATMUL
  // 64-byte aligned: a block's vectors are whole cache lines (a load
  // straddling two lines costs two).
  const size_t floats = static_cast<size_t>(num_blocks()) * n * kBlockRows;
  packed_.reset(static_cast<float*>(
      std::aligned_alloc(64, (floats * sizeof(float) + 63) / 64 * 64)));
  CHECK(packed_ != nullptr);
  std::fill(packed_.get(), packed_.get() + floats, 0.0f);
  for (int r = 0; r < d; ++r) {
    float* block =
        packed_.get() + static_cast<size_t>(r / kBlockRows) * n * kBlockRows;
    const float* row = w + static_cast<size_t>(r) * n;
    for (int j = 0; j < n; ++j)
      block[static_cast<size_t>(j) * kBlockRows + r % kBlockRows] = row[j];
  }
#endif
}

void MatmulBlocks(const WeightMatrix& w, const float* x, float* y, int batch,
                  int block_begin, int block_end) {
  CHECK(x != y);
  CHECK(0 <= block_begin && block_begin <= block_end &&
        block_end <= w.num_blocks());
#ifdef KVCANARY_PACKED_MATMUL
  PackedBlocks(w, x, y, batch, block_begin, block_end);
#else
  const MatmulArgs args{w.rows(), x, y, w.n(), w.d(), batch};
  const int row_end = block_end * WeightMatrix::kBlockRows;
  MatmulRowRange(args, block_begin * WeightMatrix::kBlockRows,
                 row_end < w.d() ? row_end : w.d());
#endif
}

void Matmul(const WeightMatrix& w, const float* x, float* y, int batch,
            ThreadPool* pool) {
  const long work = static_cast<long>(w.n()) * w.d() * batch;
  const int blocks = w.num_blocks();
  if (pool == nullptr || pool->num_threads() == 1 || blocks < 2 ||
      work < kParallelMinWork) {
    MatmulBlocks(w, x, y, batch, 0, blocks);
    return;
  }
  pool->ParallelFor(
      blocks, [&](int b0, int b1) { MatmulBlocks(w, x, y, batch, b0, b1); });
}

}  // namespace kvcanary::kernels
