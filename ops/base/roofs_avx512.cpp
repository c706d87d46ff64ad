// FMA peak loop for avx512: 10 independent accumulators (FMA latency 4 cycles x 2 pipes = 8 in flight needed; 10
// leaves margin and no register spills). Compiled with avx512 flags only.
// Intrinsics, not xsimd as the kernels: the probes must run at the hardware's rate in every build. In the sanitizer
// build (-O1, where GCC inlines little; intrinsics are always_inline) an xsimd version of this FMA loop measured 2.8
// GFLOP/s on Zen 5 (2026-12-07), and the test that the dot-product peaks stay below 8x / 16x the FMA peak failed.
#include "ops/base/roofs.h"

#include <immintrin.h>

namespace sqrtdk::roofs {

float fma_loop_avx512(long iterations) {
  const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
  // Distinct seeds and an empty asm barrier per iteration: with ten identical chains GCC merges them into one
  // (it did: the loop ran 1 FMA per iteration and the 'peak' came out 25% above the hardware's).
  __m512 c0 = _mm512_set1_ps(1.0f), c1 = _mm512_set1_ps(1.001f), c2 = _mm512_set1_ps(1.002f), c3 = _mm512_set1_ps(1.003f),
         c4 = _mm512_set1_ps(1.004f), c5 = _mm512_set1_ps(1.005f), c6 = _mm512_set1_ps(1.006f), c7 = _mm512_set1_ps(1.007f),
         c8 = _mm512_set1_ps(1.008f), c9 = _mm512_set1_ps(1.009f);
  for (long i = 0; i < iterations; ++i) {
    c0 = _mm512_fmadd_ps(c0, a, b); c1 = _mm512_fmadd_ps(c1, a, b); c2 = _mm512_fmadd_ps(c2, a, b);
    c3 = _mm512_fmadd_ps(c3, a, b); c4 = _mm512_fmadd_ps(c4, a, b); c5 = _mm512_fmadd_ps(c5, a, b);
    c6 = _mm512_fmadd_ps(c6, a, b); c7 = _mm512_fmadd_ps(c7, a, b); c8 = _mm512_fmadd_ps(c8, a, b);
    c9 = _mm512_fmadd_ps(c9, a, b);
    asm volatile("" : "+x"(c0), "+x"(c1), "+x"(c2), "+x"(c3), "+x"(c4), "+x"(c5), "+x"(c6), "+x"(c7),
                 "+x"(c8), "+x"(c9));
  }
  __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(c0, c1), _mm512_add_ps(c2, c3)),
                        _mm512_add_ps(_mm512_add_ps(c4, c5), _mm512_add_ps(_mm512_add_ps(c6, c7), _mm512_add_ps(c8, c9))));
  alignas(64) float lanes[sizeof(__m512) / sizeof(float)];
  _mm512_store_ps(lanes, s);
  return lanes[0];
}

// Sums src[0, n) with 8 independent vector accumulators: two adds per cycle (add latency 4, two pipes), so the
// loop outruns L2 as well as DRAM and the figure is the cache's, not the loop's (4 accumulators capped it at one
// vector load per cycle, below what the L2 can deliver).
float read_loop_avx512(const float* src, size_t n) {
  __m512 s[8];
  for (__m512& v : s) v = _mm512_setzero_ps();
  size_t i = 0;
  for (; i + 8 * 16 <= n; i += 8 * 16)
    for (int j = 0; j < 8; ++j) s[j] = _mm512_add_ps(s[j], _mm512_loadu_ps(src + i + j * 16));
  const __m512 sum = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(s[0], s[1]), _mm512_add_ps(s[2], s[3])),
                                _mm512_add_ps(_mm512_add_ps(s[4], s[5]), _mm512_add_ps(s[6], s[7])));
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, sum);
  float total = 0;
  for (float v : lanes) total += v;
  for (; i < n; ++i) total += src[i];
  return total;
}

// Sums src[0, n) as `n_streams` equal parts read side by side, two lines of each per round (what a decode
// attention does, reading a head's K and V rows and the next head's), then what the parts leave. One stream per
// part is as many prefetch streams as the hardware tracks at once: it read DRAM faster than one stream on the Zen 5
// VM, whose cold decode attention then measured "above" the one-stream roof. Two accumulators per stream: at most
// 16 zmm, none spilled.
namespace {
template <int S>
float read_streams_avx512(const float* src, size_t n) {
  constexpr size_t kRound = 2 * 16;  // floats per stream per round
  const size_t part = n / S / kRound * kRound;
  __m512 acc[2 * S];
  for (__m512& v : acc) v = _mm512_setzero_ps();
  for (size_t i = 0; i < part; i += kRound)
    for (int s = 0; s < S; ++s)
      for (int g = 0; g < 2; ++g)
        acc[2 * s + g] = _mm512_add_ps(acc[2 * s + g], _mm512_loadu_ps(src + s * part + i + g * 16));
  __m512 sum = acc[0];
  for (int j = 1; j < 2 * S; ++j) sum = _mm512_add_ps(sum, acc[j]);
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, sum);
  float total = 0;
  for (float v : lanes) total += v;
  return total + read_loop_avx512(src + S * part, n - S * part);
}
}  // namespace

float read_streams_loop_avx512(const float* src, size_t n, int n_streams) {
  switch (n_streams) {
    case 2: return read_streams_avx512<2>(src, n);
    case 4: return read_streams_avx512<4>(src, n);
    case 8: return read_streams_avx512<8>(src, n);
    default: return read_loop_avx512(src, n);
  }
}

// dst = -src, 4 vectors per round (an exact flip: repeated passes in place never drift into subnormals); in place
// when dst == src. Plain stores, as the row ops': the roof of an op that writes what it read.
void read_write_loop_avx512(const float* src, float* dst, size_t n) {
  const __m512 sign = _mm512_set1_ps(-0.0f);
  size_t i = 0;
  for (; i + 4 * 16 <= n; i += 4 * 16)
    for (int j = 0; j < 4; ++j)
      _mm512_storeu_ps(dst + i + j * 16, _mm512_xor_ps(_mm512_loadu_ps(src + i + j * 16), sign));
  for (; i < n; ++i) dst[i] = -src[i];
}

// dst = a + b, 4 vectors per round (the residual add's and SwiGLU's two reads and one write).
void read2_write_loop_avx512(const float* a, const float* b, float* dst, size_t n) {
  size_t i = 0;
  for (; i + 4 * 16 <= n; i += 4 * 16)
    for (int j = 0; j < 4; ++j)
      _mm512_storeu_ps(dst + i + j * 16,
                       _mm512_add_ps(_mm512_loadu_ps(a + i + j * 16), _mm512_loadu_ps(b + i + j * 16)));
  for (; i < n; ++i) dst[i] = a[i] + b[i];
}

}  // namespace sqrtdk::roofs
