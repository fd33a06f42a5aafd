// The CUDA kernels against their oracles: reference::Matmul for the matmul,
// the CPU kernels::PagedAttention (itself tested against
// reference::Attention) for paged attention and its watermark check, and
// ClassifyRead for the device's stamp classifier. Tests that need a device
// skip without one; the rest run everywhere.
#include "kernels/cuda/cuda_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <ostream>
#include <random>
#include <sstream>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/paged_attention.h"
#include "kernels/reference_kernels.h"

// First statement of every test that needs a device.
#define SKIP_WITHOUT_CUDA()                                  \
  do {                                                       \
    const ::absl::Status kvc_cuda_status =                   \
        ::kvcanary::kernels::CudaAvailable();                \
    if (!kvc_cuda_status.ok()) {                             \
      GTEST_SKIP() << "no CUDA device: " << kvc_cuda_status; \
    }                                                        \
  } while (0)

namespace kvcanary::kernels {
namespace {

std::vector<float> RandomFloats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1, 1);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// --- Without a device --------------------------------------------------------

TEST(CudaAvailableTest, ReportsUnavailableInsteadOfCrashing) {
  const absl::Status status = CudaAvailable();
  if (status.ok()) GTEST_SKIP() << "a CUDA device is present";
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  EXPECT_FALSE(status.message().empty());
}

TEST(CudaAvailableTest, KernelsReturnUnavailableWithoutDevice) {
  if (CudaAvailable().ok()) GTEST_SKIP() << "a CUDA device is present";
  std::vector<float> w(16, 1.0f), x(4, 1.0f), y(4, 7.0f);
  MatmulArgs a;
  a.w = w.data();
  a.x = x.data();
  a.y = y.data();
  a.n = 4;
  a.d = 4;
  a.batch = 1;
  const absl::Status matmul = CudaMatmul(a);
  EXPECT_EQ(matmul.code(), absl::StatusCode::kUnavailable) << matmul;
  EXPECT_EQ(DeviceBuffer::Allocate(1024).status().code(),
            absl::StatusCode::kUnavailable);
}

// --- The stamp classifier ----------------------------------------------------

struct ClassifyCase {
  PageStamp stamp;
  StampIdentity reader;
  uint32_t slots_read;
};

// Every combination of writer (none, the reader, and each field different),
// filled and slots read around the boundary, for two readers.
std::vector<ClassifyCase> AllClassifyCases() {
  std::vector<ClassifyCase> cases;
  const StampIdentity readers[] = {
      {RequestId(10), TenantId(1), PageGeneration(3)},
      {RequestId(1ull << 40), TenantId(7), PageGeneration(1)}};
  for (const StampIdentity& reader : readers) {
    const TenantId tenants[] = {kNoTenant, reader.tenant,
                                TenantId(reader.tenant.value() + 1)};
    // kReservedRequestId: no longer means anything to the classifier.
    const RequestId requests[] = {kNoRequest, reader.request,
                                  RequestId(reader.request.value() + 1),
                                  kReservedRequestId};
    const PageGeneration gens[] = {
        PageGeneration(0), reader.generation,
        PageGeneration(reader.generation.value() + 1)};
    for (TenantId t : tenants) {
      for (RequestId r : requests) {
        for (PageGeneration g : gens) {
          for (bool shared : {false, true}) {
            for (uint32_t filled : {0u, 2u, 4u}) {
              for (uint32_t slots : {0u, 1u, 2u, 3u, 4u, 5u}) {
                // Prior writers: none, another tenant, another request of
                // the reader's tenant, the reserved id (a kvt1-era shared
                // prefix); prior_filled around filled.
                const StampIdentity priors[] = {
                    StampIdentity{},
                    {RequestId(99), TenantId(reader.tenant.value() + 2),
                     PageGeneration(1)},
                    {RequestId(reader.request.value() + 2), reader.tenant,
                     PageGeneration(1)},
                    {kReservedRequestId, reader.tenant, PageGeneration(1)}};
                for (const StampIdentity& prior : priors) {
                  for (uint32_t prior_filled : {0u, 3u, 5u}) {
                    ClassifyCase c;
                    c.stamp.page = PageId(5);
                    c.stamp.owner = reader;
                    c.stamp.writer = StampIdentity{r, t, g};
                    c.stamp.set_shared(shared);
                    c.stamp.filled = filled;
                    c.stamp.prior = prior;
                    c.stamp.prior_filled = prior_filled;
                    c.reader = reader;
                    c.slots_read = slots;
                    cases.push_back(c);
                  }
                }
              }
            }
          }
        }
      }
    }
  }
  return cases;
}

// The cases must reach every verdict, or agreement proves little.
void ExpectEveryVerdict(const std::vector<ClassifyCase>& cases) {
  bool seen_ok = false;
  bool seen[5] = {};
  for (const ClassifyCase& c : cases) {
    const auto kind = ClassifyRead(c.stamp, c.reader, c.slots_read);
    if (kind.has_value()) {
      seen[static_cast<int>(*kind)] = true;
    } else {
      seen_ok = true;
    }
  }
  EXPECT_TRUE(seen_ok);
  EXPECT_TRUE(seen[static_cast<int>(ViolationKind::kForeignTenantRead)]);
  EXPECT_TRUE(seen[static_cast<int>(ViolationKind::kStaleRequestRead)]);
  EXPECT_TRUE(seen[static_cast<int>(ViolationKind::kUnwrittenRead)]);
  EXPECT_TRUE(seen[static_cast<int>(ViolationKind::kLateWrite)]);
}

std::string CaseString(const ClassifyCase& c) {
  WatermarkViolation v;
  v.slots_read = c.slots_read;
  v.reader = c.reader;
  v.writer = c.stamp.writer;
  v.writer_shared = c.stamp.shared();
  v.owner = c.stamp.owner;
  v.filled = c.stamp.filled;
  return v.DebugString();
}

// Runs without a device: the very function the device runs, compiled for the
// host.
TEST(StampClassifierTest, DeviceRulesAgreeWithClassifyReadOnHost) {
  const auto cases = AllClassifyCases();
  ExpectEveryVerdict(cases);
  // ... and the shared-prefix rule: another request's page, readable only
  // because it is flagged shared.
  int shared_reads = 0;
  for (const ClassifyCase& c : cases) {
    shared_reads += c.stamp.shared() &&
                    c.stamp.writer.tenant == c.reader.tenant &&
                    c.stamp.writer.request != c.reader.request &&
                    !ClassifyRead(c.stamp, c.reader, c.slots_read).has_value();
  }
  EXPECT_GT(shared_reads, 0);
  for (const ClassifyCase& c : cases) {
    EXPECT_EQ(ClassifyReadLikeDevice(c.stamp, c.reader, c.slots_read),
              ClassifyRead(c.stamp, c.reader, c.slots_read))
        << CaseString(c);
  }
}

TEST(StampClassifierTest, DeviceRulesAgreeWithClassifyReadOnDevice) {
  SKIP_WITHOUT_CUDA();
  const auto cases = AllClassifyCases();
  std::vector<PageStamp> stamps;
  std::vector<StampIdentity> readers;
  std::vector<uint32_t> slots;
  for (const ClassifyCase& c : cases) {
    stamps.push_back(c.stamp);
    readers.push_back(c.reader);
    slots.push_back(c.slots_read);
  }
  std::vector<std::optional<ViolationKind>> kinds;
  ASSERT_TRUE(CudaClassifyReads(stamps, readers, slots, &kinds).ok());
  ASSERT_EQ(kinds.size(), cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    const ClassifyCase& c = cases[i];
    EXPECT_EQ(kinds[i], ClassifyRead(c.stamp, c.reader, c.slots_read))
        << CaseString(c);
  }
}

// --- Matmul ------------------------------------------------------------------

struct MatmulShape {
  int d, n, batch;
};
std::ostream& operator<<(std::ostream& os, const MatmulShape& s) {
  return os << s.d << "x" << s.n << "x" << s.batch;
}

class CudaMatmulTest : public ::testing::TestWithParam<MatmulShape> {};

TEST_P(CudaMatmulTest, MatchesReference) {
  SKIP_WITHOUT_CUDA();
  const MatmulShape s = GetParam();
  const auto w = RandomFloats(static_cast<size_t>(s.d) * s.n, 1);
  const auto x = RandomFloats(static_cast<size_t>(s.batch) * s.n, 2);
  std::vector<float> y(static_cast<size_t>(s.batch) * s.d, NAN);
  std::vector<float> ref(y.size());
  MatmulArgs a;
  a.w = w.data();
  a.x = x.data();
  a.y = y.data();
  a.n = s.n;
  a.d = s.d;
  a.batch = s.batch;
  const absl::Status status = CudaMatmul(a);
  ASSERT_TRUE(status.ok()) << status;
  reference::Matmul(w.data(), x.data(), ref.data(), s.n, s.d, s.batch);
  for (int b = 0; b < s.batch; ++b) {
    for (int i = 0; i < s.d; ++i) {
      // A float sum of n terms: within a few ulps of the sum of magnitudes.
      double mag = 0;
      for (int j = 0; j < s.n; ++j) {
        mag +=
            std::fabs(static_cast<double>(w[static_cast<size_t>(i) * s.n + j]) *
                      x[static_cast<size_t>(b) * s.n + j]);
      }
      const size_t k = static_cast<size_t>(b) * s.d + i;
      ASSERT_NEAR(y[k], ref[k], 1e-5 * mag + 1e-6)
          << "row " << b << " out " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaMatmulTest,
                         ::testing::Values(MatmulShape{64, 64, 1},
                                           MatmulShape{288, 768, 9},
                                           MatmulShape{172, 64, 5},
                                           MatmulShape{32000, 288, 2}));

TEST(CudaMatmulDeviceTest, DevicePointersAndBatchInvariance) {
  SKIP_WITHOUT_CUDA();
  constexpr int kD = 300, kN = 200, kBatch = 11;
  const auto w = RandomFloats(kD * kN, 3);
  const auto x = RandomFloats(kBatch * kN, 4);
  auto dw = DeviceBuffer::Allocate(w.size() * sizeof(float));
  auto dx = DeviceBuffer::Allocate(x.size() * sizeof(float));
  auto dy = DeviceBuffer::Allocate(kBatch * kD * sizeof(float));
  ASSERT_TRUE(dw.ok() && dx.ok() && dy.ok());
  ASSERT_TRUE(dw->CopyFromHost(w.data(), w.size() * sizeof(float)).ok());
  ASSERT_TRUE(dx->CopyFromHost(x.data(), x.size() * sizeof(float)).ok());
  MatmulArgs a;
  a.w = dw->as<float>();
  a.x = dx->as<float>();
  a.y = dy->as<float>();
  a.n = kN;
  a.d = kD;
  a.batch = kBatch;
  ASSERT_TRUE(CudaMatmulOnDevice(a).ok());
  std::vector<float> batched(kBatch * kD);
  ASSERT_TRUE(
      dy->CopyToHost(batched.data(), batched.size() * sizeof(float)).ok());
  // Each row alone, through the host-pointer entry point: bit-identical.
  for (int b = 0; b < kBatch; ++b) {
    std::vector<float> row(kD);
    MatmulArgs one;
    one.w = w.data();
    one.x = x.data() + b * kN;
    one.y = row.data();
    one.n = kN;
    one.d = kD;
    one.batch = 1;
    ASSERT_TRUE(CudaMatmul(one).ok());
    for (int i = 0; i < kD; ++i) ASSERT_EQ(row[i], batched[b * kD + i]) << b;
  }
  // Copies outside the buffer are refused, not performed.
  EXPECT_EQ(dy->CopyToHost(batched.data(), dy->size(), 4).code(),
            absl::StatusCode::kOutOfRange);
}

// --- Paged attention ---------------------------------------------------------

constexpr TenantId kAcme{1}, kGlobex{2};
constexpr RequestId kReqA{10}, kReqB{11};
constexpr uint32_t kOwnerGeneration = 3;

struct AttentionShape {
  int n_heads, n_kv_heads, head_dim, page_tokens;
};
std::ostream& operator<<(std::ostream& os, const AttentionShape& s) {
  return os << s.n_heads << "h_" << s.n_kv_heads << "kv_" << s.head_dim << "d_"
            << s.page_tokens << "pt";
}

struct AttentionRun {
  bool served = false;
  std::vector<float> out;
  std::vector<WatermarkViolation> violations;
};

// A layer of pages owned by acme/request A, with a block table in shuffled
// page order; runs the CPU and the CUDA kernel on the same arguments.
class CudaPagedAttentionTest : public ::testing::TestWithParam<AttentionShape> {
 protected:
  static constexpr int kPages = 48;
  static constexpr int kTablePages = 24;

  void SetUp() override { Init(GetParam()); }

  void Init(const AttentionShape& s) {
    shape_ = s;
    layout_.page_tokens = s.page_tokens;
    layout_.kv_heads = s.n_kv_heads;
    layout_.head_dim = s.head_dim;
    buffer_.assign(layout_.page_bytes() * kPages, 0);
    for (int p = 0; p < kPages; ++p) {
      PageStamp* st =
          KvPageLayout::stamp(layout_.page(buffer_.data(), PageId(p)));
      *st = PageStamp();
      st->page = PageId(p);
    }
    std::vector<uint32_t> ids(kPages);
    for (int p = 0; p < kPages; ++p) ids[p] = p;
    std::mt19937 rng(1234);
    std::shuffle(ids.begin(), ids.end(), rng);
    table_.clear();
    for (int i = 0; i < kTablePages; ++i) {
      const PageRef ref{PageId(ids[i]), PageGeneration(kOwnerGeneration)};
      table_.push_back(ref);
      KvPageLayout::stamp(layout_.page(buffer_.data(), ref.page))->owner =
          StampIdentity{kReqA, kAcme, ref.generation};
    }
  }

  // Writes random K/V for tokens [first, first + count) as (tenant, request),
  // stamping with the table's generation plus `generation_delta`.
  void Write(int first, int count, TenantId tenant, RequestId request,
             int generation_delta = 0) {
    const int row = shape_.n_kv_heads * shape_.head_dim;
    const auto k = RandomFloats(static_cast<size_t>(count) * row, 100 + first);
    const auto v = RandomFloats(static_cast<size_t>(count) * row, 200 + first);
    for (int i = 0; i < count; ++i) {
      const int pos = first + i;
      const PageRef ref = table_[pos / shape_.page_tokens];
      const StampIdentity writer{
          request, tenant,
          PageGeneration(ref.generation.value() + generation_delta)};
      WriteKvRow(buffer_.data(), layout_, ref, pos % shape_.page_tokens,
                 k.data() + static_cast<size_t>(i) * row,
                 v.data() + static_cast<size_t>(i) * row, writer, 0, nullptr);
    }
  }

  PagedAttentionArgs Args(int first_pos, int num_queries, WatermarkMode mode) {
    q_ = RandomFloats(
        static_cast<size_t>(num_queries) * shape_.n_heads * shape_.head_dim, 7);
    PagedAttentionArgs a;
    a.q = q_.data();
    a.first_pos = first_pos;
    a.num_queries = num_queries;
    a.n_heads = shape_.n_heads;
    a.n_kv_heads = shape_.n_kv_heads;
    a.head_dim = shape_.head_dim;
    a.layer_base = buffer_.data();
    a.layout = layout_;
    a.block_table = table_.data();
    a.num_block_pages = static_cast<int>(table_.size());
    a.layer = 5;
    a.mode = mode;
    a.reader_tenant = kAcme;
    a.reader_request = kReqA;
    return a;
  }

  AttentionRun RunCpu(PagedAttentionArgs a) {
    AttentionRun r;
    r.out.assign(q_.size(), 1.0f);
    a.out = r.out.data();
    a.violations = &r.violations;
    r.served = PagedAttention(a);
    return r;
  }

  AttentionRun RunCuda(PagedAttentionArgs a) {
    AttentionRun r;
    r.out.assign(q_.size(), 1.0f);
    a.out = r.out.data();
    a.violations = &r.violations;
    const absl::Status status = CudaPagedAttention(a, &r.served);
    EXPECT_TRUE(status.ok()) << status;
    return r;
  }

  // Runs both and expects the same verdicts, records and (when served)
  // output.
  void ExpectAgree(int first_pos, int num_queries, WatermarkMode mode) {
    const auto a = Args(first_pos, num_queries, mode);
    const AttentionRun cpu = RunCpu(a);
    const AttentionRun gpu = RunCuda(a);
    EXPECT_EQ(gpu.served, cpu.served);
    ExpectSameViolations(cpu.violations, gpu.violations);
    ASSERT_EQ(gpu.out.size(), cpu.out.size());
    for (size_t i = 0; i < cpu.out.size(); ++i) {
      ASSERT_NEAR(gpu.out[i], cpu.out[i], 2e-5f) << "element " << i;
    }
  }

  static void ExpectSameViolations(const std::vector<WatermarkViolation>& cpu,
                                   const std::vector<WatermarkViolation>& gpu) {
    ASSERT_EQ(gpu.size(), cpu.size());
    for (size_t i = 0; i < cpu.size(); ++i) {
      SCOPED_TRACE(cpu[i].DebugString());
      EXPECT_EQ(gpu[i].kind, cpu[i].kind);
      EXPECT_EQ(gpu[i].layer, cpu[i].layer);
      EXPECT_EQ(gpu[i].page, cpu[i].page);
      EXPECT_EQ(gpu[i].slots_read, cpu[i].slots_read);
      EXPECT_EQ(gpu[i].reader, cpu[i].reader);
      EXPECT_EQ(gpu[i].writer, cpu[i].writer);
      EXPECT_EQ(gpu[i].owner, cpu[i].owner);
      EXPECT_EQ(gpu[i].filled, cpu[i].filled);
    }
  }

  // The kinds found by the CPU kernel in detect mode.
  std::vector<ViolationKind> CpuKinds(int first_pos, int num_queries) {
    std::vector<ViolationKind> kinds;
    for (const auto& v :
         RunCpu(Args(first_pos, num_queries, WatermarkMode::kDetect))
             .violations)
      kinds.push_back(v.kind);
    return kinds;
  }

  // Detect: both serve and agree. Enforce: both refuse with the same
  // records, and the CUDA kernel zeroes the output.
  void ExpectViolationAgreement(int first_pos, int num_queries) {
    {
      SCOPED_TRACE("detect");
      ExpectAgree(first_pos, num_queries, WatermarkMode::kDetect);
    }
    {
      SCOPED_TRACE("enforce");
      const auto a = Args(first_pos, num_queries, WatermarkMode::kEnforce);
      const AttentionRun cpu = RunCpu(a);
      const AttentionRun gpu = RunCuda(a);
      EXPECT_FALSE(cpu.served);
      EXPECT_FALSE(gpu.served);
      ExpectSameViolations(cpu.violations, gpu.violations);
      for (float x : gpu.out) ASSERT_EQ(x, 0.0f);
    }
  }

  int pt() const { return shape_.page_tokens; }

  AttentionShape shape_;
  KvPageLayout layout_;
  std::vector<char> buffer_;
  std::vector<PageRef> table_;
  std::vector<float> q_;
};

// Runs without a device: argument errors are found before any CUDA call.
TEST_P(CudaPagedAttentionTest, ShortBlockTableIsInvalidArgument) {
  auto a = Args(0, 1, WatermarkMode::kEnforce);
  a.num_block_pages = 0;
  std::vector<float> out(q_.size());
  a.out = out.data();
  bool served = true;
  EXPECT_EQ(CudaPagedAttention(a, &served).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(served);
}

TEST_P(CudaPagedAttentionTest, DecodeMatchesCpu) {
  SKIP_WITHOUT_CUDA();
  const int tokens = 5 * pt() + 3;
  Write(0, tokens, kAcme, kReqA);
  ExpectAgree(tokens - 1, 1, WatermarkMode::kEnforce);
  // Every decode position of the first pages, including page boundaries.
  for (int pos = 0; pos < 2 * pt() + 1; ++pos) {
    SCOPED_TRACE(pos);
    ExpectAgree(pos, 1, WatermarkMode::kEnforce);
  }
}

TEST_P(CudaPagedAttentionTest, PrefillMatchesCpu) {
  SKIP_WITHOUT_CUDA();
  const int tokens = 4 * pt() + 1;
  Write(0, tokens, kAcme, kReqA);
  ExpectAgree(0, tokens, WatermarkMode::kEnforce);  // whole prompt
  ExpectAgree(pt() + 1, tokens - pt() - 1, WatermarkMode::kDetect);  // a chunk
}

TEST_P(CudaPagedAttentionTest, LongContextMatchesCpu) {
  SKIP_WITHOUT_CUDA();
  const int tokens = kTablePages * pt();
  Write(0, tokens, kAcme, kReqA);
  ExpectAgree(tokens - 1, 1, WatermarkMode::kEnforce);
  ExpectAgree(tokens - 7, 7, WatermarkMode::kOff);
}

TEST_P(CudaPagedAttentionTest, ForeignTenantReadAgrees) {
  SKIP_WITHOUT_CUDA();
  Write(0, 3 * pt(), kGlobex, RequestId(99));
  ASSERT_EQ(CpuKinds(3 * pt() - 1, 1),
            std::vector<ViolationKind>(3, ViolationKind::kForeignTenantRead));
  ExpectViolationAgreement(3 * pt() - 1, 1);
}

TEST_P(CudaPagedAttentionTest, StaleRequestReadAgrees) {
  SKIP_WITHOUT_CUDA();
  Write(0, pt(), kAcme, kReqB);
  ASSERT_EQ(CpuKinds(pt() - 1, 1),
            std::vector<ViolationKind>{ViolationKind::kStaleRequestRead});
  ExpectViolationAgreement(pt() - 1, 1);
}

TEST_P(CudaPagedAttentionTest, ReadPastFilledIsUnwrittenAndAgrees) {
  SKIP_WITHOUT_CUDA();
  Write(0, pt() + 1, kAcme, kReqA);  // the second page has 1 slot
  ASSERT_EQ(CpuKinds(pt(), 3),
            std::vector<ViolationKind>{ViolationKind::kUnwrittenRead});
  ExpectViolationAgreement(pt(), 3);
}

TEST_P(CudaPagedAttentionTest, NeverWrittenPageIsUnwrittenAndAgrees) {
  SKIP_WITHOUT_CUDA();
  ASSERT_EQ(CpuKinds(0, 1),
            std::vector<ViolationKind>{ViolationKind::kUnwrittenRead});
  ExpectViolationAgreement(0, 1);
}

TEST_P(CudaPagedAttentionTest, LateWriteAgrees) {
  SKIP_WITHOUT_CUDA();
  Write(0, 2 * pt(), kAcme, kReqA);
  Write(pt(), pt(), kAcme, kReqA, /*generation_delta=*/-1);  // landed late
  ASSERT_EQ(CpuKinds(2 * pt() - 1, 1),
            std::vector<ViolationKind>{ViolationKind::kLateWrite});
  ExpectViolationAgreement(2 * pt() - 1, 1);
}

TEST_P(CudaPagedAttentionTest, MixedViolationsComeInBlockTableOrder) {
  SKIP_WITHOUT_CUDA();
  Write(0, pt(), kAcme, kReqA);                   // page 0: clean
  Write(pt(), pt(), kAcme, kReqA, -1);            // page 1: late write
  Write(2 * pt(), pt(), kGlobex, RequestId(99));  // page 2: foreign
  Write(3 * pt(), pt(), kAcme, kReqA);            // page 3: clean
  Write(4 * pt(), pt(), kAcme, kReqB);            // page 4: stale request
  Write(5 * pt(), 1, kAcme, kReqA);               // page 5: 1 of 3 slots
  const int first_pos = 5 * pt();
  ASSERT_EQ(
      CpuKinds(first_pos, 3),
      (std::vector<ViolationKind>{
          ViolationKind::kLateWrite, ViolationKind::kForeignTenantRead,
          ViolationKind::kStaleRequestRead, ViolationKind::kUnwrittenRead}));
  ExpectViolationAgreement(first_pos, 3);
}

TEST_P(CudaPagedAttentionTest, OffModeChecksNothingAndStillComputes) {
  SKIP_WITHOUT_CUDA();
  Write(0, 2 * pt(), kGlobex, RequestId(99));
  const auto a = Args(2 * pt() - 1, 1, WatermarkMode::kOff);
  const AttentionRun gpu = RunCuda(a);
  EXPECT_TRUE(gpu.served);
  EXPECT_TRUE(gpu.violations.empty());
  ExpectAgree(2 * pt() - 1, 1, WatermarkMode::kOff);
}

TEST_P(CudaPagedAttentionTest, EnforceZeroesOutput) {
  SKIP_WITHOUT_CUDA();
  Write(0, 2 * pt(), kAcme, kReqA);
  Write(pt(), 1, kGlobex, RequestId(99));  // one foreign row on page 1
  const auto a = Args(2 * pt() - 2, 2, WatermarkMode::kEnforce);
  const AttentionRun gpu = RunCuda(a);
  EXPECT_FALSE(gpu.served);
  ASSERT_EQ(gpu.violations.size(), 1u);
  EXPECT_EQ(gpu.violations[0].kind, ViolationKind::kForeignTenantRead);
  EXPECT_EQ(gpu.violations[0].page, table_[1].page);
  ASSERT_EQ(gpu.out.size(), q_.size());
  for (float x : gpu.out) EXPECT_EQ(x, 0.0f);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaPagedAttentionTest,
    ::testing::Values(AttentionShape{8, 4, 8, 4},    // the CPU test's GQA shape
                      AttentionShape{6, 6, 48, 16},  // stories15M-like MHA
                      AttentionShape{8, 2, 64, 16},  // GQA, group of 4
                      AttentionShape{4, 1, 160, 5}),  // MQA, head_dim > threads
    [](const ::testing::TestParamInfo<AttentionShape>& info) {
      std::ostringstream os;
      os << info.param;
      return os.str();
    });

}  // namespace
}  // namespace kvcanary::kernels
