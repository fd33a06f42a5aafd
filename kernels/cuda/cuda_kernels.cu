// Device side of the CUDA kernels: kernels and their launchers, nothing else.
// No absl and no engine headers here (see cuda_launch.h); every CUDA runtime
// error is turned into an absl::Status by the host side, cuda_kernels.cc.
#include <cuda_runtime.h>

#include <cmath>

#include "kernels/cuda/cuda_launch.h"

namespace kvcanary::kernels::cuda_internal {
namespace {

// --- Stamp classification --------------------------------------------------

// Mirrors ClassifyRead (common/page_stamp.cc) rule for rule, in the same
// order. Keep the two in step: cuda_kernels_test.cc compares them on every
// kind, on the host and on the device.
__host__ __device__ inline uint32_t ClassifyReadRaw(const RawStamp& stamp,
                                                    const RawIdentity& reader,
                                                    uint32_t slots_read) {
  const RawIdentity& w = stamp.writer;
  if (w.tenant == kRawNoTenant) return kRawUnwrittenRead;
  if (w.tenant != reader.tenant) return kRawForeignTenantRead;
  // SharedAt: the tenant's shared prefix, in this allocation of the page.
  const bool shared =
      (stamp.flags & kRawStampShared) != 0 && w.generation == reader.generation;
  if (w.request != reader.request && !shared) return kRawStaleRequestRead;
  if (w.generation != reader.generation) return kRawLateWrite;
  if (slots_read <= stamp.filled) return kRawNoViolation;
  const RawIdentity& p = stamp.prior;
  if (p.tenant != kRawNoTenant && stamp.prior_filled > stamp.filled) {
    if (p.tenant != reader.tenant) return kRawForeignTenantRead;
    if (p.request != reader.request) return kRawStaleRequestRead;
  }
  return kRawUnwrittenRead;
}

__global__ void StampCheckKernel(StampCheckParams p) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= p.num_pages) return;
  const RawPageRef ref = p.table[i];
  const RawStamp stamp = *reinterpret_cast<const RawStamp*>(
      p.layer_base + static_cast<size_t>(ref.page) * p.page_bytes);
  const int left = p.num_tokens - i * p.page_tokens;
  const uint32_t slots =
      static_cast<uint32_t>(left < p.page_tokens ? left : p.page_tokens);
  const RawIdentity reader{p.reader_request, p.reader_tenant, ref.generation};
  PageCheckResult r;
  r.kind = ClassifyReadRaw(stamp, reader, slots);
  r.slots_read = slots;
  r.stamp = stamp;
  p.results[i] = r;
}

__global__ void ClassifyKernel(const RawStamp* stamps,
                               const RawIdentity* readers,
                               const uint32_t* slots, int n, uint32_t* kinds) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) kinds[i] = ClassifyReadRaw(stamps[i], readers[i], slots[i]);
}

// --- Matmul ----------------------------------------------------------------

// A block computes kMmRows output features for up to kMmBatch rows of x, one
// feature per thread, staging kMmK-wide slices of W and x in shared memory.
// Sized for inference, where the batch is small (decode is 1): every thread
// works whatever the batch. Each output is one sequential chain over k in
// ascending order, so a row's result does not depend on the batch size.
constexpr int kMmRows = 128;
constexpr int kMmBatch = 8;
constexpr int kMmK = 32;

__global__ void __launch_bounds__(kMmRows)
    MatmulKernel(const float* __restrict__ w, const float* __restrict__ x,
                 float* __restrict__ y, int n, int d, int batch) {
  __shared__ float ws[kMmRows][kMmK + 1];  // +1: no bank conflicts on ws[tid]
  __shared__ float xs[kMmBatch][kMmK];
  const int tid = threadIdx.x;
  const int row0 = blockIdx.x * kMmRows;
  const int b0 = blockIdx.y * kMmBatch;
  const int nb = min(kMmBatch, batch - b0);
  float acc[kMmBatch];
#pragma unroll
  for (int r = 0; r < kMmBatch; ++r) acc[r] = 0.0f;

  for (int k0 = 0; k0 < n; k0 += kMmK) {
    const int kn = min(kMmK, n - k0);
    for (int idx = tid; idx < kMmRows * kMmK; idx += kMmRows) {
      const int r = idx / kMmK, c = idx % kMmK;
      const int gr = row0 + r;
      ws[r][c] =
          (gr < d && c < kn) ? w[static_cast<size_t>(gr) * n + k0 + c] : 0.0f;
    }
    for (int idx = tid; idx < kMmBatch * kMmK; idx += kMmRows) {
      const int r = idx / kMmK, c = idx % kMmK;
      xs[r][c] = (r < nb && c < kn)
                     ? x[static_cast<size_t>(b0 + r) * n + k0 + c]
                     : 0.0f;
    }
    __syncthreads();
    for (int c = 0; c < kn; ++c) {
      const float wv = ws[tid][c];
#pragma unroll
      for (int r = 0; r < kMmBatch; ++r) {
        if (r < nb) acc[r] += wv * xs[r][c];
      }
    }
    __syncthreads();
  }
  const int i = row0 + tid;
  if (i >= d) return;
#pragma unroll
  for (int r = 0; r < kMmBatch; ++r) {
    if (r < nb) y[static_cast<size_t>(b0 + r) * d + i] = acc[r];
  }
}

// --- Paged attention -------------------------------------------------------

constexpr int kAttnThreads = 128;  // a power of two (tree reductions)

__device__ float BlockMax(float v, float* red) {
  red[threadIdx.x] = v;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s)
      red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + s]);
    __syncthreads();
  }
  const float r = red[0];
  __syncthreads();
  return r;
}

__device__ float BlockSum(float v, float* red) {
  red[threadIdx.x] = v;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
    __syncthreads();
  }
  const float r = red[0];
  __syncthreads();
  return r;
}

// Block (h, qi): query qi (at position first_pos + qi) of head h against
// tokens [0, first_pos + qi] of kv head h / (n_heads / n_kv_heads). Scores
// are spread over the threads by token, the weighted sum of V by dimension.
// Shared memory: q's head (head_dim floats), then the reduction scratch.
__global__ void __launch_bounds__(kAttnThreads)
    PagedAttentionKernel(AttentionParams p) {
  extern __shared__ float smem[];
  float* q = smem;
  float* red = smem + p.head_dim;
  const int h = blockIdx.x;
  const int qi = blockIdx.y;
  const int tid = threadIdx.x;
  const int hd = p.head_dim;
  const int pos = p.first_pos + qi;
  const int num_tokens = p.first_pos + p.num_queries;
  const size_t q_off = (static_cast<size_t>(qi) * p.n_heads + h) * hd;
  const size_t kv_row = static_cast<size_t>(p.n_kv_heads) * hd;
  const size_t head_off =
      static_cast<size_t>(h / (p.n_heads / p.n_kv_heads)) * hd;
  float* att =
      p.scores + (static_cast<size_t>(qi) * p.n_heads + h) * num_tokens;

  for (int i = tid; i < hd; i += blockDim.x) q[i] = p.q[q_off + i];
  __syncthreads();

  const float scale = sqrtf(static_cast<float>(hd));
  float local_max = -INFINITY;
  for (int t = tid; t <= pos; t += blockDim.x) {
    const char* page =
        p.layer_base +
        static_cast<size_t>(p.table[t / p.page_tokens].page) * p.page_bytes;
    const float* k = reinterpret_cast<const float*>(page + p.stamp_bytes) +
                     (t % p.page_tokens) * kv_row + head_off;
    float score = 0.0f;
    for (int i = 0; i < hd; ++i) score += q[i] * k[i];
    score /= scale;
    att[t] = score;
    local_max = fmaxf(local_max, score);
  }
  const float max_val = BlockMax(local_max, red);

  float local_sum = 0.0f;
  for (int t = tid; t <= pos; t += blockDim.x) {
    const float e = expf(att[t] - max_val);
    att[t] = e;
    local_sum += e;
  }
  const float sum = BlockSum(local_sum, red);  // also orders the att writes

  for (int i = tid; i < hd; i += blockDim.x) {
    float acc = 0.0f;
    for (int t = 0; t <= pos; ++t) {
      const char* page =
          p.layer_base +
          static_cast<size_t>(p.table[t / p.page_tokens].page) * p.page_bytes;
      const float* v = reinterpret_cast<const float*>(page + p.stamp_bytes) +
                       p.kv_floats + (t % p.page_tokens) * kv_row + head_off;
      acc += (att[t] / sum) * v[i];
    }
    p.out[q_off + i] = acc;
  }
}

unsigned Blocks(int n, int per_block) {
  return static_cast<unsigned>((n + per_block - 1) / per_block);
}

}  // namespace

uint32_t ClassifyReadRawOnHost(const RawStamp& stamp, const RawIdentity& reader,
                               uint32_t slots_read) {
  return ClassifyReadRaw(stamp, reader, slots_read);
}

cudaError_t LaunchMatmul(const float* w, const float* x, float* y, int n, int d,
                         int batch, cudaStream_t stream) {
  if (d <= 0 || batch <= 0) return cudaSuccess;
  const dim3 grid(Blocks(d, kMmRows), Blocks(batch, kMmBatch));
  MatmulKernel<<<grid, kMmRows, 0, stream>>>(w, x, y, n, d, batch);
  return cudaGetLastError();
}

cudaError_t LaunchStampCheck(const StampCheckParams& p, cudaStream_t stream) {
  if (p.num_pages <= 0) return cudaSuccess;
  constexpr int kThreads = 128;
  StampCheckKernel<<<Blocks(p.num_pages, kThreads), kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t LaunchClassify(const RawStamp* stamps, const RawIdentity* readers,
                           const uint32_t* slots, int n, uint32_t* kinds,
                           cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  constexpr int kThreads = 128;
  ClassifyKernel<<<Blocks(n, kThreads), kThreads, 0, stream>>>(stamps, readers,
                                                               slots, n, kinds);
  return cudaGetLastError();
}

cudaError_t LaunchPagedAttention(const AttentionParams& p,
                                 cudaStream_t stream) {
  if (p.num_queries <= 0 || p.n_heads <= 0) return cudaSuccess;
  const dim3 grid(static_cast<unsigned>(p.n_heads),
                  static_cast<unsigned>(p.num_queries));
  const size_t smem =
      (static_cast<size_t>(p.head_dim) + kAttnThreads) * sizeof(float);
  PagedAttentionKernel<<<grid, kAttnThreads, smem, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace kvcanary::kernels::cuda_internal
