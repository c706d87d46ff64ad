// bf16 GEMM kernels for AVX512-BF16: gemm_bf16_simd.h's dot-pair kernels (vdpbf16ps: per f32 lane, the two
// products of a k pair added to the accumulator; the weights stay bf16, src rows are rounded to bf16 once per call).
// Tile 6 × 64: 24 zmm accumulators; per k pair 4 weight loads and 6 32-bit broadcasts feed 24 vdpbf16ps (48
// multiply-adds per column lane pair: twice the f32 kernel's work per instruction).
// vdpbf16ps and vcvtne2ps2bf16 ignore MXCSR: denormal inputs are read as zero and denormal results flushed (round
// to nearest even). A flushed term is below 2^-126 of its weight, inside the error bound gemm.h states.
//
// The xsimd arch of this TU is its own type (Avx512Bf16Arch, an avx512bw), so the shared templates it instantiates
// (store_tile, the epilogue's activations) are distinct symbols from the avx512 TUs' copies: code compiled with
// -mavx512bf16 can never be linked in for a caller on a CPU without it.
// GCC 12's false -W(maybe-)uninitialized in avx512 intrinsics: see gemm_avx512.cpp.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <xsimd/xsimd.hpp>

namespace sqrtdk::ops::gemm_bf16_simd {
struct Avx512Bf16Arch : xsimd::avx512bw {
  static constexpr char const* name() noexcept { return "avx512bw_bf16"; }
};
}  // namespace sqrtdk::ops::gemm_bf16_simd

namespace xsimd::types {
template <class T>
struct get_bool_simd_register<T, sqrtdk::ops::gemm_bf16_simd::Avx512Bf16Arch> {
  using type = simd_avx512_bool_register<T>;
};
XSIMD_DECLARE_SIMD_REGISTER_ALIAS(sqrtdk::ops::gemm_bf16_simd::Avx512Bf16Arch, avx512bw);
}  // namespace xsimd::types

#include "ops/gemm/gemm_bf16_simd.h"
#include "ops/gemm/gemm_partial_io_avx512.h"

#include <immintrin.h>

namespace sqrtdk::ops::gemm_simd {

template <>
struct PartialIo<gemm_bf16_simd::Avx512Bf16Arch> : PartialIoZmm<gemm_bf16_simd::Avx512Bf16Arch> {};

}  // namespace sqrtdk::ops::gemm_simd

namespace sqrtdk::ops::gemm_detail {

namespace {
using Arch = gemm_bf16_simd::Avx512Bf16Arch;
constexpr int kMr = 6, kNv = 4;
constexpr size_t kNr = kNv * 16;

size_t panel_bytes(size_t K) { return gemm_bf16_simd::dp_panel_bytes<kNr>(K); }
size_t src_row_bytes(size_t K) { return gemm_bf16_simd::dp_src_row_bytes(K); }
void prepare_src(const float* src, size_t lda, size_t m0, size_t m1, size_t K, uint8_t* out, float* scales) {
  gemm_bf16_simd::dp_prepare_src(src, lda, m0, m1, K, out, scales);
}
// Block sizes: the f32 avx512 kernel's (measured in gemm_avx512.cpp); kc even (whole k pairs per slice).
// TODO(measure): kc for a bf16 micro-panel half the f32 one's size.
constexpr BlockSizes kBlockSizes{kMr, kNr, 768, 96, 768};
static_assert(kBlockSizes.kc % 2 == 0, "K slices must hold whole k pairs");
void region(const TypedGemmCall& call, size_t m0, size_t m1, size_t n0, size_t n1) {
  gemm_bf16_simd::dp_region<Arch, kMr, kNv>(kBlockSizes, call, m0, m1, n0, n1);
}
void pack(const uint16_t* weights, size_t ld, size_t N, size_t K, size_t n0, size_t n1, uint8_t* panels) {
  gemm_bf16_simd::dp_pack<kNv>(weights, ld, N, K, n0, n1, panels);
}
}  // namespace

const Bf16Kernels kBf16KernelsAvx512Bf16{kBlockSizes, panel_bytes, src_row_bytes, prepare_src, region, pack};

}  // namespace sqrtdk::ops::gemm_detail
