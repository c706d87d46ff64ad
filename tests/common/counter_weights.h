// The counter-based weight generator of tools/make_golden.py (counter_bits, counter_uniform), for fixtures whose
// weights are regenerated rather than stored (llama_realistic, gpt2_text, llama_text: fixture.json "weights"):
// element i of tensor `name` depends on (seed, name, i) only. Every double step below is exact (c has 25 bits, amp
// is a small dyadic), so the one rounding to float32 gives the same bits in any IEEE language or build.
// Header-only, in an anonymous namespace like npy.h (test TUs may be compiled with different ISA flags).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace sqrtdk::test {
namespace {

inline uint64_t fnv1a64(std::string_view s) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001B3ull;
  return h;
}

inline uint64_t mix64(uint64_t z) {  // splitmix64's output function
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// float32 values offset + uniform(-amp, amp): c = 2 * (bits >> 40) - (2^24 - 1), value = float32(offset + c * amp /
// 2^24), bits = mix64(FNV-1a-64(name) ^ seed + (i + 1) * 0x9E3779B97F4A7C15).
inline std::vector<float> counter_uniform(std::string_view name, uint64_t seed, size_t n, double offset, double amp) {
  constexpr uint64_t kGamma = 0x9E3779B97F4A7C15ull;
  const uint64_t key = fnv1a64(name) ^ seed;
  const double step = amp / 16777216.0;  // amp / 2^24
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) {
    const uint64_t bits = mix64(key + (i + 1) * kGamma);
    const int64_t c = 2 * static_cast<int64_t>(bits >> 40) - ((int64_t{1} << 24) - 1);
    out[i] = static_cast<float>(offset + static_cast<double>(c) * step);
  }
  return out;
}

}  // namespace
}  // namespace sqrtdk::test
