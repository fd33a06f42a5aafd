#include "kernels/cpu_kernels.h"

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/reference_kernels.h"
#include "kernels/thread_pool.h"
#include "tests/kernels/random_vector.h"

namespace kvcanary::kernels {
namespace {

using testing::RandomVector;

void ExpectNear(const std::vector<float>& a, const std::vector<float>& b,
                float tol) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_NEAR(a[i], b[i], tol * (1.0f + std::fabs(b[i]))) << "at " << i;
  }
}

struct MatmulShape {
  int n, d, batch;
};

class MatmulTest : public ::testing::TestWithParam<MatmulShape> {};

TEST_P(MatmulTest, MatchesNaiveReference) {
  const auto [n, d, batch] = GetParam();
  const auto w = RandomVector(static_cast<size_t>(n) * d, 1);
  const auto x = RandomVector(static_cast<size_t>(n) * batch, 2);
  std::vector<float> y(static_cast<size_t>(d) * batch), ref(y.size());
  MatmulArgs a{w.data(), x.data(), y.data(), n, d, batch};
  Matmul(a, nullptr);
  reference::Matmul(w.data(), x.data(), ref.data(), n, d, batch);
  ExpectNear(y, ref, 1e-5f);
}

// Shapes of the 260K and 15M models, odd sizes, and n with a tail (172 % 8).
INSTANTIATE_TEST_SUITE_P(
    Shapes, MatmulTest,
    ::testing::Values(MatmulShape{64, 64, 1}, MatmulShape{64, 172, 3},
                      MatmulShape{172, 64, 5}, MatmulShape{288, 768, 9},
                      MatmulShape{7, 13, 2}, MatmulShape{64, 512, 32},
                      MatmulShape{1, 1, 1}));

class MatmulInvarianceTest : public ::testing::TestWithParam<MatmulShape> {};

// Both the cache-resident (blocked) and the streaming (row at a time) paths.
INSTANTIATE_TEST_SUITE_P(Shapes, MatmulInvarianceTest,
                         ::testing::Values(MatmulShape{172, 200, 37},
                                           MatmulShape{288, 768, 37}));

TEST_P(MatmulInvarianceTest, EachRowIsBitwiseIndependentOfBatchAndThreads) {
  const auto [n, d, batch] = GetParam();
  const auto w = RandomVector(static_cast<size_t>(n) * d, 3);
  const auto x = RandomVector(static_cast<size_t>(n) * batch, 4);
  std::vector<float> full(static_cast<size_t>(d) * batch);
  ThreadPool pool(2);
  Matmul({w.data(), x.data(), full.data(), n, d, batch}, &pool);
  for (int b = 0; b < batch; ++b) {
    std::vector<float> single(d);
    Matmul({w.data(), x.data() + b * n, single.data(), n, d, 1}, nullptr);
    ASSERT_EQ(
        0, std::memcmp(single.data(), full.data() + b * d, d * sizeof(float)))
        << "row " << b;
  }
}

TEST(RmsNormTest, MatchesReference) {
  const auto x = RandomVector(288, 5, 3.0f);
  const auto w = RandomVector(288, 6);
  std::vector<float> out(288), ref(288);
  RmsNorm(out.data(), x.data(), w.data(), 288);
  reference::RmsNorm(ref.data(), x.data(), w.data(), 288);
  ExpectNear(out, ref, 1e-5f);
}

TEST(SoftmaxTest, MatchesReferenceAndSumsToOne) {
  auto x = RandomVector(300, 7, 20.0f);
  auto ref = x;
  Softmax(x.data(), 300);
  reference::Softmax(ref.data(), 300);
  ExpectNear(x, ref, 1e-5f);
  double sum = 0;
  for (float v : x) sum += v;
  EXPECT_NEAR(sum, 1.0, 1e-5);
}

TEST(SoftmaxTest, LargeLogitsDoNotOverflow) {
  std::vector<float> x = {1000.0f, 1000.0f, -1000.0f};
  Softmax(x.data(), 3);
  EXPECT_FLOAT_EQ(x[0], 0.5f);
  EXPECT_FLOAT_EQ(x[2], 0.0f);
}

TEST(RopeTest, MatchesReferenceAtManyPositions) {
  for (int pos : {0, 1, 17, 255, 511}) {
    auto q = RandomVector(64, 8), k = RandomVector(32, 9);
    auto qr = q, kr = k;
    Rope(q.data(), k.data(), 64, 32, 8, pos);
    reference::Rope(qr.data(), kr.data(), 64, 32, 8, pos);
    ExpectNear(q, qr, 1e-5f);
    ExpectNear(k, kr, 1e-5f);
  }
}

TEST(RopeTest, TableIsBitwiseEqualToDirectComputation) {
  const auto table = MakeRopeTable(48, 256);
  for (int pos : {0, 3, 100, 255}) {
    auto q = RandomVector(288, 14), k = RandomVector(288, 15);
    auto qt = q, kt = k;
    Rope(q.data(), k.data(), 288, 288, 48, pos);
    RopeFromTable(qt.data(), kt.data(), 288, 288, 48, table.data() + pos * 48);
    EXPECT_EQ(q, qt);
    EXPECT_EQ(k, kt);
  }
}

TEST(RopeTest, PositionZeroIsIdentity) {
  auto q = RandomVector(64, 10), k = RandomVector(32, 11);
  const auto q0 = q, k0 = k;
  Rope(q.data(), k.data(), 64, 32, 8, 0);
  EXPECT_EQ(q, q0);
  EXPECT_EQ(k, k0);
}

TEST(SwiGluTest, MatchesReference) {
  auto hb = RandomVector(172, 12, 4.0f);
  const auto hb2 = RandomVector(172, 13);
  auto ref = hb;
  SwiGlu(hb.data(), hb2.data(), 172);
  reference::SwiGlu(ref.data(), hb2.data(), 172);
  ExpectNear(hb, ref, 1e-5f);
}

TEST(SwiGluTest, AnElementsValueDoesNotDependOnTheCallsSize) {
  // A row of 172 (stories260K's hidden size) alone, and as the second of
  // three rows: the tail of 4 goes through the same lanes as the rest.
  const auto row = RandomVector(172, 14, 6.0f);
  const auto gate = RandomVector(172, 15);
  std::vector<float> alone = row;
  SwiGlu(alone.data(), gate.data(), 172);
  std::vector<float> rows = RandomVector(3 * 172, 16, 6.0f);
  std::vector<float> gates = RandomVector(3 * 172, 17);
  std::copy(row.begin(), row.end(), rows.begin() + 172);
  std::copy(gate.begin(), gate.end(), gates.begin() + 172);
  SwiGlu(rows.data(), gates.data(), 3 * 172);
  EXPECT_EQ(std::vector<float>(rows.begin() + 172, rows.begin() + 344), alone);
}

TEST(SwiGluTest, ExtremeInputsStayFinite) {
  std::vector<float> x = {-200.0f, -88.0f, -0.0f, 0.0f, 88.0f, 200.0f, 1e30f};
  const std::vector<float> gate(x.size(), 2.0f);
  SwiGlu(x.data(), gate.data(), static_cast<int>(x.size()));
  EXPECT_EQ(x[0], 0.0f);  // silu(-200) underflows to (-)0
  EXPECT_NEAR(x[1], 0.0f, 1e-30f);
  EXPECT_EQ(x[2], 0.0f);
  EXPECT_EQ(x[3], 0.0f);
  EXPECT_FLOAT_EQ(x[4], 176.0f);  // silu(x) = x for large x
  EXPECT_FLOAT_EQ(x[5], 400.0f);
  EXPECT_FLOAT_EQ(x[6], 2e30f);
}

TEST(ArgmaxTest, FirstIndexWinsTies) {
  const std::vector<float> x = {1.0f, 3.0f, 2.0f, 3.0f};
  EXPECT_EQ(Argmax(x.data(), 4), 1);
}

// The scan it replaced, the definition of the answer (NaN included).
int ScalarArgmax(const float* x, int size) {
  int best = 0;
  for (int i = 1; i < size; ++i) {
    if (x[i] > x[best]) best = i;
  }
  return best;
}

TEST(ArgmaxTest, AgreesWithTheScalarScanOnTiesZerosNansAndInfinities) {
  std::mt19937 rng(11);
  const float specials[] = {0.0f, -0.0f, NAN, INFINITY, -INFINITY, 2.0f};
  for (int size : {1, 2, 7, 8, 9, 31, 512, 32000}) {
    for (int trial = 0; trial < 50; ++trial) {
      std::vector<float> x(size);
      for (float& v : x) v = static_cast<float>(rng() % 5) - 2.0f;
      for (int k = 0; k < 3; ++k) x[rng() % size] = specials[rng() % 6];
      ASSERT_EQ(Argmax(x.data(), size), ScalarArgmax(x.data(), size))
          << "size " << size << " trial " << trial;
    }
  }
}

TEST(ThreadPoolTest, CoversRangeExactlyOnce) {
  ThreadPool pool(2);
  for (int n : {0, 1, 2, 3, 100, 1001}) {
    std::vector<int> hits(n, 0);
    pool.ParallelFor(n, [&](int b, int e) {
      for (int i = b; i < e; ++i) ++hits[i];
    });
    for (int i = 0; i < n; ++i)
      ASSERT_EQ(hits[i], 1) << "n=" << n << " i=" << i;
  }
}

TEST(ThreadPoolTest, ForkRightAfterConstructionIsNotLost) {
  for (int i = 0; i < 200; ++i) {
    ThreadPool pool(2);
    int sum = 0;
    std::vector<int> parts(2, 0);
    pool.ParallelFor(2, [&](int b, int e) { parts[b] = e - b; });
    for (int p : parts) sum += p;
    ASSERT_EQ(sum, 2);
  }
}

}  // namespace
}  // namespace kvcanary::kernels
