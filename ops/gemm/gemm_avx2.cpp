// GEMM kernels for AVX2 + FMA (ymm, 8 floats): gemm_simd.h instantiated with xsimd::fma3<xsimd::avx2>.
// Tile 4 × 24: 12 ymm accumulators + 3 B vectors + 1 broadcast = all 16 ymm registers; per k step 3 loads and 4
// broadcasts feed 12 FMAs. Measured against 6 × 16 (same register count, 2 loads + 6 broadcasts per 12 FMAs) on the
// project machine, 1 thread, 2026-11-30: 87-92 vs 78-87 GFLOP/s on 128×768×768 … 2048³ (AVX2 peak ~107).
#include "ops/gemm/gemm_partial_io_avx2.h"
#include "ops/gemm/gemm_simd.h"

#include <immintrin.h>

namespace sqrtdk::ops::gemm_detail {

namespace {
using Arch = xsimd::fma3<xsimd::avx2>;
constexpr int kMr = 4, kNv = 3, kDecodeU = 4;  // decode: 4 k-interleaved sets × 3 vectors = 12 chains
}  // namespace

// The tile; kc, mc and nc come from the machine's caches (gemm_blocking.h). On Zen 5 kc 512 (the 512×24 B
// micro-panel is 48 KiB: L1-sized, what the cache model gives) measured 83-90% of the AVX2 peak against 79-88% for
// kc 256 and about the same for 768 (1 thread, 2026-11-30).
BlockSizes gemm_tile_avx2() { return {kMr, kNv * 8, 0, 0, 0}; }

void gemm_region_avx2(const GemmCall& call, size_t m0, size_t m1, size_t n0, size_t n1) {
  gemm_simd::gemm_region<Arch, kMr, kNv, kDecodeU>(*call.blocks, call, m0, m1, n0, n1);
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

// Instantiated here, compiled for this ISA only, for the q8 kernels' fused epilogue too (gemm_q8_avx512vnni.cpp and
// gemm_q8_avx2.cpp declare it extern instead of compiling a copy of their own).
template void sqrtdk::ops::gemm_simd::store_tile<xsimd::fma3<xsimd::avx2>, sqrtdk::ops::gemm_detail::kNv>(
    const float*, size_t, float*, size_t, size_t, const sqrtdk::ops::gemm_detail::GemmCall*, size_t, size_t);
