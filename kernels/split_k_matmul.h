// The batch-variant matmul of `--numerics=variant` (docs/exactness.md):
// what a GPU's split-K GEMM does to a healthy server's answers, on the CPU.
//
// Each output's reduction over the n input features is cut into `splits`
// contiguous ranges of ceil(n / splits) features; each range's partial sum
// is rounded to bfloat16 (round to nearest, ties to even), as a GEMM that
// writes its split-K partials in bf16 does, and the partials are added in
// order in f32. The result depends on `splits` and on nothing else: not on
// the batch, the rows beside it or the threads (the engine sets `splits`
// once per step from the step's sequence count, so answers are bitwise the
// same for a given batch shape and differ between shapes). The invariant
// kernels (weight_matrix.h) are untouched by it.
//
// Thread-safety: as Matmul(WeightMatrix): any number of calls at once.
#ifndef KVCANARY_KERNELS_SPLIT_K_MATMUL_H_
#define KVCANARY_KERNELS_SPLIT_K_MATMUL_H_

#include "kernels/thread_pool.h"
#include "kernels/weight_matrix.h"

namespace kvcanary::kernels {

// `f` rounded to the nearest bfloat16, ties to even, as an f32. NaN stays
// NaN; a finite value past bf16's largest rounds to infinity.
float RoundToBf16(float f);

// y = x · Wᵀ with every output's reduction split `splits` ways (1 to 64;
// CHECKed). x: (batch, n), y: (batch, d), f32; y must not alias x. `pool`
// may be null; the split across threads is along outputs only.
void SplitKMatmul(const WeightMatrix& w, const float* x, float* y, int batch,
                  int splits, ThreadPool* pool);

}  // namespace kvcanary::kernels

#endif  // KVCANARY_KERNELS_SPLIT_K_MATMUL_H_
