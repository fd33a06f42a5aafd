// Naive reference kernels: the oracle the optimised CPU kernels (and the CUDA
// ones) are tested against. Written for clarity, accumulate in double.
#ifndef KVCANARY_KERNELS_REFERENCE_KERNELS_H_
#define KVCANARY_KERNELS_REFERENCE_KERNELS_H_

#include <vector>

namespace kvcanary::kernels::reference {

// y (batch, d) = x (batch, n) · Wᵀ, W (d, n).
void Matmul(const float* w, const float* x, float* y, int n, int d, int batch);
void RmsNorm(float* out, const float* x, const float* weight, int size);
void Softmax(float* x, int size);
// Rotates pairs with cos/sin computed in double.
void Rope(float* q, float* k, int dim, int kv_dim, int head_dim, int pos);
void SwiGlu(float* hb, const float* hb2, int size);
// Causal attention for one query at position `pos` over contiguous keys and
// values: keys/values (pos + 1, n_kv_heads, head_dim); q, out (n_heads,
// head_dim).
void Attention(const float* q, const float* keys, const float* values,
               float* out, int pos, int n_heads, int n_kv_heads, int head_dim);

}  // namespace kvcanary::kernels::reference

#endif  // KVCANARY_KERNELS_REFERENCE_KERNELS_H_
