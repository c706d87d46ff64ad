// int8 dot-product peak loop (AVX512-VNNI): 12 independent vpdpbusd chains. Compiled with avx512_vnni flags only.
#include "ops/base/roofs.h"

#include <immintrin.h>

namespace sqrtdk::roofs {

float vnni_dot_loop_avx512vnni(long iterations) {
  // Latency ~5 cycles on 1-2 ports: 12 chains keep them busy. u8 3 × s8 -2: each instruction adds -24 per lane;
  // int32 wraps harmlessly (vpdpbusd does not saturate), the sum only keeps the loop alive.
  const __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(-2);
  // Distinct seeds and an empty asm barrier per iteration so GCC cannot merge the chains (as with the FMA loop).
  __m512i c0 = _mm512_set1_epi32(0), c1 = _mm512_set1_epi32(1), c2 = _mm512_set1_epi32(2),
          c3 = _mm512_set1_epi32(3), c4 = _mm512_set1_epi32(4), c5 = _mm512_set1_epi32(5),
          c6 = _mm512_set1_epi32(6), c7 = _mm512_set1_epi32(7), c8 = _mm512_set1_epi32(8),
          c9 = _mm512_set1_epi32(9), c10 = _mm512_set1_epi32(10), c11 = _mm512_set1_epi32(11);
  for (long i = 0; i < iterations; ++i) {
    c0 = _mm512_dpbusd_epi32(c0, a, b); c1 = _mm512_dpbusd_epi32(c1, a, b); c2 = _mm512_dpbusd_epi32(c2, a, b);
    c3 = _mm512_dpbusd_epi32(c3, a, b); c4 = _mm512_dpbusd_epi32(c4, a, b); c5 = _mm512_dpbusd_epi32(c5, a, b);
    c6 = _mm512_dpbusd_epi32(c6, a, b); c7 = _mm512_dpbusd_epi32(c7, a, b); c8 = _mm512_dpbusd_epi32(c8, a, b);
    c9 = _mm512_dpbusd_epi32(c9, a, b); c10 = _mm512_dpbusd_epi32(c10, a, b); c11 = _mm512_dpbusd_epi32(c11, a, b);
    asm volatile("" : "+v"(c0), "+v"(c1), "+v"(c2), "+v"(c3), "+v"(c4), "+v"(c5), "+v"(c6), "+v"(c7), "+v"(c8),
                 "+v"(c9), "+v"(c10), "+v"(c11));
  }
  const __m512i s = _mm512_add_epi32(
      _mm512_add_epi32(_mm512_add_epi32(_mm512_add_epi32(c0, c1), _mm512_add_epi32(c2, c3)),
                       _mm512_add_epi32(_mm512_add_epi32(c4, c5), _mm512_add_epi32(c6, c7))),
      _mm512_add_epi32(_mm512_add_epi32(c8, c9), _mm512_add_epi32(c10, c11)));
  alignas(64) int lanes[16];
  _mm512_store_si512(lanes, s);
  return static_cast<float>(lanes[0]);
}

}  // namespace sqrtdk::roofs
