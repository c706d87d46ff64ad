// GEMM kernels for AVX2 + FMA (ymm, 8 floats): gemm_simd.h instantiated with xsimd::fma3<xsimd::avx2>.
// Tile 6 × 16: 12 ymm accumulators + 2 B vectors + 1 broadcast = 15 of the 16 ymm registers.
#include "ops/gemm/gemm_simd.h"

#include <immintrin.h>

namespace sqrtdk::ops::gemm_simd {

template <>
struct PartialIo<xsimd::fma3<xsimd::avx2>> {
  static __m256i mask(size_t count) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(count)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  static Vec<xsimd::fma3<xsimd::avx2>> load(const float* p, size_t count) {
    return _mm256_maskload_ps(p, mask(count));
  }
  static void store(float* p, Vec<xsimd::fma3<xsimd::avx2>> v, size_t count) {
    _mm256_maskstore_ps(p, mask(count), v);
  }
};

}  // namespace sqrtdk::ops::gemm_simd

namespace sqrtdk::ops::gemm_detail {

namespace {
using Arch = xsimd::fma3<xsimd::avx2>;
constexpr int kMr = 6, kNv = 2, kDecodeU = 4;
}  // namespace

// Block sizes: kc 256 keeps the 256×16 B micro-panel (16 KiB) in L1 with room for the streaming A panel; mc 96 and
// nc 768 as for avx512 (same L2). Not tuned separately (see ops/gemm/README.md for the measured AVX2 figures).
BlockSizes gemm_block_sizes_avx2() { return {kMr, kNv * 8, 256, 96, 768}; }

void gemm_region_avx2(const GemmCall& call, size_t m0, size_t m1, size_t n0, size_t n1) {
  gemm_simd::gemm_region<Arch, kMr, kNv, kDecodeU>(gemm_block_sizes_avx2(), call, m0, m1, n0, n1);
}

void pack_panels_avx2(const float* b, size_t ldb, bool b_is_kn, size_t N, size_t K, size_t n0, size_t n1,
                      float* panels) {
  gemm_simd::pack_panels<Arch, kNv>(b, ldb, b_is_kn, N, K, n0, n1, panels);
}

void gemm_direct_avx2(size_t M, size_t, size_t K, float alpha, const float* A, size_t lda, const float* B,
                      size_t ldb, bool b_is_kn, float* C, size_t ldc, size_t n0, size_t n1) {
  gemm_simd::gemm_direct<Arch>(M, K, alpha, A, lda, B, ldb, b_is_kn, C, ldc, n0, n1);
}

}  // namespace sqrtdk::ops::gemm_detail
