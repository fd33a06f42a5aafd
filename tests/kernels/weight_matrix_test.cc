#include "kernels/weight_matrix.h"

#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu_kernels.h"
#include "kernels/thread_pool.h"
#include "tests/kernels/random_vector.h"

namespace kvcanary::kernels {
namespace {

using testing::RandomVector;

struct Shape {
  int n, d, batch;
};

class WeightMatrixTest : public ::testing::TestWithParam<Shape> {};

// The shapes of both models, n with a tail (172 % 8, 13 % 8), d that is no
// multiple of a block, and batches that leave every remainder of a group.
INSTANTIATE_TEST_SUITE_P(Shapes, WeightMatrixTest,
                         ::testing::Values(Shape{64, 64, 32}, Shape{64, 172, 7},
                                           Shape{172, 64, 37},
                                           Shape{288, 768, 5},
                                           Shape{768, 288, 2},
                                           Shape{288, 1000, 4}, Shape{7, 13, 3},
                                           Shape{1, 1, 1}, Shape{13, 40, 1}));

// Every output is bitwise Matmul()'s: the packed kernel keeps its arithmetic.
TEST_P(WeightMatrixTest, IsBitwiseMatmul) {
  const auto [n, d, batch] = GetParam();
  const auto w = RandomVector(static_cast<size_t>(n) * d, 1);
  const auto x = RandomVector(static_cast<size_t>(n) * batch, 2);
  std::vector<float> want(static_cast<size_t>(d) * batch), got(want.size());
  Matmul(MatmulArgs{w.data(), x.data(), want.data(), n, d, batch}, nullptr);
  const WeightMatrix m(w.data(), n, d);
  Matmul(m, x.data(), got.data(), batch, nullptr);
  ASSERT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * 4));
}

// Split along blocks on two threads, or one row of x at a time: the same
// bits.
TEST_P(WeightMatrixTest, IsIndependentOfBatchBlocksAndThreads) {
  const auto [n, d, batch] = GetParam();
  const auto w = RandomVector(static_cast<size_t>(n) * d, 3);
  const auto x = RandomVector(static_cast<size_t>(n) * batch, 4);
  const WeightMatrix m(w.data(), n, d);
  std::vector<float> full(static_cast<size_t>(d) * batch);
  ThreadPool pool(2);
  Matmul(m, x.data(), full.data(), batch, &pool);
  for (int b = 0; b < batch; ++b) {
    std::vector<float> row(d);
    for (int block = 0; block < m.num_blocks(); ++block)
      MatmulBlocks(m, x.data() + static_cast<size_t>(b) * n, row.data(), 1,
                   block, block + 1);
    ASSERT_EQ(0,
              std::memcmp(row.data(), full.data() + static_cast<size_t>(b) * d,
                          d * sizeof(float)))
        << "row " << b;
  }
}

}  // namespace
}  // namespace kvcanary::kernels
