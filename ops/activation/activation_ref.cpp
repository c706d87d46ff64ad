// Scalar references for the activations: the specification. Each value in double, rounded once to float.
#include "ops/activation/activation.h"

#include <cmath>

namespace sqrtdk::ops {

// 0.5 x (1 + tanh(z)) written as x / (1 + exp(-2z)), the same value without the cancellation of 1 + tanh(z) for
// z << 0 (in double, 1 + tanh(-20) keeps no correct digits). PyTorch evaluates the tanh form in float32 and so
// returns -0 below x = -5.5 or so, where the true value is under 1e-9 in magnitude.
void gelu_tanh_ref(const float* src, float* dst, size_t n) {
  const double k = std::sqrt(2.0 / M_PI);
  for (size_t i = 0; i < n; ++i) {
    const double v = src[i];
    dst[i] = static_cast<float>(v / (1.0 + std::exp(-2.0 * k * (v + 0.044715 * v * v * v))));
  }
}

void silu_ref(const float* src, float* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const double v = src[i];
    dst[i] = static_cast<float>(v / (1.0 + std::exp(-v)));
  }
}

void gelu_tanh_ref(float* x, size_t n) { gelu_tanh_ref(x, x, n); }
void silu_ref(float* x, size_t n) { silu_ref(x, x, n); }

void swiglu_ref(const float* gate, const float* up, float* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const double g = gate[i];
    dst[i] = static_cast<float>(g / (1.0 + std::exp(-g)) * up[i]);
  }
}

void add_ref(const float* a, const float* b, float* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = a[i] + b[i];
}

}  // namespace sqrtdk::ops
