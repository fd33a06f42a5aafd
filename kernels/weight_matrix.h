// A weight matrix prepared once for the CPU matmul of a batch of rows.
//
// Where the build has 16-lane vectors (AVX-512), the matrix is also kept
// packed: blocks of kBlockRows output rows, each stored column by column, so
// one vector holds one input feature of 16 outputs. A batched matmul then
// broadcasts each x value against a whole block and needs no horizontal sums:
// per output it keeps the eight accumulators Matmul() keeps in the lanes of
// one vector (feature j goes to accumulator j % 8, in the order of j), adds
// them in Matmul()'s fixed tree and then the features past the last multiple
// of 8 in order, so every output is bitwise what Matmul() computes, whatever
// the batch, the blocking or the threads (the determinism contract of
// cpu_kernels.h). Other builds compute through Matmul()'s own kernels.
//
// Thread-safety: immutable after construction; the matmuls may run on any
// number of threads at once.
#ifndef KVCANARY_KERNELS_WEIGHT_MATRIX_H_
#define KVCANARY_KERNELS_WEIGHT_MATRIX_H_

#include <cstdlib>
#include <memory>

#include "kernels/thread_pool.h"

namespace kvcanary::kernels {

class WeightMatrix {
 public:
  // Output rows per block: the unit the work is split along.
  static constexpr int kBlockRows = 16;

  WeightMatrix() = default;
  // `w`: (d, n), row-major, f32; must outlive this object. Packs a copy
  // (d rounded up to kBlockRows, times n floats) where the build has 16-lane
  // vectors.
  WeightMatrix(const float* w, int n, int d);

  int n() const { return n_; }  // input features
  int d() const { return d_; }  // output features
  int num_blocks() const { return (d_ + kBlockRows - 1) / kBlockRows; }
  const float* rows() const { return w_; }  // (d, n), row-major
  // Block b: (n, kBlockRows), f32, rows past d zero. Null when not packed.
  const float* packed_block(int b) const {
    return packed_ == nullptr
               ? nullptr
               : packed_.get() + static_cast<size_t>(b) * n_ * kBlockRows;
  }

 private:
  const float* w_ = nullptr;
  int n_ = 0;
  int d_ = 0;
  struct Free {
    void operator()(float* p) const { std::free(p); }
  };
  // (num_blocks, n, kBlockRows), f32, 64-byte aligned; null when not packed.
  std::unique_ptr<float[], Free> packed_;
};

// y = x · Wᵀ for output rows of blocks [block_begin, block_end), on the
// calling thread. x: (batch, n), y: (batch, d), f32; y must not alias x.
// Callers split a batch either way: along blocks (one weight pass in all)
// or along rows of x (each thread its own rows, every block).
void MatmulBlocks(const WeightMatrix& w, const float* x, float* y, int batch,
                  int block_begin, int block_end);

// The whole product; `pool` may be null. Splits along blocks, and only when
// the work pays for a fork.
void Matmul(const WeightMatrix& w, const float* x, float* y, int batch,
            ThreadPool* pool);

}  // namespace kvcanary::kernels

#endif  // KVCANARY_KERNELS_WEIGHT_MATRIX_H_
