// Masked loads/stores of the first `count` (< 16) floats of a zmm, for gemm_simd.h's PartialIo: one definition for
// every AVX-512 GEMM translation unit (f32, bf16 widening, bf16 vdpbf16ps). Include only from *_avx512*.cpp TUs.
#pragma once

#include "ops/gemm/gemm_simd.h"

#include <immintrin.h>

namespace sqrtdk::ops::gemm_simd {

// For any xsimd Arch whose float batch is one zmm (avx512bw, and the bf16 TU's own arch type).
template <class Arch>
struct PartialIoZmm {
  static Vec<Arch> load(const float* p, size_t count) {
    return _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << count) - 1), p);
  }
  static void store(float* p, Vec<Arch> v, size_t count) {
    _mm512_mask_storeu_ps(p, static_cast<__mmask16>((1u << count) - 1), v);
  }
};

template <>
struct PartialIo<xsimd::avx512bw> : PartialIoZmm<xsimd::avx512bw> {};

}  // namespace sqrtdk::ops::gemm_simd
