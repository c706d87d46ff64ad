// The roof probes' loops, written once as templates on the xsimd Arch and instantiated per ISA (roofs_avx2.cpp with
// xsimd::fma3<xsimd::avx2>, roofs_avx512.cpp with xsimd::avx512bw), as the kernels are. Everything here is a
// template on Arch (ODR safety across TUs with different -m flags). The BF16 and VNNI peak loops stay in their own
// TUs: one instruction each, with no xsimd counterpart.
#pragma once

#include "ops/base/vec_exp.h"  // ops::vec::fma: one rounding on every ISA (xsimd 8.1 has no avx512 fma)

#include <xsimd/xsimd.hpp>

#include <cstddef>

namespace sqrtdk::roofs::simd {

template <class Arch>
using Vec = xsimd::batch<float, Arch>;

// Sum of a vector's lanes (stored, then added in lane order: the probes only need a value the compiler must keep).
template <class Arch>
float lane_sum(const Vec<Arch>& v) {
  alignas(64) float lanes[Vec<Arch>::size];
  v.store_aligned(lanes);
  float total = 0;
  for (float x : lanes) total += x;
  return total;
}

// FMA peak: 10 independent accumulators (FMA latency 4 cycles x 2 pipes = 8 in flight needed; 10 leaves margin and
// no register spills). Distinct seeds and an empty asm barrier per iteration: with ten identical chains GCC merges
// them into one (it did: the loop ran 1 FMA per iteration and the 'peak' came out 25% above the hardware's).
template <class Arch>
float fma_loop(long iterations) {
  using V = Vec<Arch>;
  using ops::vec::fma;  // xsimd::fma would be a multiply and an add on avx512 (it was: half the peak)
  const V a(0.999999f), b(1e-7f);
  V c0(1.0f), c1(1.001f), c2(1.002f), c3(1.003f), c4(1.004f), c5(1.005f), c6(1.006f), c7(1.007f), c8(1.008f),
      c9(1.009f);
  for (long i = 0; i < iterations; ++i) {
    c0 = fma(c0, a, b); c1 = fma(c1, a, b); c2 = fma(c2, a, b); c3 = fma(c3, a, b); c4 = fma(c4, a, b);
    c5 = fma(c5, a, b); c6 = fma(c6, a, b); c7 = fma(c7, a, b); c8 = fma(c8, a, b); c9 = fma(c9, a, b);
    asm volatile("" : "+x"(c0.data), "+x"(c1.data), "+x"(c2.data), "+x"(c3.data), "+x"(c4.data), "+x"(c5.data),
                 "+x"(c6.data), "+x"(c7.data), "+x"(c8.data), "+x"(c9.data));
  }
  const V s = ((c0 + c1) + (c2 + c3)) + ((c4 + c5) + ((c6 + c7) + (c8 + c9)));
  alignas(64) float lanes[V::size];
  s.store_aligned(lanes);
  return lanes[0];
}

// Sums src[0, n) with 8 independent vector accumulators: two adds per cycle (add latency 4, two pipes), so the
// loop outruns L2 as well as DRAM and the figure is the cache's, not the loop's (4 accumulators capped it at one
// vector load per cycle, below what the L2 can deliver).
template <class Arch>
float read_loop(const float* src, size_t n) {
  using V = Vec<Arch>;
  constexpr size_t W = V::size;
  V s[8];
  for (V& v : s) v = V(0.0f);
  size_t i = 0;
  for (; i + 8 * W <= n; i += 8 * W)
    for (size_t j = 0; j < 8; ++j) s[j] += V::load_unaligned(src + i + j * W);
  float total = lane_sum<Arch>(((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7])));
  for (; i < n; ++i) total += src[i];
  return total;
}

// Sums src[0, n) as S equal parts read side by side, two vectors of each per round (what a decode attention does,
// reading a head's K and V rows and the next head's), then what the parts leave. One stream per part is as many
// prefetch streams as the hardware tracks at once: it read DRAM faster than one stream on the Zen 5 VM, whose cold
// decode attention then measured "above" the one-stream roof. Two accumulators per stream: at most 16 registers, none
// spilled.
template <class Arch, int S>
float read_streams(const float* src, size_t n) {
  using V = Vec<Arch>;
  constexpr size_t W = V::size, kRound = 2 * W;  // floats per stream per round
  const size_t part = n / S / kRound * kRound;
  V acc[2 * S];
  for (V& v : acc) v = V(0.0f);
  for (size_t i = 0; i < part; i += kRound)
    for (int s = 0; s < S; ++s)
      for (int g = 0; g < 2; ++g) acc[2 * s + g] += V::load_unaligned(src + s * part + i + g * W);
  V sum = acc[0];
  for (int j = 1; j < 2 * S; ++j) sum += acc[j];
  return lane_sum<Arch>(sum) + read_loop<Arch>(src + S * part, n - S * part);
}

template <class Arch>
float read_streams_loop(const float* src, size_t n, int n_streams) {
  switch (n_streams) {
    case 2: return read_streams<Arch, 2>(src, n);
    case 4: return read_streams<Arch, 4>(src, n);
    case 8: return read_streams<Arch, 8>(src, n);
    default: return read_loop<Arch>(src, n);
  }
}

// dst = -src, 4 vectors per round (an exact flip: repeated passes in place never drift into subnormals); in place
// when dst == src. Plain stores, as the row ops': the roof of an op that writes what it read.
template <class Arch>
void read_write_loop(const float* src, float* dst, size_t n) {
  using V = Vec<Arch>;
  constexpr size_t W = V::size;
  const V sign(-0.0f);
  size_t i = 0;
  for (; i + 4 * W <= n; i += 4 * W)
    for (size_t j = 0; j < 4; ++j) (V::load_unaligned(src + i + j * W) ^ sign).store_unaligned(dst + i + j * W);
  for (; i < n; ++i) dst[i] = -src[i];
}

// dst = a + b, 4 vectors per round (the residual add's and SwiGLU's two reads and one write).
template <class Arch>
void read2_write_loop(const float* a, const float* b, float* dst, size_t n) {
  using V = Vec<Arch>;
  constexpr size_t W = V::size;
  size_t i = 0;
  for (; i + 4 * W <= n; i += 4 * W)
    for (size_t j = 0; j < 4; ++j)
      (V::load_unaligned(a + i + j * W) + V::load_unaligned(b + i + j * W)).store_unaligned(dst + i + j * W);
  for (; i < n; ++i) dst[i] = a[i] + b[i];
}

}  // namespace sqrtdk::roofs::simd
