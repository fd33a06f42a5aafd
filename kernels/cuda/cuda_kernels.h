// CUDA versions of kernels::Matmul and kernels::PagedAttention, with the CPU
// kernels as the oracle (tests/gpu/cuda_kernels_test.cc). A plain C++ header:
// no CUDA types, so code built without nvcc can include it. Only available
// when the build has CUDA (KVCANARY_HAVE_CUDA, target kvcanary_kernels_cuda).
//
// Every CUDA runtime error comes back as an absl::Status, never a crash:
// kUnavailable when there is no usable device or driver (including "this
// binary has no code for this GPU"), kInternal for anything else the runtime
// reports. kInvalidArgument is for arguments the CPU kernels would CHECK-fail
// on. All calls are synchronous and use the current device's default stream.
//
// The engine does not use these yet: the model runner runs on the CPU
// kernels. See docs/cuda.md.
#ifndef KVCANARY_KERNELS_CUDA_CUDA_KERNELS_H_
#define KVCANARY_KERNELS_CUDA_CUDA_KERNELS_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/page_stamp.h"
#include "kernels/cpu_kernels.h"
#include "kernels/paged_attention.h"

namespace kvcanary::kernels {

// OK when a CUDA device is usable; otherwise kUnavailable carrying the CUDA
// error string (no driver, no device, ...).
absl::Status CudaAvailable();

// Owns `size()` bytes of device memory; freed on destruction. Move-only.
class DeviceBuffer {
 public:
  static absl::StatusOr<DeviceBuffer> Allocate(size_t bytes);

  DeviceBuffer() = default;
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer();

  void* data() const { return ptr_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  size_t size() const { return size_; }

  // Copies `bytes` between host memory and [offset, offset + bytes) of this
  // buffer. kOutOfRange if that range does not fit.
  absl::Status CopyFromHost(const void* src, size_t bytes, size_t offset = 0);
  absl::Status CopyToHost(void* dst, size_t bytes, size_t offset = 0) const;

 private:
  void Reset();

  void* ptr_ = nullptr;
  size_t size_ = 0;
};

// kernels::Matmul on the device: copies W and x in, y out. `host_args`
// pointers are host memory.
absl::Status CudaMatmul(const MatmulArgs& host_args);

// The same on device memory: `device_args` pointers are device pointers
// (e.g. DeviceBuffer::as<float>()). Waits for the kernel to finish.
absl::Status CudaMatmulOnDevice(const MatmulArgs& device_args);

// kernels::PagedAttention on the device, same semantics: unless mode is kOff,
// the stamps of the pages read are checked on the device (one thread per
// block-table page) and each violation is appended to *host_args.violations
// in block-table order; in kEnforce any violation zeroes host_args.out and
// sets *served = false. Otherwise *served = true and host_args.out holds the
// attention.
//
// Simplicity over speed: each call copies the layer's page buffer, up to and
// including the highest page the block table reads, to the device, and the
// result back. kInvalidArgument where the CPU kernel would CHECK-fail (e.g.
// a block table that does not cover first_pos + num_queries tokens).
absl::Status CudaPagedAttention(const PagedAttentionArgs& host_args,
                                bool* served);

// The stamp classifier the device check uses, for tests of its agreement
// with ClassifyRead: run on the host (no device needed) ...
std::optional<ViolationKind> ClassifyReadLikeDevice(const PageStamp& stamp,
                                                    const StampIdentity& reader,
                                                    uint32_t slots_read);
// ... and on the device: (*kinds)[i] is the verdict for stamps[i], readers[i],
// slots_read[i]. The three vectors must have the same size.
absl::Status CudaClassifyReads(
    const std::vector<PageStamp>& stamps,
    const std::vector<StampIdentity>& readers,
    const std::vector<uint32_t>& slots_read,
    std::vector<std::optional<ViolationKind>>* kinds);

}  // namespace kvcanary::kernels

#endif  // KVCANARY_KERNELS_CUDA_CUDA_KERNELS_H_
