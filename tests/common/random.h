// Reproducible random test inputs shared by the kernel tests.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace sqrtdk::test {

// n floats uniform in [lo, hi) from std::mt19937(seed): the same values on every platform and run.
inline std::vector<float> random_vector(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

}  // namespace sqrtdk::test
