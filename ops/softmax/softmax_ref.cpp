// The specification of softmax_rows, exp_rr2_p5 and online_softmax_update: plain loops, double accumulation.
#include "ops/softmax/softmax.h"
#include "ops/softmax/softmax_kernels.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace sqrtdk::ops {

void softmax_rows_ref(size_t n_rows, size_t n_cols, const float* src, size_t ld_src, float* dst, size_t ld_dst,
                      float scale, const SoftmaxMask& mask) {
  const double inf = std::numeric_limits<double>::infinity();
  for (size_t r = 0; r < n_rows; ++r) {
    const float* x = src + r * ld_src;                                           // [n_cols]
    const float* add = mask.additive ? mask.additive + r * mask.ld : nullptr;  // [n_cols]
    float* y = dst + r * ld_dst;                                                 // [n_cols]
    const size_t n_valid = mask.causal ? std::min(n_cols, mask.pos0 + r + 1) : n_cols;
    auto value = [&](size_t j) { return double(scale) * x[j] + (add ? double(add[j]) : 0.0); };
    double m = -inf;
    bool has_nan = false;
    for (size_t j = 0; j < n_valid; ++j) {
      const double v = value(j);
      has_nan |= std::isnan(v);
      m = std::max(m, v);
    }
    if (has_nan) {
      for (size_t j = 0; j < n_valid; ++j) y[j] = std::numeric_limits<float>::quiet_NaN();
    } else if (m == -inf) {  // fully masked: zeros by definition (documented), not NaN
      for (size_t j = 0; j < n_valid; ++j) y[j] = 0.0f;
    } else {
      double sum = 0.0;
      for (size_t j = 0; j < n_valid; ++j) sum += std::exp(value(j) - m);
      for (size_t j = 0; j < n_valid; ++j) y[j] = static_cast<float>(std::exp(value(j) - m) / sum);
    }
    for (size_t j = n_valid; j < n_cols; ++j) y[j] = 0.0f;
  }
}

void exp_ref(const float* src, float* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = static_cast<float>(std::exp(static_cast<double>(src[i])));
}

float online_softmax_update_ref(OnlineSoftmaxState& state, float* scores, size_t n) {
  const float inf = std::numeric_limits<float>::infinity();
  float new_max = state.max;
  bool has_nan = std::isnan(state.max);
  for (size_t i = 0; i < n; ++i) {
    has_nan |= std::isnan(scores[i]);
    new_max = scores[i] > new_max ? scores[i] : new_max;
  }
  if (has_nan) {  // NaN is never hidden: the scores, the sum and the factor become NaN (factor 0 on the first block)
    const float nan = std::numeric_limits<float>::quiet_NaN();
    for (size_t i = 0; i < n; ++i) scores[i] = nan;
    const float factor = state.max == -inf ? 0.0f : nan;
    state.max = state.sum = nan;
    return factor;
  }
  if (new_max == -inf) {
    for (size_t i = 0; i < n; ++i) scores[i] = 0.0f;
    return 1.0f;
  }
  double sum = 0.0;
  for (size_t i = 0; i < n; ++i) {
    scores[i] = static_cast<float>(std::exp(static_cast<double>(scores[i]) - new_max));
    sum += scores[i];
  }
  const float factor = state.max == -inf ? 0.0f : std::exp(state.max - new_max);
  state.sum = static_cast<float>(state.sum * static_cast<double>(factor) + sum);
  state.max = new_max;
  return factor;
}

}  // namespace sqrtdk::ops
