// What the q8 SIMD kernels (gemm_q8_avx512vnni.cpp, gemm_q8_avx2.cpp) share: the loops around their microkernels
// (the f32 GEMM's order, gemm_simd.h's gemm_region) and the per-block sizes. Both layouts keep the int8 weights of a
// block of 32 k as [8 groups of 4 k][NR columns][4 k], so one vector load is lanes columns × 4 k, which
// vpdpbusd (4 byte products per int32 lane) and vpmaddubsw + vpmaddwd (the same 4 products, via int16 pairs)
// consume as they are.
// Sum order per element (the same for every M, so rows do not depend on their neighbours): the block's 32 products
// exactly in int32, then facc = fma(float(isum), scale_w, facc) in block order; partial sums of K slices go through
// dst unscaled (an exact f32 round trip), and the last slice multiplies by the row's scale before the epilogue.
#pragma once

#include "ops/gemm/gemm_typed_kernels.h"

#include <algorithm>
#include <cassert>
#include <cstddef>

namespace sqrtdk::ops::gemm_q8_simd {

using gemm_detail::BlockSizes;
using gemm_detail::GemmCall;
using gemm_detail::TypedGemmCall;

inline constexpr size_t kGroups = kQ8BlockSize / 4;  // groups of 4 k per block

// The loops for one region of dst (one work item): ic (MC rows) → jc (NC columns) → pc (KC, a multiple of 32) →
// jr (NR) → ir (MR), as gemm_simd::gemm_region. tile(m, rows, jr, n, pc, kc, last) runs the microkernel for dst
// rows [m, m + rows) × columns [jr, jr + n), K slice [pc, pc + kc); last: the call if this is the last slice.
template <class Tile>
void blocked_loops(const BlockSizes& bs, const TypedGemmCall& call, size_t m0, size_t m1, size_t n0, size_t n1,
                   Tile&& tile) {
  assert(n0 % bs.nr == 0 && m0 % bs.mr == 0 && bs.kc % kQ8BlockSize == 0 && call.K % kQ8BlockSize == 0);
  const size_t K = call.K;
  const size_t k_block = std::min(gemm_detail::k_slice(bs, call.M, K), K);
  for (size_t ic = m0; ic < m1; ic += bs.mc) {
    const size_t mc = std::min(bs.mc, m1 - ic);
    for (size_t jc = n0; jc < n1; jc += bs.nc) {
      const size_t jc_end = std::min(n1, jc + bs.nc);
      for (size_t pc = 0; pc < K; pc += k_block) {
        const size_t kc = std::min(k_block, K - pc);
        const GemmCall* last = pc + kc == K ? &call : nullptr;
        for (size_t jr = jc; jr < jc_end; jr += bs.nr) {
          const size_t n = std::min(bs.nr, jc_end - jr);
          for (size_t ir = 0; ir < mc; ir += bs.mr) tile(ic + ir, std::min(bs.mr, mc - ir), jr, n, pc, kc, last);
        }
      }
    }
  }
}

// True when the last slice needs no more than the row scale (no alpha, bias, activation, multiply, residual).
inline bool plain_epilogue(const GemmCall* last) {
  return last == nullptr || (last->alpha == 1.0f && last->bias == nullptr && last->activation == Activation::none &&
                             last->multiply == nullptr && last->residual == nullptr);
}

}  // namespace sqrtdk::ops::gemm_q8_simd
