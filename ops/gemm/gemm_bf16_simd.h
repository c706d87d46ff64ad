// The bf16 GEMM's kernels (gemm.h, WeightType::bf16), written once as templates and instantiated per ISA:
//   widening (gemm_bf16_avx512.cpp, gemm_bf16_avx2.cpp): bf16 weights widened to f32 inside the microkernel, src
//     read in place as f32, FMA as the f32 kernel (gemm_simd.h);
//   dot-pair (gemm_bf16_avx512bf16.cpp, only with __AVX512BF16__): src rows rounded to bf16 at call time,
//     vdpbf16ps sums pairs of products (k, k+1) into f32 accumulators (2× the f32 FMA rate).
// Both follow gemm_simd.h's microkernel contract (MR rows × NV vectors of accumulators, later K slices start from
// dst's partial sums, the epilogue through gemm_simd::store_tile on the last slice, a Stream variant that prefetches
// the weights for small M). Unlike the f32 GEMM there is no decode kernel with split accumulators: M = 1 runs the
// same microkernel (one row), so every element is one accumulation chain over k whatever M (RowOrder is moot);
// decode is memory-bound, and the Stream variant's prefetch keeps it near DRAM bandwidth.
//
// Packed weights, per panel of NR columns (zero past N), 64-byte aligned panels of panel_bytes:
//   widening: [K][NR] bf16. Within a k row, each pair of vectors (2·L columns) is interleaved: u16 slot 2i holds
//     column i, slot 2i+1 column L+i, so one integer load gives both vectors as f32 with one op each (shift left 16
//     for the low halves, AND 0xFFFF0000 for the high ones) instead of a zero-extend and a shift per vector; an odd
//     last vector is stored plainly (zero-extend + shift).
//   dot-pair: [ceil(K/2)][NR][2] bf16: for each k pair, column j's (w[k], w[k+1]) in one 32-bit lane (odd K: the
//     last pair's second element 0). The prepared src row is [round_up(K, 32)] bf16 (zero past K), so a 32-bit
//     broadcast gives one k pair.
#pragma once

#include "ops/gemm/gemm_simd.h"
#include "ops/gemm/gemm_typed_kernels.h"

#include <xsimd/xsimd.hpp>

#include <algorithm>
#include <array>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <utility>

#if defined(__AVX512BF16__)
#include <immintrin.h>
#endif

namespace sqrtdk::ops::gemm_bf16_simd {

using gemm_detail::BlockSizes;
using gemm_detail::GemmCall;
using gemm_detail::TypedGemmCall;
using gemm_simd::Vec;

// How far ahead of its loads the Stream microkernels prefetch the weights: 2 KiB, as the f32 kernels (8 rows of a
// 64-float panel).
inline constexpr size_t kPrefetchBytes = 2048;

// Prefetches the cache lines of one k row (`bytes` long) of a panel, kPrefetchBytes ahead (past the panel's end
// this only prefetches).
template <size_t Bytes>
inline void prefetch_ahead(const void* row) {
  const char* p = static_cast<const char*>(row) + kPrefetchBytes;
#pragma GCC unroll 8
  for (size_t o = 0; o < Bytes; o += 64) __builtin_prefetch(p + o);
}

// The end of a microkernel, shared by both kinds (the f32 kernel's): plain full-width stores when no epilogue is
// due, else the accumulators spilled to a tile and written by store_tile (alpha, epilogue, masked edge).
template <class Arch, int MR, int NV>
inline void finish_tile(Vec<Arch> (&acc)[MR][NV], float* c, size_t ldc, size_t n, const GemmCall* last,
                        size_t m_global, size_t n_global) {
  using V = Vec<Arch>;
  constexpr size_t L = V::size, NR = NV * L;
  const bool plain = last == nullptr || (last->alpha == 1.0f && last->bias == nullptr &&
                                         last->activation == Activation::none && last->multiply == nullptr &&
                                         last->residual == nullptr);
  if (plain && n == NR) {
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r)
#pragma GCC unroll 8
      for (int j = 0; j < NV; ++j) acc[r][j].store_unaligned(c + r * ldc + j * L);
    return;
  }
  alignas(64) float tile[MR * NR];
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 8
    for (int j = 0; j < NV; ++j) acc[r][j].store_aligned(tile + r * NR + j * L);
  gemm_simd::store_tile<Arch, NV>(tile, MR, c, ldc, n, plain ? nullptr : last, m_global, n_global);
}

// The start: the lines the tile's end touches requested early (gemm_simd::prefetch_tile_operands), the accumulators
// loaded from C's partial sums (later K slices) or zero.
template <class Arch, int MR, int NV>
inline void start_tile(Vec<Arch> (&acc)[MR][NV], float* c, size_t ldc, size_t n, bool accumulate,
                       const GemmCall* last, size_t m_global, size_t n_global) {
  using V = Vec<Arch>;
  constexpr size_t L = V::size, NR = NV * L;
  gemm_simd::prefetch_tile_operands<MR, NV, L>(c, ldc, last, m_global, n_global);
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 8
    for (int j = 0; j < NV; ++j)
      acc[r][j] = !accumulate ? V(0.0f)
                  : n == NR   ? V::load_unaligned(c + r * ldc + j * L)
                  : j * L < n ? gemm_simd::PartialIo<Arch>::load(c + r * ldc + j * L, std::min(L, n - j * L))
                              : V(0.0f);
}

// ---------------------------------------------------------------------------------------------------------------
// Widening kernels

// Per ISA (defined in its TU): bf16 → f32 of a packed row's vectors. pair: 2·L u16 at p (interleaved as above) →
// columns [0, L) and [L, 2L); one: L u16 at p (plain) → L columns.
template <class Arch>
struct Bf16Widen;

// The u16 slot of column j (0 ≤ j < NV·L) within a packed k row of the widening layout.
template <size_t L, int NV>
constexpr size_t widen_slot(size_t j) {
  const size_t v = j / L, i = j % L;
  if (v % 2 == 1) return (v - 1) * L + 2 * i + 1;                       // a pair's second vector: odd slots
  if (v + 1 < static_cast<size_t>(NV)) return v * L + 2 * i;            // a pair's first vector: even slots
  return v * L + i;                                                     // an odd last vector: plain
}

template <int NR>
size_t widen_panel_bytes(size_t K) {
  return (K * NR * sizeof(uint16_t) + 63) / 64 * 64;
}

// C[MR × n] (+)= A · Bp as gemm_simd::gemm_ukernel, Bp a [kc][NR] bf16 micro-panel (row stride NR u16).
template <class Arch, int MR, int NV, bool Stream>
void widen_ukernel(size_t kc, const float* __restrict a, size_t lda, const uint16_t* __restrict b, float* c,
                   size_t ldc, size_t n, bool accumulate, const GemmCall* last, size_t m_global, size_t n_global) {
  using V = Vec<Arch>;
  constexpr size_t L = V::size, NR = NV * L;
  assert(n >= 1 && n <= NR);
  V acc[MR][NV];
  start_tile<Arch, MR, NV>(acc, c, ldc, n, accumulate, last, m_global, n_global);
  const float* a_row[MR];
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r) a_row[r] = a + r * lda;
#pragma GCC unroll 4
  for (size_t k = 0; k < kc; ++k) {
    const uint16_t* bk = b + k * NR;
    if constexpr (Stream) prefetch_ahead<NR * sizeof(uint16_t)>(bk);
    V bv[NV];
#pragma GCC unroll 8
    for (int j = 0; j + 1 < NV; j += 2) Bf16Widen<Arch>::pair(bk + j * L, bv[j], bv[j + 1]);
    if constexpr (NV % 2 == 1) bv[NV - 1] = Bf16Widen<Arch>::one(bk + (NV - 1) * L);
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
      const V av(a_row[r][k]);
#pragma GCC unroll 8
      for (int j = 0; j < NV; ++j) acc[r][j] = vec::fma(av, bv[j], acc[r][j]);
    }
  }
  finish_tile<Arch, MR, NV>(acc, c, ldc, n, last, m_global, n_global);
}

// One instantiation per row count 1..MR (edge tiles do no wasted work), plain and Stream.
template <class Fn, int MR, template <int> class Pick>
struct RowTable {
  template <size_t... I>
  static constexpr std::array<Fn, MR> make(std::index_sequence<I...>) {
    return {Pick<static_cast<int>(I) + 1>::fn...};
  }
  static constexpr std::array<Fn, MR> fns = make(std::make_index_sequence<MR>{});
};

template <class Arch, int NV, bool Stream>
struct WidenPick {
  template <int Rows>
  struct At {
    static constexpr auto fn = &widen_ukernel<Arch, Rows, NV, Stream>;
  };
};

// The blocked loops (gemm_simd::gemm_region's, without its decode branch): ic (mc) → jc (nc) → pc (K slice) → jr
// (NR) → ir (MR). run(kernel_for_rows, kc, row, pc, jr, n, accumulate, last) calls the microkernel of one tile.
template <class Run>
void region_loops(const BlockSizes& bs, const TypedGemmCall& call, size_t m0, size_t m1, size_t n0, size_t n1,
                  Run run) {
  assert(n0 % bs.nr == 0 && m0 % bs.mr == 0);
  const size_t K = call.K;
  const size_t k_block = gemm_detail::k_slice(bs, call.M, K);
  for (size_t ic = m0; ic < m1; ic += bs.mc) {
    const size_t mc = std::min(bs.mc, m1 - ic);
    for (size_t jc = n0; jc < n1; jc += bs.nc) {
      const size_t jc_end = std::min(n1, jc + bs.nc);
      for (size_t pc = 0; pc < K; pc += k_block) {
        const size_t kc = std::min(k_block, K - pc);
        const GemmCall* last = pc + kc == K ? &call : nullptr;
        for (size_t jr = jc; jr < jc_end; jr += bs.nr) {
          const size_t n = std::min(bs.nr, jc_end - jr);
          for (size_t ir = 0; ir < mc; ir += bs.mr) {
            const size_t rows = std::min(bs.mr, mc - ir);
            run(rows, kc, ic + ir, pc, jr, n, pc > 0, last);
          }
        }
      }
    }
  }
}

template <class Arch, int MR, int NV>
void widen_region(const BlockSizes& bs, const TypedGemmCall& call, size_t m0, size_t m1, size_t n0, size_t n1) {
  constexpr size_t NR = NV * Vec<Arch>::size;
  assert(bs.mr == static_cast<size_t>(MR) && bs.nr == NR);
  using Fn = decltype(&widen_ukernel<Arch, 1, NV, false>);
  // Few rows (decode, decode batches, short prompts): each panel streams from DRAM with little reuse: prefetch.
  const auto& kernels = call.M <= gemm_simd::kStreamMaxRows
                            ? RowTable<Fn, MR, WidenPick<Arch, NV, true>::template At>::fns
                            : RowTable<Fn, MR, WidenPick<Arch, NV, false>::template At>::fns;
  const auto* panels = reinterpret_cast<const uint16_t*>(call.typed_panels);
  const size_t panel_elems = call.panel_bytes / sizeof(uint16_t);
  region_loops(bs, call, m0, m1, n0, n1,
               [&](size_t rows, size_t kc, size_t row, size_t pc, size_t jr, size_t n, bool accumulate,
                   const GemmCall* last) {
                 kernels[rows - 1](kc, call.src + row * call.lda + pc, call.lda,
                                   panels + jr / NR * panel_elems + pc * NR, call.dst + row * call.ldc + jr,
                                   call.ldc, n, accumulate, last, row, jr);
               });
}

// Panels [n0/NR, ceil(n1/NR)) of weights [N, K] (row stride ld) in the widening layout.
template <size_t L, int NV>
void widen_pack(const uint16_t* weights, size_t ld, size_t N, size_t K, size_t n0, size_t n1, uint8_t* panels) {
  constexpr size_t NR = NV * L;
  const size_t panel_elems = widen_panel_bytes<NR>(K) / sizeof(uint16_t);
  size_t slot[NR];
  for (size_t j = 0; j < NR; ++j) slot[j] = widen_slot<L, NV>(j);
  for (size_t jr = n0 / NR * NR; jr < n1; jr += NR) {
    auto* p = reinterpret_cast<uint16_t*>(panels) + jr / NR * panel_elems;
    const size_t cols = std::min(NR, N - jr);
    // Blocks of 64 k: each column's 128 source bytes are read once and written down the block (L1-resident).
    for (size_t k0 = 0; k0 < K; k0 += 64) {
      const size_t k1 = std::min(K, k0 + 64);
      for (size_t j = 0; j < NR; ++j) {
        const uint16_t* s = j < cols ? weights + (jr + j) * ld : nullptr;
        for (size_t k = k0; k < k1; ++k) p[k * NR + slot[j]] = s ? s[k] : uint16_t{0};
      }
    }
    std::fill(p + K * NR, p + panel_elems, uint16_t{0});  // the padding up to 64 bytes
  }
}

#if defined(__AVX512BF16__)
// ---------------------------------------------------------------------------------------------------------------
// Dot-pair kernels (AVX512-BF16; Arch is an avx512 xsimd arch: 16 f32 lanes)

inline size_t dp_src_row_bytes(size_t K) { return (K + 31) / 32 * 64; }
template <int NR>
size_t dp_panel_bytes(size_t K) {
  return (K + 1) / 2 * NR * 2 * sizeof(uint16_t);  // a multiple of 64 for NR a multiple of 16
}

// Rows [m0, m1) of src rounded to bf16 (round to nearest even), 32 at a time, zero past K.
inline void dp_prepare_src(const float* src, size_t lda, size_t m0, size_t m1, size_t K, uint8_t* out, float*) {
  const size_t row_bytes = dp_src_row_bytes(K);
  for (size_t m = m0; m < m1; ++m) {
    const float* s = src + m * lda;
    auto* d = reinterpret_cast<__m512i*>(out + m * row_bytes);
    for (size_t k = 0; k < K; k += 32) {
      const size_t left = K - k;
      const __mmask16 lo_mask = left >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << left) - 1);
      const __mmask16 hi_mask = left >= 32 ? 0xFFFF : left <= 16 ? 0 : static_cast<__mmask16>((1u << (left - 16)) - 1);
      const __m512 lo = _mm512_maskz_loadu_ps(lo_mask, s + k);
      const __m512 hi = _mm512_maskz_loadu_ps(hi_mask, s + k + 16);
      // cvtne2ps: the second operand's elements go to the low half.
      _mm512_store_si512(d + k / 32, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo)));
    }
  }
}

// C[MR × n] (+)= A · Bp with A MR prepared bf16 rows (row stride lda u16) from this slice's start, Bp the slice's
// [ceil(kc/2)][NR][2] micro-panel; kc is even except for the last slice of an odd K (whose pad pair is zero in both).
template <class Arch, int MR, int NV, bool Stream>
void dp_ukernel(size_t kc, const uint16_t* __restrict a, size_t lda, const uint16_t* __restrict b, float* c,
                size_t ldc, size_t n, bool accumulate, const GemmCall* last, size_t m_global, size_t n_global) {
  using V = Vec<Arch>;
  static_assert(V::size == 16, "dot-pair kernels are zmm kernels");
  constexpr size_t L = 16, NR = NV * L;
  assert(n >= 1 && n <= NR);
  V acc[MR][NV];
  start_tile<Arch, MR, NV>(acc, c, ldc, n, accumulate, last, m_global, n_global);
  const uint16_t* a_row[MR];
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r) a_row[r] = a + r * lda;
  const size_t pairs = (kc + 1) / 2;
#pragma GCC unroll 2
  for (size_t p = 0; p < pairs; ++p) {
    const uint16_t* bp = b + p * NR * 2;
    if constexpr (Stream) prefetch_ahead<NR * 2 * sizeof(uint16_t)>(bp);
    __m512bh bv[NV];
#pragma GCC unroll 8
    for (int j = 0; j < NV; ++j) bv[j] = reinterpret_cast<__m512bh>(_mm512_load_si512(bp + j * L * 2));
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
      int32_t pair;
      std::memcpy(&pair, a_row[r] + 2 * p, sizeof(pair));
      const auto av = reinterpret_cast<__m512bh>(_mm512_set1_epi32(pair));
#pragma GCC unroll 8
      for (int j = 0; j < NV; ++j) acc[r][j] = V(_mm512_dpbf16_ps(acc[r][j], av, bv[j]));
    }
  }
  finish_tile<Arch, MR, NV>(acc, c, ldc, n, last, m_global, n_global);
}

template <class Arch, int NV, bool Stream>
struct DpPick {
  template <int Rows>
  struct At {
    static constexpr auto fn = &dp_ukernel<Arch, Rows, NV, Stream>;
  };
};

template <class Arch, int MR, int NV>
void dp_region(const BlockSizes& bs, const TypedGemmCall& call, size_t m0, size_t m1, size_t n0, size_t n1) {
  constexpr size_t NR = NV * 16;
  assert(bs.mr == static_cast<size_t>(MR) && bs.nr == NR && bs.kc % 2 == 0);
  using Fn = decltype(&dp_ukernel<Arch, 1, NV, false>);
  const auto& kernels = call.M <= gemm_simd::kStreamMaxRows
                            ? RowTable<Fn, MR, DpPick<Arch, NV, true>::template At>::fns
                            : RowTable<Fn, MR, DpPick<Arch, NV, false>::template At>::fns;
  const auto* panels = reinterpret_cast<const uint16_t*>(call.typed_panels);
  const auto* src = reinterpret_cast<const uint16_t*>(call.src_prepared);
  const size_t panel_elems = call.panel_bytes / sizeof(uint16_t), lda = call.src_row_bytes / sizeof(uint16_t);
  region_loops(bs, call, m0, m1, n0, n1,
               [&](size_t rows, size_t kc, size_t row, size_t pc, size_t jr, size_t n, bool accumulate,
                   const GemmCall* last) {
                 // pc is even (K slices of even kc): the slice starts at pair pc/2.
                 kernels[rows - 1](kc, src + row * lda + pc, lda, panels + jr / NR * panel_elems + pc * NR, call.dst + row * call.ldc + jr,
                                   call.ldc, n, accumulate, last, row, jr);
               });
}

// Panels [n0/NR, ceil(n1/NR)) of weights [N, K] (row stride ld) in the dot-pair layout.
template <int NV>
void dp_pack(const uint16_t* weights, size_t ld, size_t N, size_t K, size_t n0, size_t n1, uint8_t* panels) {
  constexpr size_t NR = NV * 16;
  const size_t panel_elems = dp_panel_bytes<NR>(K) / sizeof(uint16_t), pairs = (K + 1) / 2;
  for (size_t jr = n0 / NR * NR; jr < n1; jr += NR) {
    auto* p = reinterpret_cast<uint16_t*>(panels) + jr / NR * panel_elems;
    const size_t cols = std::min(NR, N - jr);
    // Blocks of 64 k (32 pairs): each column's 128 source bytes are read once and written down the block.
    for (size_t q0 = 0; q0 < pairs; q0 += 32) {
      const size_t q1 = std::min(pairs, q0 + 32);
      for (size_t j = 0; j < NR; ++j) {
        const uint16_t* s = j < cols ? weights + (jr + j) * ld : nullptr;
        for (size_t q = q0; q < q1; ++q) {
          uint16_t* d = p + (q * NR + j) * 2;
          d[0] = s ? s[2 * q] : uint16_t{0};
          d[1] = s && 2 * q + 1 < K ? s[2 * q + 1] : uint16_t{0};
        }
      }
    }
  }
}
#endif  // __AVX512BF16__

}  // namespace sqrtdk::ops::gemm_bf16_simd
