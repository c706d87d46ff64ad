// LayerNorm / RMSNorm: argument checks, row split over threads, dispatch through the kernel table (defined here).
#include "ops/norm/norm.h"

#include "ops/norm/norm_kernels.h"

#include "ops/base/threading.h"

#include <sqrtdk/error.h>

#include <algorithm>
#include <cmath>
#include <string>

namespace sqrtdk::ops {
namespace {

void check_rows(const char* op, const float* src, size_t n_rows, size_t d, size_t ld_src, const float* weight,
                float eps, const float* dst, size_t ld_dst) {
  const std::string where = std::string(op) + ": ";
  if (d == 0) throw Error(where + "row width d must be >= 1");
  if (ld_src < d || ld_dst < d)
    throw Error(where + "leading dimensions ld_src " + std::to_string(ld_src) + ", ld_dst " + std::to_string(ld_dst) +
                " must be >= d " + std::to_string(d));
  if (n_rows > 0 && (src == nullptr || dst == nullptr || weight == nullptr))
    throw Error(where + "src, weight and dst must not be null");
  if (!(eps > 0.0f) || !std::isfinite(eps)) throw Error(where + "eps must be finite and > 0, got " + std::to_string(eps));
}

}  // namespace

std::span<const KernelEntry<NormKernels>> norm_kernels() {
  static constexpr KernelEntry<NormKernels> table[] = {
      {Isa::avx512, "norm_rows_avx512", {layer_norm_rows_avx512, rms_norm_rows_avx512}},
      {Isa::avx2, "norm_rows_avx2", {layer_norm_rows_avx2, rms_norm_rows_avx2}},
      {Isa::ref, "norm_ref_f64", {layer_norm_ref, rms_norm_ref}},
  };
  return table;
}

void layer_norm(Isa isa, const float* src, size_t n_rows, size_t d, size_t ld_src, const float* weight,
                const float* bias, float eps, float* dst, size_t ld_dst, int n_threads) {
  const NormKernels& kernels = select_kernel(norm_kernels(), isa).kernels;
  check_rows("layer_norm", src, n_rows, d, ld_src, weight, eps, dst, ld_dst);
  for_row_items(n_rows, d, n_threads, [&](size_t begin, size_t end) {
    const float* s = src + begin * ld_src;
    float* o = dst + begin * ld_dst;
    const size_t rows = end - begin;
    kernels.layer_norm_rows(s, rows, d, ld_src, weight, bias, eps, o, ld_dst);
  });
}

void rms_norm(Isa isa, const float* src, size_t n_rows, size_t d, size_t ld_src, const float* weight, float eps,
              float* dst, size_t ld_dst, int n_threads) {
  const NormKernels& kernels = select_kernel(norm_kernels(), isa).kernels;
  check_rows("rms_norm", src, n_rows, d, ld_src, weight, eps, dst, ld_dst);
  for_row_items(n_rows, d, n_threads, [&](size_t begin, size_t end) {
    const float* s = src + begin * ld_src;
    float* o = dst + begin * ld_dst;
    const size_t rows = end - begin;
    kernels.rms_norm_rows(s, rows, d, ld_src, weight, eps, o, ld_dst);
  });
}

}  // namespace sqrtdk::ops
