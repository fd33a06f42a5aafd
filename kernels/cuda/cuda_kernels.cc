// Host side of the CUDA kernels: argument checks, device memory, copies, and
// the one place where CUDA runtime errors become absl::Status. The kernels
// themselves are in cuda_kernels.cu, behind cuda_launch.h.
#include "kernels/cuda/cuda_kernels.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <string>
#include <type_traits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/cuda/cuda_launch.h"

namespace kvcanary::kernels {
namespace {

namespace ci = cuda_internal;

// The device reads stamps and block tables straight out of the copied bytes
// through the mirrors in cuda_launch.h: their layout must be exactly that of
// the real types.
static_assert(std::is_trivially_copyable_v<PageStamp>);
static_assert(std::is_trivially_copyable_v<StampIdentity>);
static_assert(std::is_trivially_copyable_v<PageRef>);
static_assert(sizeof(ci::RawIdentity) == sizeof(StampIdentity));
static_assert(offsetof(ci::RawIdentity, request) ==
              offsetof(StampIdentity, request));
static_assert(offsetof(ci::RawIdentity, tenant) ==
              offsetof(StampIdentity, tenant));
static_assert(offsetof(ci::RawIdentity, generation) ==
              offsetof(StampIdentity, generation));
static_assert(sizeof(RequestId) == sizeof(uint64_t));
static_assert(sizeof(TenantId) == sizeof(uint32_t));
static_assert(sizeof(PageGeneration) == sizeof(uint32_t));
static_assert(sizeof(PageId) == sizeof(uint32_t));
static_assert(sizeof(ci::RawStamp) == sizeof(PageStamp));
static_assert(offsetof(ci::RawStamp, magic) == offsetof(PageStamp, magic));
static_assert(offsetof(ci::RawStamp, version) == offsetof(PageStamp, version));
static_assert(offsetof(ci::RawStamp, layer) == offsetof(PageStamp, layer));
static_assert(offsetof(ci::RawStamp, page) == offsetof(PageStamp, page));
static_assert(offsetof(ci::RawStamp, flags) == offsetof(PageStamp, flags));
static_assert(offsetof(ci::RawStamp, owner) == offsetof(PageStamp, owner));
static_assert(offsetof(ci::RawStamp, writer) == offsetof(PageStamp, writer));
static_assert(offsetof(ci::RawStamp, filled) == offsetof(PageStamp, filled));
static_assert(offsetof(ci::RawStamp, prior_filled) ==
              offsetof(PageStamp, prior_filled));
static_assert(offsetof(ci::RawStamp, prior) == offsetof(PageStamp, prior));
static_assert(ci::kRawStampShared == kStampShared);
static_assert(sizeof(ci::RawPageRef) == sizeof(PageRef));
static_assert(offsetof(ci::RawPageRef, page) == offsetof(PageRef, page));
static_assert(offsetof(ci::RawPageRef, generation) ==
              offsetof(PageRef, generation));
static_assert(ci::kRawForeignTenantRead ==
              static_cast<uint32_t>(ViolationKind::kForeignTenantRead));
static_assert(ci::kRawStaleRequestRead ==
              static_cast<uint32_t>(ViolationKind::kStaleRequestRead));
static_assert(ci::kRawUnwrittenRead ==
              static_cast<uint32_t>(ViolationKind::kUnwrittenRead));
static_assert(ci::kRawLateWrite ==
              static_cast<uint32_t>(ViolationKind::kLateWrite));
static_assert(ci::kRawNoTenant == kNoTenant.value());

// Errors that mean "no usable GPU here" rather than "something broke".
bool IsUnavailable(cudaError_t err) {
  switch (err) {
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInitializationError:
    case cudaErrorDevicesUnavailable:
    case cudaErrorInvalidDevice:
    case cudaErrorStubLibrary:
    case cudaErrorSystemDriverMismatch:
    case cudaErrorCompatNotSupportedOnDevice:
    case cudaErrorSystemNotReady:
    case cudaErrorNoKernelImageForDevice:
    case cudaErrorUnsupportedPtxVersion:
      return true;
    default:
      return false;
  }
}

// The one conversion of a CUDA runtime error into a Status.
absl::Status FromCuda(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return absl::OkStatus();
  // Clears the error if it is not sticky, so the next call starts clean.
  (void)cudaGetLastError();
  std::string msg = absl::StrCat("CUDA: ", what, ": ", cudaGetErrorName(err),
                                 " (", cudaGetErrorString(err), ")");
  if (IsUnavailable(err)) return absl::UnavailableError(std::move(msg));
  return absl::InternalError(std::move(msg));
}

#define KVC_CUDA_RETURN_IF_ERROR(expr) RETURN_IF_ERROR(FromCuda((expr), #expr))

ci::RawStamp ToRaw(const PageStamp& s) {
  ci::RawStamp r;
  std::memcpy(&r, &s, sizeof(r));
  return r;
}
ci::RawIdentity ToRaw(const StampIdentity& id) {
  ci::RawIdentity r;
  std::memcpy(&r, &id, sizeof(r));
  return r;
}
PageStamp FromRaw(const ci::RawStamp& r) {
  PageStamp s;
  std::memcpy(static_cast<void*>(&s), &r, sizeof(s));  // trivially copyable
  return s;
}
std::optional<ViolationKind> KindFromRaw(uint32_t kind) {
  if (kind == ci::kRawNoViolation) return std::nullopt;
  return static_cast<ViolationKind>(kind);
}

// Waits for the work queued so far and reports what went wrong in it.
absl::Status Sync(const char* what) {
  return FromCuda(cudaDeviceSynchronize(), what);
}

absl::StatusOr<DeviceBuffer> Upload(const void* src, size_t bytes) {
  ASSIGN_OR_RETURN(DeviceBuffer buf, DeviceBuffer::Allocate(bytes));
  RETURN_IF_ERROR(buf.CopyFromHost(src, bytes));
  return buf;
}

absl::Status ValidateMatmul(const MatmulArgs& a) {
  if (a.n < 0 || a.d < 0 || a.batch < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "matmul: negative shape n=", a.n, " d=", a.d, " batch=", a.batch));
  }
  if (a.d > 0 && a.batch > 0 &&
      (a.y == nullptr || (a.n > 0 && (a.w == nullptr || a.x == nullptr)))) {
    return absl::InvalidArgumentError("matmul: null operand");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CudaAvailable() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return absl::UnavailableError(
        absl::StrCat("CUDA: cudaGetDeviceCount: ", cudaGetErrorName(err), " (",
                     cudaGetErrorString(err), ")"));
  }
  if (count == 0) return absl::UnavailableError("CUDA: no device");
  // Creates the context: catches devices that are listed but unusable.
  const absl::Status init = FromCuda(cudaFree(nullptr), "cudaFree(nullptr)");
  if (!init.ok()) return absl::UnavailableError(init.message());
  return absl::OkStatus();
}

// --- DeviceBuffer ----------------------------------------------------------

absl::StatusOr<DeviceBuffer> DeviceBuffer::Allocate(size_t bytes) {
  DeviceBuffer buf;
  if (bytes == 0) return buf;
  KVC_CUDA_RETURN_IF_ERROR(cudaMalloc(&buf.ptr_, bytes));
  buf.size_ = bytes;
  return buf;
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : ptr_(std::exchange(other.ptr_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    Reset();
    ptr_ = std::exchange(other.ptr_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() { Reset(); }

void DeviceBuffer::Reset() {
  // A failed free (e.g. after a sticky error) cannot be reported from a
  // destructor; clear it so it does not surface in an unrelated call.
  if (ptr_ != nullptr && cudaFree(ptr_) != cudaSuccess) {
    (void)cudaGetLastError();
  }
  ptr_ = nullptr;
  size_ = 0;
}

absl::Status DeviceBuffer::CopyFromHost(const void* src, size_t bytes,
                                        size_t offset) {
  if (offset > size_ || bytes > size_ - offset) {
    return absl::OutOfRangeError(absl::StrCat(
        "device buffer of ", size_, " bytes: copy of ", bytes, " at ", offset));
  }
  if (bytes == 0) return absl::OkStatus();
  return FromCuda(cudaMemcpy(static_cast<char*>(ptr_) + offset, src, bytes,
                             cudaMemcpyHostToDevice),
                  "cudaMemcpy to device");
}

absl::Status DeviceBuffer::CopyToHost(void* dst, size_t bytes,
                                      size_t offset) const {
  if (offset > size_ || bytes > size_ - offset) {
    return absl::OutOfRangeError(absl::StrCat(
        "device buffer of ", size_, " bytes: copy of ", bytes, " at ", offset));
  }
  if (bytes == 0) return absl::OkStatus();
  return FromCuda(cudaMemcpy(dst, static_cast<const char*>(ptr_) + offset,
                             bytes, cudaMemcpyDeviceToHost),
                  "cudaMemcpy to host");
}

// --- Matmul ----------------------------------------------------------------

absl::Status CudaMatmulOnDevice(const MatmulArgs& a) {
  RETURN_IF_ERROR(ValidateMatmul(a));
  if (a.d == 0 || a.batch == 0) return absl::OkStatus();
  KVC_CUDA_RETURN_IF_ERROR(
      ci::LaunchMatmul(a.w, a.x, a.y, a.n, a.d, a.batch, nullptr));
  return Sync("matmul kernel");
}

absl::Status CudaMatmul(const MatmulArgs& a) {
  RETURN_IF_ERROR(ValidateMatmul(a));
  if (a.d == 0 || a.batch == 0) return absl::OkStatus();
  const size_t w_bytes = static_cast<size_t>(a.d) * a.n * sizeof(float);
  const size_t x_bytes = static_cast<size_t>(a.batch) * a.n * sizeof(float);
  const size_t y_bytes = static_cast<size_t>(a.batch) * a.d * sizeof(float);
  if (a.n == 0) {  // empty sums
    std::memset(a.y, 0, y_bytes);
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(DeviceBuffer w, Upload(a.w, w_bytes));
  ASSIGN_OR_RETURN(DeviceBuffer x, Upload(a.x, x_bytes));
  ASSIGN_OR_RETURN(DeviceBuffer y, DeviceBuffer::Allocate(y_bytes));
  MatmulArgs dev = a;
  dev.w = w.as<float>();
  dev.x = x.as<float>();
  dev.y = y.as<float>();
  RETURN_IF_ERROR(CudaMatmulOnDevice(dev));
  return y.CopyToHost(a.y, y_bytes);
}

// --- Paged attention -------------------------------------------------------

namespace {

// Grid and shared-memory limits of the attention launch.
constexpr int kMaxQueriesPerCall = 65535;
constexpr int kMaxHeadDim = 4096;

absl::Status ValidateAttention(const PagedAttentionArgs& a) {
  if (a.first_pos < 0 || a.num_queries < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("paged attention: first_pos=", a.first_pos,
                     " num_queries=", a.num_queries));
  }
  if (a.num_queries > kMaxQueriesPerCall) {
    return absl::InvalidArgumentError(
        absl::StrCat("paged attention: at most ", kMaxQueriesPerCall,
                     " queries per call, got ", a.num_queries));
  }
  if (a.n_heads <= 0 || a.n_kv_heads <= 0 || a.head_dim <= 0 ||
      a.head_dim > kMaxHeadDim || a.n_heads % a.n_kv_heads != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("paged attention: bad heads n_heads=", a.n_heads,
                     " n_kv_heads=", a.n_kv_heads, " head_dim=", a.head_dim));
  }
  if (a.layout.page_tokens <= 0 || a.layout.kv_heads != a.n_kv_heads ||
      a.layout.head_dim != a.head_dim) {
    return absl::InvalidArgumentError(absl::StrCat(
        "paged attention: layout (page_tokens=", a.layout.page_tokens,
        " kv_heads=", a.layout.kv_heads, " head_dim=", a.layout.head_dim,
        ") does not match the heads"));
  }
  const int num_tokens = a.first_pos + a.num_queries;
  const int pages =
      (num_tokens + a.layout.page_tokens - 1) / a.layout.page_tokens;
  if (pages > a.num_block_pages) {
    return absl::InvalidArgumentError(absl::StrCat(
        "paged attention: block table too short: ", a.num_block_pages,
        " pages for ", num_tokens, " tokens of ", a.layout.page_tokens));
  }
  if (num_tokens > 0 && (a.layer_base == nullptr || a.block_table == nullptr)) {
    return absl::InvalidArgumentError("paged attention: null page buffer");
  }
  if (a.num_queries > 0 && (a.q == nullptr || a.out == nullptr)) {
    return absl::InvalidArgumentError("paged attention: null q or out");
  }
  return absl::OkStatus();
}

// Floats of q and of out: (num_queries, n_heads, head_dim).
size_t QueryFloats(const PagedAttentionArgs& a) {
  return static_cast<size_t>(a.num_queries) * a.n_heads * a.head_dim;
}

// The violation the stamp check found on the page of `ref`.
WatermarkViolation ViolationOf(const PagedAttentionArgs& a, const PageRef& ref,
                               const ci::PageCheckResult& result,
                               ViolationKind kind) {
  const PageStamp stamp = FromRaw(result.stamp);
  WatermarkViolation v;
  v.kind = kind;
  v.layer = a.layer;
  v.page = ref.page;
  v.slots_read = result.slots_read;
  v.reader = StampIdentity{a.reader_request, a.reader_tenant, ref.generation};
  // Whose bytes: the writer, or the prior writer for a tail read.
  (void)ClassifyRead(stamp, v.reader, v.slots_read, &v.writer,
                     &v.writer_shared);
  v.owner = stamp.owner;
  v.filled = stamp.filled;
  return v;
}

// Runs the stamp check over the pages of `table` on the device: appends a
// violation per bad page to a.violations (if given); returns how many.
absl::StatusOr<int> CheckStampsOnDevice(const PagedAttentionArgs& a,
                                        const DeviceBuffer& layer,
                                        const DeviceBuffer& table, int pages,
                                        int num_tokens) {
  ASSIGN_OR_RETURN(DeviceBuffer results,
                   DeviceBuffer::Allocate(pages * sizeof(ci::PageCheckResult)));
  ci::StampCheckParams p;
  p.layer_base = layer.as<const char>();
  p.page_bytes = a.layout.page_bytes();
  p.table = table.as<const ci::RawPageRef>();
  p.num_pages = pages;
  p.num_tokens = num_tokens;
  p.page_tokens = a.layout.page_tokens;
  p.reader_request = a.reader_request.value();
  p.reader_tenant = a.reader_tenant.value();
  p.results = results.as<ci::PageCheckResult>();
  KVC_CUDA_RETURN_IF_ERROR(ci::LaunchStampCheck(p, nullptr));
  RETURN_IF_ERROR(Sync("stamp check kernel"));
  std::vector<ci::PageCheckResult> host(pages);
  RETURN_IF_ERROR(results.CopyToHost(host.data(), results.size()));
  int found = 0;
  for (int i = 0; i < pages; ++i) {
    const std::optional<ViolationKind> kind = KindFromRaw(host[i].kind);
    if (!kind.has_value()) continue;
    ++found;
    if (a.violations == nullptr) continue;
    a.violations->push_back(ViolationOf(a, a.block_table[i], host[i], *kind));
  }
  return found;
}

// Attention of a's queries on the device, over the pages of `table` in
// `layer`; copies the result to a.out.
absl::Status AttendOnDevice(const PagedAttentionArgs& a,
                            const DeviceBuffer& layer,
                            const DeviceBuffer& table, int num_tokens) {
  const size_t q_floats = QueryFloats(a);
  ASSIGN_OR_RETURN(DeviceBuffer q, Upload(a.q, q_floats * sizeof(float)));
  ASSIGN_OR_RETURN(DeviceBuffer out,
                   DeviceBuffer::Allocate(q_floats * sizeof(float)));
  ASSIGN_OR_RETURN(
      DeviceBuffer scores,
      DeviceBuffer::Allocate(static_cast<size_t>(a.num_queries) * a.n_heads *
                             num_tokens * sizeof(float)));
  ci::AttentionParams p;
  p.q = q.as<const float>();
  p.out = out.as<float>();
  p.scores = scores.as<float>();
  p.layer_base = layer.as<const char>();
  p.table = table.as<const ci::RawPageRef>();
  p.first_pos = a.first_pos;
  p.num_queries = a.num_queries;
  p.n_heads = a.n_heads;
  p.n_kv_heads = a.n_kv_heads;
  p.head_dim = a.head_dim;
  p.page_tokens = a.layout.page_tokens;
  p.page_bytes = a.layout.page_bytes();
  p.stamp_bytes = KvPageLayout::kStampBytes;
  p.kv_floats = a.layout.kv_floats();
  KVC_CUDA_RETURN_IF_ERROR(ci::LaunchPagedAttention(p, nullptr));
  RETURN_IF_ERROR(Sync("paged attention kernel"));
  return out.CopyToHost(a.out, q_floats * sizeof(float));
}

}  // namespace

absl::Status CudaPagedAttention(const PagedAttentionArgs& a, bool* served) {
  if (served == nullptr) {
    return absl::InvalidArgumentError("paged attention: null `served`");
  }
  *served = false;
  RETURN_IF_ERROR(ValidateAttention(a));
  const int num_tokens = a.first_pos + a.num_queries;
  if (num_tokens == 0) {
    *served = true;
    return absl::OkStatus();
  }
  const int pt = a.layout.page_tokens;
  const int pages = (num_tokens + pt - 1) / pt;

  // The layer buffer up to the highest page read, and the block table: the
  // device addresses pages exactly as the host does.
  uint32_t max_page = 0;
  for (int p = 0; p < pages; ++p) {
    max_page = std::max(max_page, a.block_table[p].page.value());
  }
  const size_t layer_bytes =
      (static_cast<size_t>(max_page) + 1) * a.layout.page_bytes();
  ASSIGN_OR_RETURN(DeviceBuffer layer, Upload(a.layer_base, layer_bytes));
  ASSIGN_OR_RETURN(DeviceBuffer table,
                   Upload(a.block_table, pages * sizeof(PageRef)));

  if (a.mode != WatermarkMode::kOff) {
    ASSIGN_OR_RETURN(const int found,
                     CheckStampsOnDevice(a, layer, table, pages, num_tokens));
    if (found > 0 && a.mode == WatermarkMode::kEnforce) {
      const size_t q_floats = QueryFloats(a);
      if (q_floats > 0) std::memset(a.out, 0, q_floats * sizeof(float));
      return absl::OkStatus();  // *served stays false
    }
  }
  if (a.num_queries == 0) {
    *served = true;
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(AttendOnDevice(a, layer, table, num_tokens));
  *served = true;
  return absl::OkStatus();
}

// --- Stamp classifier ------------------------------------------------------

std::optional<ViolationKind> ClassifyReadLikeDevice(const PageStamp& stamp,
                                                    const StampIdentity& reader,
                                                    uint32_t slots_read) {
  return KindFromRaw(
      ci::ClassifyReadRawOnHost(ToRaw(stamp), ToRaw(reader), slots_read));
}

absl::Status CudaClassifyReads(
    const std::vector<PageStamp>& stamps,
    const std::vector<StampIdentity>& readers,
    const std::vector<uint32_t>& slots_read,
    std::vector<std::optional<ViolationKind>>* kinds) {
  const size_t n = stamps.size();
  if (readers.size() != n || slots_read.size() != n || kinds == nullptr) {
    return absl::InvalidArgumentError("classify: mismatched inputs");
  }
  kinds->clear();
  if (n == 0) return absl::OkStatus();
  std::vector<ci::RawStamp> raw_stamps;
  std::vector<ci::RawIdentity> raw_readers;
  for (size_t i = 0; i < n; ++i) {
    raw_stamps.push_back(ToRaw(stamps[i]));
    raw_readers.push_back(ToRaw(readers[i]));
  }
  ASSIGN_OR_RETURN(DeviceBuffer d_stamps,
                   Upload(raw_stamps.data(), n * sizeof(ci::RawStamp)));
  ASSIGN_OR_RETURN(DeviceBuffer d_readers,
                   Upload(raw_readers.data(), n * sizeof(ci::RawIdentity)));
  ASSIGN_OR_RETURN(DeviceBuffer d_slots,
                   Upload(slots_read.data(), n * sizeof(uint32_t)));
  ASSIGN_OR_RETURN(DeviceBuffer d_kinds,
                   DeviceBuffer::Allocate(n * sizeof(uint32_t)));
  KVC_CUDA_RETURN_IF_ERROR(ci::LaunchClassify(
      d_stamps.as<const ci::RawStamp>(), d_readers.as<const ci::RawIdentity>(),
      d_slots.as<const uint32_t>(), static_cast<int>(n), d_kinds.as<uint32_t>(),
      nullptr));
  RETURN_IF_ERROR(Sync("classify kernel"));
  std::vector<uint32_t> raw(n);
  RETURN_IF_ERROR(d_kinds.CopyToHost(raw.data(), n * sizeof(uint32_t)));
  for (uint32_t k : raw) kinds->push_back(KindFromRaw(k));
  return absl::OkStatus();
}

}  // namespace kvcanary::kernels
