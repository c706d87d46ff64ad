// bf16 GEMM kernels for AVX2 + FMA: gemm_bf16_simd.h's widening kernels with xsimd::fma3<xsimd::avx2> (the weights
// widened to f32 in the microkernel, FMA as the f32 kernel). Tile 4 × 24 as the f32 kernel (gemm_avx2.cpp): 12 ymm
// accumulators; per k step one 16-bf16 load gives two weight vectors (shift, AND: the interleaved layout) and one
// 8-bf16 load the third (zero-extend, shift), then 4 broadcasts and 12 FMAs.
#include "ops/gemm/gemm_bf16_simd.h"
#include "ops/gemm/gemm_partial_io_avx2.h"

#include <immintrin.h>

namespace sqrtdk::ops::gemm_bf16_simd {

template <>
struct Bf16Widen<xsimd::fma3<xsimd::avx2>> {
  using V = Vec<xsimd::fma3<xsimd::avx2>>;
  static void pair(const uint16_t* p, V& lo, V& hi) {
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    lo = _mm256_castsi256_ps(_mm256_slli_epi32(x, 16));
    hi = _mm256_castsi256_ps(_mm256_and_si256(x, _mm256_set1_epi32(static_cast<int>(0xFFFF0000u))));
  }
  static V one(const uint16_t* p) {
    const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(x), 16));
  }
};

}  // namespace sqrtdk::ops::gemm_bf16_simd

namespace sqrtdk::ops::gemm_detail {

namespace {
using Arch = xsimd::fma3<xsimd::avx2>;
constexpr int kMr = 4, kNv = 3;
constexpr size_t kNr = kNv * 8;

size_t panel_bytes(size_t K) { return gemm_bf16_simd::widen_panel_bytes<kNr>(K); }
size_t src_row_bytes(size_t) { return 0; }  // src read in place as f32
void prepare_src(const float*, size_t, size_t, size_t, size_t, uint8_t*, float*) {}
// Block sizes: the f32 kernel's (gemm_avx2.cpp, measured there). Not re-tuned for bf16.
constexpr BlockSizes kBlockSizes{kMr, kNr, 512, 96, 768};
void region(const TypedGemmCall& call, size_t m0, size_t m1, size_t n0, size_t n1) {
  gemm_bf16_simd::widen_region<Arch, kMr, kNv>(kBlockSizes, call, m0, m1, n0, n1);
}
void pack(const uint16_t* weights, size_t ld, size_t N, size_t K, size_t n0, size_t n1, uint8_t* panels) {
  gemm_bf16_simd::widen_pack<8, kNv>(weights, ld, N, K, n0, n1, panels);
}
}  // namespace

const Bf16Kernels kBf16KernelsAvx2{kBlockSizes, panel_bytes, src_row_bytes, prepare_src, region, pack};

}  // namespace sqrtdk::ops::gemm_detail
