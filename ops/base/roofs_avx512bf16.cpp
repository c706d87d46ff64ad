// BF16 dot-product peak loop (AVX512-BF16): 12 independent vdpbf16ps chains. Compiled with avx512_bf16 flags only.
#include "ops/base/roofs.h"

#include <immintrin.h>

namespace sqrtdk::roofs {

float bf16_dot_loop_avx512bf16(long iterations) {
  // Latency ~5-6 cycles on 1-2 ports: up to 12 in flight needed; 12 chains with the operands leave 18 zmm free.
  // a = 1.0 and b = 2^-24 in bf16: the sums grow by 2^-23 per instruction, so they stay normal and finite.
  const __m512bh a = (__m512bh)_mm512_set1_epi16(0x3f80), b = (__m512bh)_mm512_set1_epi16(0x3380);
  // Distinct seeds and an empty asm barrier per iteration so GCC cannot merge the chains (as with the FMA loop).
  __m512 c0 = _mm512_set1_ps(1.0f), c1 = _mm512_set1_ps(1.001f), c2 = _mm512_set1_ps(1.002f),
         c3 = _mm512_set1_ps(1.003f), c4 = _mm512_set1_ps(1.004f), c5 = _mm512_set1_ps(1.005f),
         c6 = _mm512_set1_ps(1.006f), c7 = _mm512_set1_ps(1.007f), c8 = _mm512_set1_ps(1.008f),
         c9 = _mm512_set1_ps(1.009f), c10 = _mm512_set1_ps(1.010f), c11 = _mm512_set1_ps(1.011f);
  for (long i = 0; i < iterations; ++i) {
    c0 = _mm512_dpbf16_ps(c0, a, b); c1 = _mm512_dpbf16_ps(c1, a, b); c2 = _mm512_dpbf16_ps(c2, a, b);
    c3 = _mm512_dpbf16_ps(c3, a, b); c4 = _mm512_dpbf16_ps(c4, a, b); c5 = _mm512_dpbf16_ps(c5, a, b);
    c6 = _mm512_dpbf16_ps(c6, a, b); c7 = _mm512_dpbf16_ps(c7, a, b); c8 = _mm512_dpbf16_ps(c8, a, b);
    c9 = _mm512_dpbf16_ps(c9, a, b); c10 = _mm512_dpbf16_ps(c10, a, b); c11 = _mm512_dpbf16_ps(c11, a, b);
    asm volatile("" : "+v"(c0), "+v"(c1), "+v"(c2), "+v"(c3), "+v"(c4), "+v"(c5), "+v"(c6), "+v"(c7), "+v"(c8),
                 "+v"(c9), "+v"(c10), "+v"(c11));
  }
  const __m512 s = _mm512_add_ps(
      _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(c0, c1), _mm512_add_ps(c2, c3)),
                    _mm512_add_ps(_mm512_add_ps(c4, c5), _mm512_add_ps(c6, c7))),
      _mm512_add_ps(_mm512_add_ps(c8, c9), _mm512_add_ps(c10, c11)));
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, s);
  return lanes[0];
}

}  // namespace sqrtdk::roofs
