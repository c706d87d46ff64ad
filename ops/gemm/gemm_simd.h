// GEMM kernels written once as templates on the xsimd Arch, instantiated per ISA (gemm_avx2.cpp, gemm_avx512.cpp).
//
// Microkernel contract (gemm_ukernel<Arch, MR, NV>), BLIS style:
//   C[MR × n] (+)= A · Bp, then the epilogue if this is the last K slice, where
//   A:  MR rows of the source read in place, row r at a + r·lda, columns [0, kc) (no A packing: measured on Zen 5
//       in an L1/L2-resident loop, 6 row streams broadcast as fast as a packed [kc][6] panel, 197–207 vs 192–201
//       GFLOP/s, and the packing pass cost ~3% of a 512×768×768 product),
//   Bp: a packed B micro-panel [kc][NR], NR = NV · lanes, 64-byte aligned, zero-padded beyond N,
//   C:  row stride ldc; only columns [0, n) with n ≤ NR are read or written (masked at the edge).
//   accumulate = false: C is never read (first K slice); true: the accumulators start from C's partial sums.
//   Rows are exact: MR is the tile's real row count (one instantiation per row count 1..MR, so edge tiles do no
//   wasted FMAs).
//   Sum order per element: acc starts at C_partial (0 on the first slice), acc += a·b in k order (fma), then the
//   epilogue. That order depends only on the tile grid, never on the thread split.
// The decode kernel (gemm_decode_panel) computes one panel of a 1 × K row with U k-interleaved accumulator sets
// (FMA latency 4 cycles × 2 pipes needs ≥ 8 independent chains) and sums them at the end.
// Preconditions are asserted, never thrown: kernels never allocate.
#pragma once

#include "ops/activation/activation_simd.h"
#include "ops/base/vec_exp.h"  // vec::fma: one rounding on every ISA (xsimd 8.1 has no avx512 fma)
#include "ops/gemm/gemm_kernels.h"

#include <xsimd/xsimd.hpp>

#include <algorithm>
#include <cassert>
#include <cstddef>
#include <utility>

namespace sqrtdk::ops::gemm_simd {

using gemm_detail::BlockSizes;
using gemm_detail::GemmCall;

// Masked loads/stores of the first `count` (< lanes) floats: defined by each ISA's translation unit, so
// intrinsics of one ISA never reach another's TU.
template <class Arch>
struct PartialIo;

template <class Arch>
using Vec = xsimd::batch<float, Arch>;

template <class Arch>
Vec<Arch> load_n(const float* p, size_t count) {
  return count >= Vec<Arch>::size ? Vec<Arch>::load_unaligned(p) : PartialIo<Arch>::load(p, count);
}
template <class Arch>
void store_n(float* p, Vec<Arch> v, size_t count) {
  if (count >= Vec<Arch>::size)
    v.store_unaligned(p);
  else
    PartialIo<Arch>::store(p, v, count);
}

// The activations are ops/activation's own batch functions: the fused epilogue and the standalone op run the
// same code.
template <class Arch>
Vec<Arch> activate(Vec<Arch> v, Activation activation) {
  switch (activation) {
    case Activation::none: return v;
    case Activation::gelu_tanh: return activation_simd::gelu_tanh_batch<Arch>(v);
    case Activation::silu: return activation_simd::silu_batch<Arch>(v);
  }
  return v;
}

// The fused epilogue for `count` columns at global (m, n); v already holds alpha·acc (+ partial sums).
template <class Arch>
Vec<Arch> apply_epilogue(Vec<Arch> v, const GemmCall& call, size_t m, size_t n, size_t count) {
  if (call.bias) v += load_n<Arch>(call.bias + n, count);
  if (call.activation != Activation::none) v = activate<Arch>(v, call.activation);
  if (call.multiply)
    v *= load_n<Arch>(call.multiply + (m - call.multiply_m0) * call.ld_multiply + (n - call.multiply_n0), count);
  if (call.residual)
    v += load_n<Arch>(call.residual + (m - call.residual_m0) * call.ld_residual + (n - call.residual_n0), count);
  return v;
}

// Writes a finished tile (accumulators spilled to `tile` [rows][NR], partial sums of earlier K slices already
// included) to C: applies alpha and the epilogue when `last`, masks the columns past n. Kept out of line so the
// epilogue's register pressure (exp) never makes the compiler spill the microkernel's accumulators.
template <class Arch, int NV>
__attribute__((noinline)) void store_tile(const float* tile, size_t rows, float* c, size_t ldc, size_t n,
                                          const GemmCall* last, size_t m_global, size_t n_global) {
  using V = Vec<Arch>;
  constexpr size_t L = V::size, NR = NV * L;
  const float alpha = last ? last->alpha : 1.0f;
  for (size_t r = 0; r < rows; ++r) {
    float* cr = c + r * ldc;
    for (size_t j = 0; j < NV && j * L < n; ++j) {
      const size_t count = std::min(L, n - j * L);
      V v = V::load_aligned(tile + r * NR + j * L);
      if (last) {
        if (alpha != 1.0f) v *= V(alpha);
        v = apply_epilogue<Arch>(v, *last, m_global + r, n_global + j * L, count);
      }
      store_n<Arch>(cr + j * L, v, count);
    }
  }
}

// Requests the lines a tile's end touches, before its K loop, so their misses overlap the FMAs instead of stalling
// the stores: the C tile (its rows are ldc apart: no hardware stream) and, on the last K slice, the epilogue's
// multiply operand (SwiGLU's gate rows, made a whole GEMM earlier and out of L2 by then). The f32 and bf16
// microkernels start with it; the q8 ones do not (with it the 134M Llama's q8 prefill measured 1-2% slower on Zen 5,
// within the noise, and no faster).
template <int MR, int NV, size_t L>
inline void prefetch_tile_operands(float* c, size_t ldc, const GemmCall* last, size_t m_global, size_t n_global) {
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 8
    for (int j = 0; j < NV; ++j) __builtin_prefetch(c + r * ldc + j * L, 1);
  if (last != nullptr && last->multiply != nullptr) {
    const size_t ld = last->ld_multiply;
    const float* mul = last->multiply + (m_global - last->multiply_m0) * ld + (n_global - last->multiply_n0);
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r)
#pragma GCC unroll 8
      for (int j = 0; j < NV; ++j) __builtin_prefetch(mul + r * ld + j * L, 0);
  }
}

// See the contract at the top. `last`: the call whose epilogue to apply (nullptr if not the last K slice);
// (m_global, n_global): the tile's origin in dst, for the epilogue operands.
// Rows of the panel the decode kernel prefetches ahead of its loads (reading past the panel's end only prefetches).
inline constexpr size_t kDecodePrefetchRows = 8;
// The streaming microkernels' (short prompts, M <= kStreamMaxRows) distance: 32 rows of 64 floats, 8 KiB, a sixth of
// a 48 KiB L1d (a quarter of a 32 KiB one). Their panel should already be in L2 (the previous panel's
// next-panel prefetch), so this L1 prefetch covers L2 latency and any line that prefetch missed; at 8 rows (2 KiB,
// about 25 ns of FMAs) it covered neither. Interleaved `sqrtdk profile` pairs on the 134M Llama, AMD EPYC Zen 5,
// 2026-12-07: T = 32 at 1 thread 28.32 -> 27.38 ms (12 of 12 faster) and 27.67 -> 27.16 (12 of 16), at 2 threads
// -0.4 to -1.4%; T = 64 neutral (-0.5% / -1.9%, +3.7% in a noisier hour); warm bench-gemm at M = 32 unchanged
// against oneDNN; batched decode (bench-batch, 1 thread, 6 pairs) 8 streams -2.5%, 32 streams -0.5%, within its
// noise. 64 rows read alike at T = 32 (-3.9%, then worse than 32 in a direct pair); 128 rows (32 KiB) were
// 9% slower: the prefetched lines evicted the ones in use.
inline constexpr size_t kStreamPrefetchRows = 32;
inline constexpr size_t kFloatsPerLine = 64 / sizeof(float);

// Calls of at most this many rows use the streaming (prefetching) microkernels. Measured on the Xeon (Emerald
// Rapids class, 2026-12-01), 134M-shape Llama, six interleaved runs: prefill at T = 32 and 64 faster with it in 11
// of 12 pairs (by 5-35%; the VM is noisy), decode batches of 8 and 32 sequences 20-25% faster. Larger M re-reads
// each panel from cache for every row block, where the prefetches only cost issue slots.
inline constexpr size_t kStreamMaxRows = 64;

// Stream: software-prefetch the B micro-panel ahead of its loads. For small M (decode batches), where each panel
// comes from DRAM once and the few rows' FMAs are too few to hide the misses (the hardware prefetcher restarts at
// every 4 KiB page of a panel); large M re-reads panels from cache and skips it. The arithmetic is the same.
// next/next_lines: cache lines of the NEXT micro-panel to prefetch into L2, one per k step (the driver spreads a
// panel's lines over the row tiles that reuse the current one, so the next panel streams in from L3/DRAM while this
// one is computed instead of stalling its first tile; nullptr/0: none).
template <class Arch, int MR, int NV, bool Stream = false>
void gemm_ukernel(size_t kc, const float* __restrict a, size_t lda, const float* __restrict b, float* c,
                  size_t ldc, size_t n, bool accumulate, const GemmCall* last, size_t m_global, size_t n_global,
                  const float* next, size_t next_lines) {
  using V = Vec<Arch>;
  constexpr size_t L = V::size, NR = NV * L;
  assert(n >= 1 && n <= NR);
  prefetch_tile_operands<MR, NV, L>(c, ldc, last, m_global, n_global);
  // Partial sums of earlier K slices start the accumulators (loaded straight from C), so a slice that is not the
  // last one ends with plain stores: no spill through a tile buffer, no second pass.
  V acc[MR][NV];
  if (accumulate) {
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r)
#pragma GCC unroll 8
      for (int j = 0; j < NV; ++j)
        acc[r][j] = n == NR ? V::load_unaligned(c + r * ldc + j * L)
                            : (j * L < n ? PartialIo<Arch>::load(c + r * ldc + j * L, std::min(L, n - j * L))
                                         : V(0.0f));
  } else {
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r)
#pragma GCC unroll 8
      for (int j = 0; j < NV; ++j) acc[r][j] = V(0.0f);
  }
  const float* a_row[MR];
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r) a_row[r] = a + r * lda;
#pragma GCC unroll 4
  for (size_t k = 0; k < kc; ++k) {
    if (k < next_lines) __builtin_prefetch(next + k * kFloatsPerLine, 0, 2);  // prefetcht1: into L2
    if constexpr (Stream) {
#pragma GCC unroll 8
      for (int j = 0; j < NV; ++j) __builtin_prefetch(b + (k + kStreamPrefetchRows) * NR + j * L);
    }
    V bv[NV];
#pragma GCC unroll 8
    for (int j = 0; j < NV; ++j) bv[j] = V::load_aligned(b + k * NR + j * L);
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
      const V av(a_row[r][k]);
#pragma GCC unroll 8
      for (int j = 0; j < NV; ++j) acc[r][j] = vec::fma(av, bv[j], acc[r][j]);
    }
  }
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
  store_tile<Arch, NV>(tile, MR, c, ldc, n, plain ? nullptr : last, m_global, n_global);
}

template <class Arch, int MR, int NV, bool Stream = false>
struct UkernelTable {
  using Fn = void (*)(size_t, const float*, size_t, const float*, float*, size_t, size_t, bool, const GemmCall*,
                      size_t, size_t, const float*, size_t);
  template <size_t... I>
  static constexpr std::array<Fn, MR> make(std::index_sequence<I...>) {
    return {&gemm_ukernel<Arch, static_cast<int>(I) + 1, NV, Stream>...};
  }
  static constexpr std::array<Fn, MR> fns = make(std::make_index_sequence<MR>{});
};


// One panel of the M = 1 product: c[0, n) = epilogue(a[0, K) · panel), panel [K][NR].
template <class Arch, int NV, int U>
void gemm_decode_panel(size_t K, const float* __restrict a, const float* __restrict b, float* c, size_t n,
                       const GemmCall& call, size_t n_global) {
  using V = Vec<Arch>;
  constexpr size_t L = V::size, NR = NV * L;
  V acc[U][NV];
#pragma GCC unroll 8
  for (int u = 0; u < U; ++u)
#pragma GCC unroll 8
    for (int j = 0; j < NV; ++j) acc[u][j] = V(0.0f);
  size_t k = 0;
  for (; k + U <= K; k += U) {
    // Software prefetch ~2 KiB ahead of the panel stream (the weights come from DRAM once per token).
#pragma GCC unroll 8
    for (int u = 0; u < U; ++u)
#pragma GCC unroll 8
      for (int j = 0; j < NV; ++j) __builtin_prefetch(b + (k + u + kDecodePrefetchRows) * NR + j * L);
#pragma GCC unroll 8
    for (int u = 0; u < U; ++u) {
      const V av(a[k + u]);
#pragma GCC unroll 8
      for (int j = 0; j < NV; ++j) acc[u][j] = vec::fma(av, V::load_aligned(b + (k + u) * NR + j * L), acc[u][j]);
    }
  }
  for (; k < K; ++k) {
    const V av(a[k]);
#pragma GCC unroll 8
    for (int j = 0; j < NV; ++j) acc[0][j] = vec::fma(av, V::load_aligned(b + k * NR + j * L), acc[0][j]);
  }
#pragma GCC unroll 8
  for (int step = 1; step < U; step *= 2)
#pragma GCC unroll 8
    for (int u = 0; u + step < U; u += 2 * step)
#pragma GCC unroll 8
      for (int j = 0; j < NV; ++j) acc[u][j] += acc[u + step][j];
  alignas(64) float tile[NR];
#pragma GCC unroll 8
  for (int j = 0; j < NV; ++j) acc[0][j].store_aligned(tile + j * L);
  store_tile<Arch, NV>(tile, 1, c, 0, n, &call, 0, n_global);
}

// The loops for one region of dst (one work item). The weights are packed once at load and A is read in place, so
// there is no packing loop. Order: ic (MC rows: the mc × kc slice of A stays in L2) → jc (NC columns: the MC × NC
// partial sums stay in L2 across the K slices) → pc (KC) → jr (NR: the kc × NR B micro-panel is reused by every row
// tile) → ir (MR).
template <class Arch, int MR, int NV, int DecodeU>
void gemm_region(const BlockSizes& bs, const GemmCall& call, size_t m0, size_t m1, size_t n0, size_t n1) {
  constexpr size_t NR = NV * Vec<Arch>::size;
  assert(bs.mr == static_cast<size_t>(MR) && bs.nr == NR && n0 % NR == 0 && m0 % MR == 0);
  const size_t K = call.K;
  if (call.M == 1 && !call.row_invariant) {
    for (size_t jr = n0; jr < n1; jr += NR)
      gemm_decode_panel<Arch, NV, DecodeU>(K, call.src, call.panels + jr * K, call.dst + jr, std::min(NR, n1 - jr),
                                           call, jr);
    return;
  }
  // Few rows (decode batches, short prompts): each panel streams from DRAM with little reuse: prefetching kernels.
  const auto& kernels = call.M <= kStreamMaxRows ? UkernelTable<Arch, MR, NV, true>::fns
                                                 : UkernelTable<Arch, MR, NV>::fns;
  const size_t k_block = gemm_detail::k_slice(bs, call.M, K);
  for (size_t ic = m0; ic < m1; ic += bs.mc) {
    const size_t mc = std::min(bs.mc, m1 - ic);
    for (size_t jc = n0; jc < n1; jc += bs.nc) {
      const size_t jc_end = std::min(n1, jc + bs.nc);
      for (size_t pc = 0; pc < K; pc += k_block) {
        const size_t kc = std::min(k_block, K - pc);
        const GemmCall* last = pc + kc == K ? &call : nullptr;
        for (size_t jr = jc; jr < jc_end; jr += NR) {
          const float* b = call.panels + jr * K + pc * NR;
          const size_t n = std::min(NR, jc_end - jr);
          // The micro-panel after this one, in loop order: the next column panel, else the next K slice of the
          // column block, else the next column block's first slice, else (the item's last) the first slice of the
          // item the driver expects this participant to take next. Its lines are shared out over this panel's row
          // tiles.
          const float* next = nullptr;
          size_t next_k = 0;
          if (jr + NR < jc_end) {
            next = call.panels + (jr + NR) * K + pc * NR, next_k = kc;
          } else if (pc + kc < K) {
            next = call.panels + jc * K + (pc + kc) * NR, next_k = std::min(k_block, K - pc - kc);
          } else if (jc_end < n1) {
            next = call.panels + jc_end * K, next_k = std::min(k_block, K);
          } else if (ic + mc >= m1 && call.next_item_panel != nullptr) {
            next = call.next_item_panel, next_k = std::min(k_block, K);
          }
          const size_t tiles = (mc + MR - 1) / MR;
          const size_t lines = (next_k * NR + kFloatsPerLine - 1) / kFloatsPerLine;
          const size_t lines_per_tile = (lines + tiles - 1) / tiles;
          // A short last tile (tail rows ≤ MR/2, e.g. the 2 of 32 = 5·6 + 2) loads a B row for only a few FMAs;
          // the last two tiles then share MR + tail rows evenly (6 + 2 -> 4 + 4). Which rows a tile holds changes
          // no result: every element is computed in the same K order by any tile height.
          const size_t tail = mc % MR;
          const size_t split_at = tail != 0 && tail <= MR / 2 && mc > MR ? mc - tail - MR : mc;
          for (size_t ir = 0, t = 0; ir < mc; ++t) {
            size_t m = std::min<size_t>(MR, mc - ir);
            if (ir >= split_at) m = ir == split_at ? (MR + tail + 1) / 2 : mc - ir;
            const size_t first = std::min(lines, t * lines_per_tile);
            const size_t count = std::min({lines_per_tile, lines - first, kc});
            kernels[m - 1](kc, call.src + (ic + ir) * call.lda + pc, call.lda, b, call.dst + (ic + ir) * call.ldc + jr,
                           call.ldc, n, pc > 0, last, ic + ir, jr, next ? next + first * kFloatsPerLine : nullptr,
                           count);
            ir += m;
          }
        }
      }
    }
  }
}

// Packs panels [n0/NR, ceil(n1/NR)) of B (nk: [N, K] row stride ldb; kn: [K, N] row stride ldb) into the
// ceil(N/NR) × [K][NR] panel array, zero-padding columns ≥ N.
template <class Arch, int NV>
void pack_panels(const float* b, size_t ldb, bool b_is_kn, size_t N, size_t K, size_t n0, size_t n1,
                 float* panels) {
  constexpr size_t NR = NV * Vec<Arch>::size;
  for (size_t jr = n0; jr < n1; jr += NR) {
    float* p = panels + jr * K;
    const size_t cols = std::min(NR, N - jr);
    if (b_is_kn) {
      for (size_t k = 0; k < K; ++k) {
        const float* s = b + k * ldb + jr;
        float* d = p + k * NR;
        for (size_t j = 0; j < cols; ++j) d[j] = s[j];
        for (size_t j = cols; j < NR; ++j) d[j] = 0.0f;
      }
    } else {
      // Transpose in blocks of 64 k: for each of the panel's NR columns, 64 consecutive floats of its source row
      // (four cache lines) are read and written down one column of the block's 64 × NR floats, which stay in L1.
      for (size_t k0 = 0; k0 < K; k0 += 64) {
        const size_t k1 = std::min(K, k0 + 64);
        for (size_t j = 0; j < NR; ++j) {
          if (j < cols) {
            const float* s = b + (jr + j) * ldb;
            for (size_t k = k0; k < k1; ++k) p[k * NR + j] = s[k];
          } else {
            for (size_t k = k0; k < k1; ++k) p[k * NR + j] = 0.0f;
          }
        }
      }
    }
  }
}

// Small-M product straight from unpacked B: C[m, n0:n1] = alpha·A[m, :]·op(B).
template <class Arch>
void gemm_direct(size_t M, size_t K, float alpha, const float* A, size_t lda, const float* B, size_t ldb,
                 bool b_is_kn, float* C, size_t ldc, size_t n0, size_t n1) {
  using V = Vec<Arch>;
  constexpr size_t L = V::size;
  for (size_t m = 0; m < M; ++m) {
    const float* a = A + m * lda;
    float* c = C + m * ldc;
    if (b_is_kn) {
      // Row updates: 4 vectors of C in registers, one pass over B's rows.
      for (size_t n = n0; n < n1; n += 4 * L) {
        const size_t width = std::min(4 * L, n1 - n);
        V acc[4] = {V(0.0f), V(0.0f), V(0.0f), V(0.0f)};
        for (size_t k = 0; k < K; ++k) {
          const V av(a[k]);
          const float* brow = B + k * ldb + n;
          for (size_t j = 0; j < 4 && j * L < width; ++j)
            acc[j] = vec::fma(av, load_n<Arch>(brow + j * L, width - j * L), acc[j]);
        }
        for (size_t j = 0; j < 4 && j * L < width; ++j) store_n<Arch>(c + n + j * L, acc[j] * V(alpha), width - j * L);
      }
    } else {
      // Dot products with 4 independent accumulators.
      for (size_t n = n0; n < n1; ++n) {
        const float* brow = B + n * ldb;
        V s0(0.0f), s1(0.0f), s2(0.0f), s3(0.0f);
        size_t k = 0;
        for (; k + 4 * L <= K; k += 4 * L) {
          s0 = vec::fma(V::load_unaligned(a + k), V::load_unaligned(brow + k), s0);
          s1 = vec::fma(V::load_unaligned(a + k + L), V::load_unaligned(brow + k + L), s1);
          s2 = vec::fma(V::load_unaligned(a + k + 2 * L), V::load_unaligned(brow + k + 2 * L), s2);
          s3 = vec::fma(V::load_unaligned(a + k + 3 * L), V::load_unaligned(brow + k + 3 * L), s3);
        }
        for (; k < K; k += L) s0 = vec::fma(load_n<Arch>(a + k, K - k), load_n<Arch>(brow + k, K - k), s0);
        c[n] = alpha * xsimd::hadd((s0 + s1) + (s2 + s3));
      }
    }
  }
}

}  // namespace sqrtdk::ops::gemm_simd
