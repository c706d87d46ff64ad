// GEMM kernels for AVX-512 (zmm, 16 floats): gemm_simd.h instantiated with xsimd::avx512bw.
// Tile 6 × 64 (BLIS's Zen 4 sgemm shape, transposed): 24 zmm accumulators + 4 B vectors + 1 broadcast = 29 of the
// 32 zmm registers; per k step 4 vector loads and 6 broadcasts feed 24 FMAs (12 cycles at 2 FMA/cycle). 64
// columns divide every N of the model shapes (768, 2048, 3072, 32000). Decode: 2 k-interleaved sets × 4 = 8 chains.
// GCC 12 reports -W(maybe-)uninitialized inside its own avx512fintrin.h (_mm512_undefined_ps passed through
// xsimd::exp/tanh when inlined): a known false positive (GCC bug 105593), silenced for this TU only.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include "ops/gemm/gemm_simd.h"

#include <immintrin.h>

namespace sqrtdk::ops::gemm_simd {

template <>
struct PartialIo<xsimd::avx512bw> {
  static Vec<xsimd::avx512bw> load(const float* p, size_t count) {
    return _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << count) - 1), p);
  }
  static void store(float* p, Vec<xsimd::avx512bw> v, size_t count) {
    _mm512_mask_storeu_ps(p, static_cast<__mmask16>((1u << count) - 1), v);
  }
};

}  // namespace sqrtdk::ops::gemm_simd

namespace sqrtdk::ops::gemm_detail {

namespace {
using Arch = xsimd::avx512bw;
constexpr int kMr = 6, kNv = 4, kDecodeU = 2;
}  // namespace

// Block sizes, measured on the project machine (Zen 5, 2 cores, 48 KiB L1d, 1 MiB L2; shared with other jobs, so
// compared by thread CPU time against oneDNN at 1 thread on 128×768×768, 512×3072×768 and 512×768×3072,
// 2026-11-30): 6×64 with kc 256 or 512 came out at 0.89–0.96× oneDNN, 8×48 with kc 192/384 at 0.82–1.10×, 14×32
// below both; software prefetch of A or B in the K loop was no better. mc 96 (a 96×256 A slice = 96 KiB in L2)
// beat 48 and 192; nc 768 (96×768 partial sums = 288 KiB in L2) beat 384 and 1536 (measured with 8×48).
BlockSizes gemm_block_sizes_avx512() { return {kMr, kNv * 16, 256, 96, 768}; }

void gemm_region_avx512(const GemmCall& call, size_t m0, size_t m1, size_t n0, size_t n1) {
  gemm_simd::gemm_region<Arch, kMr, kNv, kDecodeU>(gemm_block_sizes_avx512(), call, m0, m1, n0, n1);
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
