#include "kernels/split_k_matmul.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/thread_pool.h"
#include "kernels/weight_matrix.h"
#include "tests/kernels/random_vector.h"

namespace kvcanary::kernels {
namespace {

using testing::RandomVector;

TEST(RoundToBf16Test, RoundsToNearestWithTiesToEven) {
  const float ulp = std::ldexp(1.0f, -7);  // bf16's step just above 1
  EXPECT_EQ(RoundToBf16(1.0f), 1.0f);
  EXPECT_EQ(RoundToBf16(1.0f + ulp), 1.0f + ulp);
  EXPECT_EQ(RoundToBf16(1.0f + 0.25f * ulp), 1.0f);
  EXPECT_EQ(RoundToBf16(1.0f + 0.75f * ulp), 1.0f + ulp);
  EXPECT_EQ(RoundToBf16(1.0f + 0.5f * ulp), 1.0f);  // tie: to even
  EXPECT_EQ(RoundToBf16(1.0f + 1.5f * ulp), 1.0f + 2 * ulp);
  EXPECT_EQ(RoundToBf16(-1.0f - 0.75f * ulp), -1.0f - ulp);
  EXPECT_EQ(RoundToBf16(0.0f), 0.0f);
  EXPECT_TRUE(std::isnan(RoundToBf16(std::nanf(""))));
  EXPECT_EQ(RoundToBf16(std::numeric_limits<float>::max()),
            std::numeric_limits<float>::infinity());
  EXPECT_EQ(RoundToBf16(std::numeric_limits<float>::infinity()),
            std::numeric_limits<float>::infinity());
}

struct Case {
  int n, d, batch;
};

class SplitKMatmulTest : public ::testing::TestWithParam<Case> {};

// stories260K's shapes (64, 172 with a tail), the 15M shape's, and inputs
// shorter than the split count.
INSTANTIATE_TEST_SUITE_P(Shapes, SplitKMatmulTest,
                         ::testing::Values(Case{64, 64, 9}, Case{172, 64, 5},
                                           Case{64, 512, 3}, Case{288, 768, 4},
                                           Case{7, 13, 3}, Case{1, 1, 1}));

// One split: every output is one partial, so it is a bf16 value; the
// product is the f32 one to bf16's precision at every split count.
TEST_P(SplitKMatmulTest, IsTheProductToBf16Precision) {
  const auto [n, d, batch] = GetParam();
  const std::vector<float> wv = RandomVector(static_cast<size_t>(d) * n, 1);
  const std::vector<float> x = RandomVector(static_cast<size_t>(batch) * n, 2);
  const WeightMatrix w(wv.data(), n, d);
  std::vector<float> y(static_cast<size_t>(batch) * d);
  for (int splits : {1, 2, 4, 8}) {
    SplitKMatmul(w, x.data(), y.data(), batch, splits, nullptr);
    for (int b = 0; b < batch; ++b) {
      for (int o = 0; o < d; ++o) {
        double exact = 0, magnitude = 0;
        for (int j = 0; j < n; ++j) {
          const double p = static_cast<double>(wv[o * n + j]) * x[b * n + j];
          exact += p;
          magnitude += std::fabs(p);
        }
        const float got = y[static_cast<size_t>(b) * d + o];
        if (splits == 1) {
          EXPECT_EQ(RoundToBf16(got), got);
        }
        EXPECT_NEAR(got, exact, splits * magnitude * std::ldexp(1.0, -8) + 1e-6)
            << "splits " << splits << " row " << b << " output " << o;
      }
    }
  }
}

// A row's outputs do not depend on the rows beside it or on the threads.
TEST_P(SplitKMatmulTest, IsBitwiseTheSameAloneInABatchAndOnThreads) {
  const auto [n, d, batch] = GetParam();
  const std::vector<float> wv = RandomVector(static_cast<size_t>(d) * n, 3);
  const std::vector<float> x = RandomVector(static_cast<size_t>(batch) * n, 4);
  const WeightMatrix w(wv.data(), n, d);
  ThreadPool pool(4);
  for (int splits : {1, 2, 8}) {
    std::vector<float> together(static_cast<size_t>(batch) * d);
    std::vector<float> threaded(together.size());
    SplitKMatmul(w, x.data(), together.data(), batch, splits, nullptr);
    SplitKMatmul(w, x.data(), threaded.data(), batch, splits, &pool);
    EXPECT_EQ(std::memcmp(together.data(), threaded.data(),
                          together.size() * sizeof(float)),
              0);
    for (int b = 0; b < batch; ++b) {
      std::vector<float> alone(d);
      SplitKMatmul(w, x.data() + static_cast<size_t>(b) * n, alone.data(), 1,
                   splits, nullptr);
      EXPECT_EQ(std::memcmp(alone.data(),
                            together.data() + static_cast<size_t>(b) * d,
                            d * sizeof(float)),
                0)
          << "row " << b << " splits " << splits;
    }
  }
}

// What makes it batch-variant: each split count its own low bits.
TEST(SplitKMatmulTest, EverySplitCountGivesOtherLowBits) {
  const int n = 172, d = 64;
  const std::vector<float> wv = RandomVector(static_cast<size_t>(d) * n, 5);
  const std::vector<float> x = RandomVector(n, 6);
  const WeightMatrix w(wv.data(), n, d);
  std::vector<std::vector<float>> y;
  for (int splits : {1, 2, 4, 8}) {
    y.emplace_back(d);
    SplitKMatmul(w, x.data(), y.back().data(), 1, splits, nullptr);
  }
  for (size_t a = 0; a < y.size(); ++a) {
    for (size_t b = a + 1; b < y.size(); ++b) {
      int differing = 0;
      for (int o = 0; o < d; ++o) differing += y[a][o] != y[b][o];
      EXPECT_GT(differing, d / 2)
          << "split counts " << (1 << a) << " and " << (1 << b);
    }
  }
}

TEST(SplitKMatmulDeathTest, ASplitCountOutOfRangeIsABug) {
  const std::vector<float> wv(4, 1.0f), x(2, 1.0f);
  std::vector<float> y(2);
  const WeightMatrix w(wv.data(), 2, 2);
  EXPECT_DEATH(SplitKMatmul(w, x.data(), y.data(), 1, 0, nullptr), "splits");
  EXPECT_DEATH(SplitKMatmul(w, x.data(), y.data(), 1, 65, nullptr), "splits");
}

}  // namespace
}  // namespace kvcanary::kernels
