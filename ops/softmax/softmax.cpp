// Softmax: argument checks at the op boundary and dispatch through the kernel table (defined here); the scalar
// reference (the spec) is in softmax_ref.cpp, the SIMD kernels in softmax_simd.h.
#include "ops/softmax/softmax.h"

#include "ops/softmax/softmax_kernels.h"

#include "ops/base/threading.h"

#include <sqrtdk/error.h>

#include <algorithm>
#include <cmath>
#include <string>

namespace sqrtdk::ops {

std::span<const KernelEntry<SoftmaxKernels>> softmax_kernels() {
  static constexpr KernelEntry<SoftmaxKernels> table[] = {
      {Isa::avx512, "softmax_avx512_rr2_p5", {softmax_rows_avx512, exp_rr2_p5_avx512, online_softmax_update_avx512}},
      {Isa::avx2, "softmax_avx2_rr2_p5", {softmax_rows_avx2, exp_rr2_p5_avx2, online_softmax_update_avx2}},
      {Isa::ref, "softmax_ref_f64", {softmax_rows_ref, exp_ref, online_softmax_update_ref}},
  };
  return table;
}

void softmax_rows(Isa isa, size_t n_rows, size_t n_cols, const float* src, size_t ld_src, float* dst, size_t ld_dst,
                  float scale, const SoftmaxMask& mask, int n_threads) {
  const std::string shape = "softmax_rows(n_rows=" + std::to_string(n_rows) + ", n_cols=" + std::to_string(n_cols) +
                            ", ld_src=" + std::to_string(ld_src) + ", ld_dst=" + std::to_string(ld_dst) + ")";
  if (!cpu_supports(isa))
    throw Error(ErrorKind::unsupported, shape + ": ISA " + isa_name(isa) + " is not supported by this CPU");
  if (n_rows == 0 || n_cols == 0) return;
  if (src == nullptr || dst == nullptr) throw Error(shape + ": src and dst must not be null");
  if (ld_src < n_cols || ld_dst < n_cols) throw Error(shape + ": ld_src and ld_dst must be >= n_cols");
  if (src == dst && ld_src != ld_dst) throw Error(shape + ": in place needs ld_src == ld_dst");
  if (mask.additive != nullptr && mask.ld < n_cols) throw Error(shape + ": mask.ld must be >= n_cols");
  if (!std::isfinite(scale)) throw Error(shape + ": scale must be finite, got " + std::to_string(scale));
  // The row ops' split (threading.h): one thread under 2^16 elements, else items of whole rows.
  const SoftmaxKernels& kernels = select_kernel(softmax_kernels(), isa).kernels;
  for_row_items(n_rows, n_cols, n_threads, [&](size_t begin, size_t end) {
    SoftmaxMask m = mask;
    if (m.additive) m.additive += begin * m.ld;
    m.pos0 += begin;  // row begin + i keeps columns 0 .. pos0 + begin + i
    kernels.rows(end - begin, n_cols, src + begin * ld_src, ld_src, dst + begin * ld_dst, ld_dst, scale, m);
  });
}

void exp_rr2_p5(Isa isa, const float* src, float* dst, size_t n) {
  if (!cpu_supports(isa))
    throw Error(ErrorKind::unsupported, std::string("exp_rr2_p5: ISA ") + isa_name(isa) + " is not supported");
  if (n == 0) return;
  if (src == nullptr || dst == nullptr) throw Error("exp_rr2_p5: src and dst must not be null");
  select_kernel(softmax_kernels(), isa).kernels.exp(src, dst, n);
}

float online_softmax_update(Isa isa, OnlineSoftmaxState& state, float* scores, size_t n) {
  if (!cpu_supports(isa))
    throw Error(ErrorKind::unsupported,
                std::string("online_softmax_update: ISA ") + isa_name(isa) + " is not supported");
  if (n > 0 && scores == nullptr) throw Error("online_softmax_update: scores must not be null");
  return select_kernel(softmax_kernels(), isa).kernels.online_update(state, scores, n);
}

OnlineSoftmaxState online_softmax_merge(const OnlineSoftmaxState& a, const OnlineSoftmaxState& b, float& factor_a,
                                        float& factor_b) {
  const float inf = std::numeric_limits<float>::infinity();
  if (std::isnan(a.max) || std::isnan(b.max)) {  // NaN is never hidden: a NaN state makes the merge NaN
    factor_a = factor_b = std::numeric_limits<float>::quiet_NaN();
    return {factor_a, factor_a};
  }
  const float m = a.max > b.max ? a.max : b.max;
  if (m == -inf) {  // both empty
    factor_a = factor_b = 1.0f;
    return a;
  }
  factor_a = a.max == -inf ? 0.0f : std::exp(a.max - m);
  factor_b = b.max == -inf ? 0.0f : std::exp(b.max - m);
  return {m, a.sum * factor_a + b.sum * factor_b};
}

}  // namespace sqrtdk::ops
