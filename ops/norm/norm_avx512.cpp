// LayerNorm / RMSNorm kernels for avx512: instantiations of ops/norm/norm_simd.h with xsimd::avx512bw.
#include "ops/norm/norm_kernels.h"
#include "ops/norm/norm_simd.h"

namespace sqrtdk::ops {

void layer_norm_rows_avx512(const float* src, size_t n_rows, size_t d, size_t ld_src, const float* weight,
                          const float* bias, float eps, float* dst, size_t ld_dst) {
  norm_simd::layer_norm_rows<xsimd::avx512bw>(src, n_rows, d, ld_src, weight, bias, eps, dst, ld_dst);
}

void rms_norm_rows_avx512(const float* src, size_t n_rows, size_t d, size_t ld_src, const float* weight, float eps,
                        float* dst, size_t ld_dst) {
  norm_simd::rms_norm_rows<xsimd::avx512bw>(src, n_rows, d, ld_src, weight, eps, dst, ld_dst);
}

}  // namespace sqrtdk::ops
