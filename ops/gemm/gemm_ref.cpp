// The GEMM specification: gemm_ref and gemm_unpacked_ref (double accumulation over unpacked weights), the scalar
// activations, and the same math as the Isa::ref entry of the kernel table (region / pack / direct over panels of
// width 1, i.e. the plain [N][K] copy), so SQRTDK_ISA=ref runs the spec through the driver's own dispatch.
#include "ops/gemm/gemm.h"
#include "ops/gemm/gemm_kernels.h"

#include <cmath>
#include <cstddef>

namespace sqrtdk::ops {

float gelu_tanh_ref(float x) {
  const double xd = x;
  return static_cast<float>(0.5 * xd * (1.0 + std::tanh(0.7978845608028654 * (xd + 0.044715 * xd * xd * xd))));
}

float silu_ref(float x) {
  const double xd = x;
  return static_cast<float>(xd / (1.0 + std::exp(-xd)));
}

namespace {

// The epilogue on one element whose product (alpha·Σ, in double) is `acc`; multiply/residual already offset to
// the element.
float epilogue_ref(double acc, const float* bias, Activation activation, const float* multiply,
                   const float* residual) {
  float v = static_cast<float>(acc);
  if (bias) v += *bias;
  if (activation == Activation::gelu_tanh) v = gelu_tanh_ref(v);
  if (activation == Activation::silu) v = silu_ref(v);
  if (multiply) v *= *multiply;
  if (residual) v += *residual;
  return v;
}

}  // namespace

void gemm_ref(const float* src, size_t M, size_t lda, const float* weights, size_t N, size_t K, size_t ld_weights,
              float* dst, size_t ldc, const GemmEpilogue& epilogue) {
  // dst[m, n] = epilogue(Σ_k src[m, k] · weights[n, k]), the sum in double.
  const GemmEpilogue& e = epilogue;
  for (size_t m = 0; m < M; ++m)
    for (size_t n = 0; n < N; ++n) {
      double acc = 0;
      for (size_t k = 0; k < K; ++k) acc += static_cast<double>(src[m * lda + k]) * weights[n * ld_weights + k];
      dst[m * ldc + n] = epilogue_ref(acc, e.bias ? e.bias + n : nullptr, e.activation,
                                      e.multiply ? e.multiply + m * e.ld_multiply + n : nullptr,
                                      e.residual ? e.residual + m * e.ld_residual + n : nullptr);
    }
}

void gemm_unpacked_ref(size_t M, size_t N, size_t K, float alpha, const float* A, size_t lda, const float* B,
                       size_t ldb, BLayout b_layout, float* C, size_t ldc) {
  gemm_detail::gemm_direct_ref(M, N, K, alpha, A, lda, B, ldb, b_layout == BLayout::kn, C, ldc, 0, N);
}

namespace gemm_detail {

float epilogue_ref_at(double acc, const GemmCall& call, size_t m, size_t n) {
  const float* multiply =
      call.multiply ? call.multiply + (m - call.multiply_m0) * call.ld_multiply + (n - call.multiply_n0) : nullptr;
  const float* residual =
      call.residual ? call.residual + (m - call.residual_m0) * call.ld_residual + (n - call.residual_n0) : nullptr;
  return epilogue_ref(static_cast<double>(call.alpha) * acc, call.bias ? call.bias + n : nullptr, call.activation,
                      multiply, residual);
}

void gemm_region_ref(const GemmCall& call, size_t m0, size_t m1, size_t n0, size_t n1) {
  // panels: [N][K] (width-1 panels). Each element read fully (operands first), then written: dst may alias them.
  for (size_t m = m0; m < m1; ++m)
    for (size_t n = n0; n < n1; ++n) {
      double acc = 0;
      for (size_t k = 0; k < call.K; ++k)
        acc += static_cast<double>(call.src[m * call.lda + k]) * call.panels[n * call.K + k];
      const float* multiply =
          call.multiply ? call.multiply + (m - call.multiply_m0) * call.ld_multiply + (n - call.multiply_n0) : nullptr;
      const float* residual =
          call.residual ? call.residual + (m - call.residual_m0) * call.ld_residual + (n - call.residual_n0) : nullptr;
      call.dst[m * call.ldc + n] = epilogue_ref(static_cast<double>(call.alpha) * acc,
                                                call.bias ? call.bias + n : nullptr, call.activation, multiply,
                                                residual);
    }
}

void pack_panels_ref(const float* b, size_t ldb, bool b_is_kn, size_t, size_t K, size_t n0, size_t n1,
                     float* panels) {
  for (size_t n = n0; n < n1; ++n)
    for (size_t k = 0; k < K; ++k) panels[n * K + k] = b_is_kn ? b[k * ldb + n] : b[n * ldb + k];
}

void gemm_direct_ref(size_t M, size_t, size_t K, float alpha, const float* A, size_t lda, const float* B,
                     size_t ldb, bool b_is_kn, float* C, size_t ldc, size_t n0, size_t n1) {
  // C[m, n] = alpha · Σ_k A[m, k] · op(B)[k, n], the sum in double.
  for (size_t m = 0; m < M; ++m)
    for (size_t n = n0; n < n1; ++n) {
      double acc = 0;
      for (size_t k = 0; k < K; ++k)
        acc += static_cast<double>(A[m * lda + k]) * (b_is_kn ? B[k * ldb + n] : B[n * ldb + k]);
      C[m * ldc + n] = static_cast<float>(alpha * acc);
    }
}

}  // namespace gemm_detail
}  // namespace sqrtdk::ops
