// CPU kernels of the llama forward pass. Plain-struct arguments, no engine
// types. Each has a naive reference in reference_kernels.h that is the oracle.
//
// Determinism contract (what makes batch invariance exact): every output
// element is computed by the same sequence of floating-point operations
// whatever the batch size, the row blocking or the number of threads. Work is
// split across threads only along independent outputs, never along a
// reduction.
#ifndef KVCANARY_KERNELS_CPU_KERNELS_H_
#define KVCANARY_KERNELS_CPU_KERNELS_H_

#include <cstddef>
#include <vector>

#include "kernels/thread_pool.h"

namespace kvcanary::kernels {

// y = x · Wᵀ for a batch of rows.
struct MatmulArgs {
  const float* w = nullptr;  // (d, n), row-major, f32
  const float* x = nullptr;  // (batch, n), f32
  float* y = nullptr;        // (batch, d), f32; must not alias x
  int n = 0;                 // input features
  int d = 0;                 // output features
  int batch = 0;             // rows of x
};
// `pool` may be null (single thread). Forks only when the work pays for it.
void Matmul(const MatmulArgs& args, ThreadPool* pool);
// Output rows [row_begin, row_end) of the same product, on the calling
// thread: bitwise what Matmul() writes there.
void MatmulRowRange(const MatmulArgs& args, int row_begin, int row_end);

// out = weight * x / sqrt(mean(x²) + 1e-5), as llama2.c. out may alias x.
void RmsNorm(float* out, const float* x, const float* weight, int size);

// In-place numerically stable softmax over x[0, size).
void Softmax(float* x, int size);

// Rotary embedding of one row at position `pos`, in place, llama2.c's
// formulation: pairs (i, i+1) of q (dim) and of k (kv_dim) rotated by
// pos / 10000^((i % head_dim) / head_dim).
void Rope(float* q, float* k, int dim, int kv_dim, int head_dim, int pos);

// The same rotation with the angles precomputed: row `pos` of the table holds
// head_dim/2 (cos, sin) pairs, bitwise equal to what Rope() computes.
// Table: (seq_len, head_dim), f32.
std::vector<float> MakeRopeTable(int head_dim, int seq_len);
void RopeFromTable(float* q, float* k, int dim, int kv_dim, int head_dim,
                   const float* row);

// hb[i] = silu(hb[i]) * hb2[i] for i in [0, size).
void SwiGlu(float* hb, const float* hb2, int size);

// y[i] += x[i].
void AddInPlace(float* y, const float* x, int size);

// Index of the largest value; the first one on ties.
int Argmax(const float* x, int size);

}  // namespace kvcanary::kernels

#endif  // KVCANARY_KERNELS_CPU_KERNELS_H_
