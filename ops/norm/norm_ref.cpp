// Scalar references for LayerNorm and RMSNorm: the specification the SIMD kernels are tested against.
// Statistics in double; each output rounded once to float.
#include "ops/norm/norm.h"

#include <cassert>
#include <cmath>

namespace sqrtdk::ops {

void layer_norm_ref(const float* src, size_t n_rows, size_t d, size_t ld_src, const float* weight,
                    const float* bias, float eps, float* dst, size_t ld_dst) {
  assert(d >= 1 && ld_src >= d && ld_dst >= d);
  for (size_t r = 0; r < n_rows; ++r) {
    const float* x = src + r * ld_src;  // [d]
    float* y = dst + r * ld_dst;        // [d]
    double mean = 0.0;
    for (size_t i = 0; i < d; ++i) mean += x[i];
    mean /= static_cast<double>(d);
    double var = 0.0;  // biased (1/d), as torch.nn.LayerNorm
    for (size_t i = 0; i < d; ++i) var += (x[i] - mean) * (x[i] - mean);
    var /= static_cast<double>(d);
    const double rstd = 1.0 / std::sqrt(var + static_cast<double>(eps));
    for (size_t i = 0; i < d; ++i) {
      const double b = bias ? bias[i] : 0.0;
      y[i] = static_cast<float>((x[i] - mean) * rstd * weight[i] + b);
    }
  }
}

void rms_norm_ref(const float* src, size_t n_rows, size_t d, size_t ld_src, const float* weight, float eps,
                  float* dst, size_t ld_dst) {
  assert(d >= 1 && ld_src >= d && ld_dst >= d);
  for (size_t r = 0; r < n_rows; ++r) {
    const float* x = src + r * ld_src;  // [d]
    float* y = dst + r * ld_dst;        // [d]
    double sum_sq = 0.0;
    for (size_t i = 0; i < d; ++i) sum_sq += static_cast<double>(x[i]) * x[i];
    const double rrms = 1.0 / std::sqrt(sum_sq / static_cast<double>(d) + static_cast<double>(eps));
    for (size_t i = 0; i < d; ++i) y[i] = static_cast<float>(x[i] * rrms * weight[i]);
  }
}

}  // namespace sqrtdk::ops
