// bf16 GEMM kernels for AVX-512 CPUs without AVX512-BF16: gemm_bf16_simd.h's widening kernels with xsimd::avx512bw
// (the weights widened to f32 in the microkernel, FMA as the f32 kernel). Tile 6 × 64 as the f32 kernel
// (gemm_avx512.cpp): 24 zmm accumulators; per k step 2 loads of 64 bf16 each give 4 weight vectors with one
// shift or AND each (the interleaved layout), then 6 broadcasts and 24 FMAs.
// GCC 12's false -W(maybe-)uninitialized in avx512 intrinsics: see gemm_avx512.cpp.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include "ops/gemm/gemm_bf16_simd.h"
#include "ops/gemm/gemm_partial_io_avx512.h"

#include <immintrin.h>

namespace sqrtdk::ops::gemm_bf16_simd {

template <>
struct Bf16Widen<xsimd::avx512bw> {
  using V = Vec<xsimd::avx512bw>;
  static void pair(const uint16_t* p, V& lo, V& hi) {
    const __m512i x = _mm512_loadu_si512(p);
    lo = _mm512_castsi512_ps(_mm512_slli_epi32(x, 16));
    hi = _mm512_castsi512_ps(_mm512_and_si512(x, _mm512_set1_epi32(static_cast<int>(0xFFFF0000u))));
  }
  static V one(const uint16_t* p) {
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(x), 16));
  }
};

}  // namespace sqrtdk::ops::gemm_bf16_simd

namespace sqrtdk::ops::gemm_detail {

namespace {
using Arch = xsimd::avx512bw;
constexpr int kMr = 6, kNv = 4;
constexpr size_t kNr = kNv * 16;

size_t panel_bytes(size_t K) { return gemm_bf16_simd::widen_panel_bytes<kNr>(K); }
size_t src_row_bytes(size_t) { return 0; }  // src read in place as f32
void prepare_src(const float*, size_t, size_t, size_t, size_t, uint8_t*, float*) {}
// Block sizes: the f32 kernel's (gemm_avx512.cpp, measured there); the kc × 64 bf16 micro-panel is half the f32
// one's size. Not re-tuned for bf16.
constexpr BlockSizes kBlockSizes{kMr, kNr, 768, 96, 768};
void region(const TypedGemmCall& call, size_t m0, size_t m1, size_t n0, size_t n1) {
  gemm_bf16_simd::widen_region<Arch, kMr, kNv>(kBlockSizes, call, m0, m1, n0, n1);
}
void pack(const uint16_t* weights, size_t ld, size_t N, size_t K, size_t n0, size_t n1, uint8_t* panels) {
  gemm_bf16_simd::widen_pack<16, kNv>(weights, ld, N, K, n0, n1, panels);
}
}  // namespace

const Bf16Kernels kBf16KernelsAvx512{kBlockSizes, panel_bytes, src_row_bytes, prepare_src, region, pack};

}  // namespace sqrtdk::ops::gemm_detail
