// The norms' kernel table: the per-ISA row kernels (norm_<isa>.cpp instantiating norm_simd.h, norm_ref.cpp) behind
// the dispatch in norm.cpp, and the list that dispatch, tests and benchmarks iterate. Declarations only.
#pragma once

#include "ops/base/kernel_table.h"
#include "ops/norm/norm.h"

#include <cstddef>
#include <span>

namespace sqrtdk::ops {

// One ISA's row kernels: rows [0, n_rows), no checks, no threads.
struct NormKernels {
  void (*layer_norm_rows)(const float* src, size_t n_rows, size_t d, size_t ld_src, const float* weight,
                          const float* bias, float eps, float* dst, size_t ld_dst);
  void (*rms_norm_rows)(const float* src, size_t n_rows, size_t d, size_t ld_src, const float* weight, float eps,
                        float* dst, size_t ld_dst);
};

// Best ISA first, the reference last (kernel_table.h).
std::span<const KernelEntry<NormKernels>> norm_kernels();

void layer_norm_rows_avx2(const float* src, size_t n_rows, size_t d, size_t ld_src, const float* weight,
                          const float* bias, float eps, float* dst, size_t ld_dst);
void layer_norm_rows_avx512(const float* src, size_t n_rows, size_t d, size_t ld_src, const float* weight,
                            const float* bias, float eps, float* dst, size_t ld_dst);
void rms_norm_rows_avx2(const float* src, size_t n_rows, size_t d, size_t ld_src, const float* weight, float eps,
                        float* dst, size_t ld_dst);
void rms_norm_rows_avx512(const float* src, size_t n_rows, size_t d, size_t ld_src, const float* weight, float eps,
                          float* dst, size_t ld_dst);

}  // namespace sqrtdk::ops
