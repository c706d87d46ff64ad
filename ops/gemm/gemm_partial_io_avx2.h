// Masked loads/stores of the first `count` (< 8) floats of a ymm, for gemm_simd.h's PartialIo: one definition for
// the AVX2 GEMM translation units (f32, bf16 widening). Include only from *_avx2.cpp TUs.
#pragma once

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
