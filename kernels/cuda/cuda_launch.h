// Internal to kvcanary_kernels_cuda: the boundary between the host side
// (cuda_kernels.cc: absl, engine types, every CUDA runtime call) and the
// device side (cuda_kernels.cu: kernels and their launchers only).
//
// cuda_kernels.cu is compiled by nvcc, which is not asked to parse absl or
// the engine headers. So nothing here includes them: the stamp and the block
// table entry are mirrored as plain structs, and cuda_kernels.cc
// static_asserts that the mirrors have exactly the layout of PageStamp and
// PageRef (the device reads stamps straight out of the copied page bytes).
// Do not include this header outside kernels/cuda/.
#ifndef KVCANARY_KERNELS_CUDA_CUDA_LAUNCH_H_
#define KVCANARY_KERNELS_CUDA_CUDA_LAUNCH_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace kvcanary::kernels::cuda_internal {

// Mirror of StampIdentity (common/page_stamp.h).
struct RawIdentity {
  uint64_t request;
  uint32_t tenant;
  uint32_t generation;
};

// Mirror of PageStamp.
struct RawStamp {
  uint32_t magic;
  uint16_t version;
  uint16_t layer;
  uint32_t page;
  uint32_t flags;  // kRawStampShared
  RawIdentity owner;
  RawIdentity writer;
  uint32_t filled;
  uint32_t prior_filled;
  RawIdentity prior;
};

// Mirror of PageRef (kernels/paged_attention.h).
struct RawPageRef {
  uint32_t page;
  uint32_t generation;
};

// Verdicts: 0 is "legitimate", the others are ViolationKind's values.
enum : uint32_t {
  kRawNoViolation = 0,
  kRawForeignTenantRead = 1,
  kRawStaleRequestRead = 2,
  kRawUnwrittenRead = 3,
  kRawLateWrite = 4,
};
constexpr uint32_t kRawNoTenant = 0;
constexpr uint32_t kRawStampShared = 1u;  // kStampShared

// The stamp classifier the device check runs (a __host__ __device__ function
// in cuda_kernels.cu), called on the host. Mirrors ClassifyRead.
uint32_t ClassifyReadRawOnHost(const RawStamp& stamp, const RawIdentity& reader,
                               uint32_t slots_read);

// What the device stamp check found for one block-table entry: the verdict,
// the slots read, and the stamp as the device saw it (for attribution).
struct PageCheckResult {
  uint32_t kind;
  uint32_t slots_read;
  RawStamp stamp;
};

// All pointers below are device pointers. Launchers return the launch error
// (cudaGetLastError); they do not synchronize.

// y (batch, d) = x (batch, n) · Wᵀ, W (d, n).
cudaError_t LaunchMatmul(const float* w, const float* x, float* y, int n, int d,
                         int batch, cudaStream_t stream);

// One thread per entry of table[0, num_pages): classifies the read of that
// page's slots of tokens [0, num_tokens).
struct StampCheckParams {
  const char* layer_base;
  size_t page_bytes;
  const RawPageRef* table;
  int num_pages;
  int num_tokens;
  int page_tokens;
  uint64_t reader_request;
  uint32_t reader_tenant;
  PageCheckResult* results;  // num_pages entries
};
cudaError_t LaunchStampCheck(const StampCheckParams& p, cudaStream_t stream);

// kinds[i] = classification of stamps[i] read by readers[i], slots[i] slots.
cudaError_t LaunchClassify(const RawStamp* stamps, const RawIdentity* readers,
                           const uint32_t* slots, int n, uint32_t* kinds,
                           cudaStream_t stream);

// Causal attention, one thread block per (query, head).
struct AttentionParams {
  const float* q;  // (num_queries, n_heads, head_dim)
  float* out;      // (num_queries, n_heads, head_dim)
  float* scores;   // (num_queries, n_heads, first_pos + num_queries)
  const char* layer_base;
  const RawPageRef* table;
  int first_pos;
  int num_queries;
  int n_heads;
  int n_kv_heads;
  int head_dim;
  int page_tokens;
  size_t page_bytes;
  size_t stamp_bytes;  // offset of K in a page
  size_t kv_floats;    // floats of K (and of V) in a page
};
cudaError_t LaunchPagedAttention(const AttentionParams& p, cudaStream_t stream);

}  // namespace kvcanary::kernels::cuda_internal

#endif  // KVCANARY_KERNELS_CUDA_CUDA_LAUNCH_H_
