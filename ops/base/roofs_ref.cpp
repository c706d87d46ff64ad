// Scalar multiply-add peak loop (the ref ISA's roof): 8 independent scalar accumulators.
#include "ops/base/roofs.h"

namespace sqrtdk::roofs {

float fma_loop_ref(long iterations) {
  const float a = 0.999999f, b = 1e-7f;
  // Distinct seeds and a barrier per iteration, so the compiler can neither merge nor vectorize the chains away.
  float c[8] = {1.0f, 1.001f, 1.002f, 1.003f, 1.004f, 1.005f, 1.006f, 1.007f};
  for (long i = 0; i < iterations; ++i) {
    for (float& x : c) x = x * a + b;  // baseline x86-64 has no FMA: mul + add, 2 flops
    asm volatile("" : "+x"(c[0]), "+x"(c[1]), "+x"(c[2]), "+x"(c[3]), "+x"(c[4]), "+x"(c[5]), "+x"(c[6]), "+x"(c[7]));
  }
  return c[0] + c[1] + c[2] + c[3] + c[4] + c[5] + c[6] + c[7];
}

float read_loop_ref(const float* src, size_t n) {
  float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) s[j] += src[i + j];
  for (; i < n; ++i) s[0] += src[i];
  return s[0] + s[1] + s[2] + s[3] + s[4] + s[5] + s[6] + s[7];
}

// As read_streams_loop_avx512, scalar: `n_streams` parts side by side, 16 floats (one line) of each per round into
// that stream's accumulator, then what the parts leave.
float read_streams_loop_ref(const float* src, size_t n, int n_streams) {
  if (n_streams < 2 || n_streams > 8) return read_loop_ref(src, n);
  constexpr size_t kRound = 16;
  const size_t streams = static_cast<size_t>(n_streams), part = n / streams / kRound * kRound;
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (size_t i = 0; i < part; i += kRound)
    for (size_t s = 0; s < streams; ++s)
      for (size_t j = 0; j < kRound; ++j) acc[s] += src[s * part + i + j];
  float total = 0;
  for (float v : acc) total += v;
  return total + read_loop_ref(src + streams * part, n - streams * part);
}

// Element by element, as the reference row ops run. Negation, not a copy: GCC turns a copy loop into memcpy, whose
// large copies use non-temporal stores, another access pattern than the ops'.
void read_write_loop_ref(const float* src, float* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = -src[i];
}

void read2_write_loop_ref(const float* a, const float* b, float* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = a[i] + b[i];
}

}  // namespace sqrtdk::roofs
