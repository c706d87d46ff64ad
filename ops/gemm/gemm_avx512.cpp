// GEMM kernels for AVX-512 (zmm, 16 floats): gemm_simd.h instantiated with xsimd::avx512bw.
// Tile 6 × 64 (BLIS's Zen 4 sgemm shape, transposed): 24 zmm accumulators + 4 B vectors + 1 broadcast = 29 of the
// 32 zmm registers; per k step 4 vector loads and 6 broadcasts feed 24 FMAs (12 cycles at 2 FMA/cycle). 64
// columns divide every N of the model shapes (768, 2048, 3072, 32000). Decode: 2 k-interleaved sets × 4 = 8 chains.
// GCC 12 reports -W(maybe-)uninitialized inside its own avx512fintrin.h (_mm512_undefined_ps passed through
// xsimd's masked ops when inlined): a known false positive (GCC bug 105593), silenced for this TU only.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include "ops/gemm/gemm_partial_io_avx512.h"
#include "ops/gemm/gemm_simd.h"

#include <immintrin.h>

namespace sqrtdk::ops::gemm_detail {

namespace {
using Arch = xsimd::avx512bw;
constexpr int kMr = 6, kNv = 4, kDecodeU = 2;
}  // namespace

// The tile; kc, mc and nc come from the machine's caches (gemm_blocking.h). On Zen 5 (2026-11-30, ours against
// oneDNN in the same run on 128×768×768 … 2048³, quiet machine, A read in place) kc 768 gave 0.94–1.05× oneDNN at 1
// thread and 0.94–1.03× at 2, kc 512 0.93–1.00× / 0.93–1.04×, kc 256 0.88–1.03× / 0.91–0.96×; tiles 6×64, 8×48 and
// 14×32 were tried and 6×64 kept; mc 96 beat 48 and 192; nc 768 beat 384 and 1536: what the cache model gives there.
BlockSizes gemm_tile_avx512() { return {kMr, kNv * 16, 0, 0, 0}; }

void gemm_region_avx512(const GemmCall& call, size_t m0, size_t m1, size_t n0, size_t n1) {
  gemm_simd::gemm_region<Arch, kMr, kNv, kDecodeU>(*call.blocks, call, m0, m1, n0, n1);
}

void pack_panels_avx512(const float* b, size_t ldb, bool b_is_kn, size_t N, size_t K, size_t n0, size_t n1,
                        float* panels) {
  gemm_simd::pack_panels<Arch, kNv>(b, ldb, b_is_kn, N, K, n0, n1, panels);
}

void gemm_direct_avx512(size_t M, size_t, size_t K, float alpha, const float* A, size_t lda, const float* B,
                        size_t ldb, bool b_is_kn, float* C, size_t ldc, size_t n0, size_t n1) {
  gemm_simd::gemm_direct<Arch>(M, K, alpha, A, lda, B, ldb, b_is_kn, C, ldc, n0, n1);
}

}  // namespace sqrtdk::ops::gemm_detail

// Instantiated here, compiled for this ISA only, for the q8 kernels' fused epilogue too (gemm_q8_avx512vnni.cpp and
// gemm_q8_avx2.cpp declare it extern instead of compiling a copy of their own).
template void sqrtdk::ops::gemm_simd::store_tile<xsimd::avx512bw, sqrtdk::ops::gemm_detail::kNv>(
    const float*, size_t, float*, size_t, size_t, const sqrtdk::ops::gemm_detail::GemmCall*, size_t, size_t);
