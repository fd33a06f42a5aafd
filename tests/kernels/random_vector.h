// Seeded uniform test inputs for the kernel tests.
#ifndef KVCANARY_TESTS_KERNELS_RANDOM_VECTOR_H_
#define KVCANARY_TESTS_KERNELS_RANDOM_VECTOR_H_

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace kvcanary::kernels::testing {

// n floats uniform in [-scale, scale), the same for the same seed.
inline std::vector<float> RandomVector(size_t n, uint32_t seed,
                                       float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

}  // namespace kvcanary::kernels::testing

#endif  // KVCANARY_TESTS_KERNELS_RANDOM_VECTOR_H_
