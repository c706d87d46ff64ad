// Softmax kernels for avx512: explicit instances of the templates in softmax_simd.h on xsimd::avx512bw.
#include "ops/softmax/softmax_kernels.h"
#include "ops/softmax/softmax_simd.h"

namespace sqrtdk::ops {

using Arch = xsimd::avx512bw;

void softmax_rows_avx512(size_t n_rows, size_t n_cols, const float* src, size_t ld_src, float* dst, size_t ld_dst,
                       float scale, const SoftmaxMask& mask) {
  simd::softmax_rows<Arch>(n_rows, n_cols, src, ld_src, dst, ld_dst, scale, mask);
}

void exp_rr2_p5_avx512(const float* src, float* dst, size_t n) { simd::exp_array<Arch>(src, dst, n); }

float online_softmax_update_avx512(OnlineSoftmaxState& state, float* scores, size_t n) {
  return simd::online_softmax_block<Arch>(state, scores, n);
}

}  // namespace sqrtdk::ops
