// Softmax's kernel table: the per-ISA kernels (softmax_<isa>.cpp instantiating softmax_simd.h, softmax_ref.cpp)
// behind the dispatch in softmax.cpp, and the list that dispatch, tests and benchmarks iterate. Declarations only.
#pragma once

#include "ops/base/kernel_table.h"
#include "ops/softmax/softmax.h"

#include <cstddef>
#include <span>

namespace sqrtdk::ops {

// One ISA's softmax kernels; no argument checks, no threads.
struct SoftmaxKernels {
  void (*rows)(size_t n_rows, size_t n_cols, const float* src, size_t ld_src, float* dst, size_t ld_dst, float scale,
               const SoftmaxMask& mask);
  void (*exp)(const float* src, float* dst, size_t n);                           // exp_rr2_p5 over an array
  float (*online_update)(OnlineSoftmaxState& state, float* scores, size_t n);  // online_softmax_update
};

// Best ISA first, the reference last (kernel_table.h).
std::span<const KernelEntry<SoftmaxKernels>> softmax_kernels();

void softmax_rows_avx512(size_t n_rows, size_t n_cols, const float* src, size_t ld_src, float* dst, size_t ld_dst,
                         float scale, const SoftmaxMask& mask);
void softmax_rows_avx2(size_t n_rows, size_t n_cols, const float* src, size_t ld_src, float* dst, size_t ld_dst,
                       float scale, const SoftmaxMask& mask);
void exp_rr2_p5_avx512(const float* src, float* dst, size_t n);
void exp_rr2_p5_avx2(const float* src, float* dst, size_t n);
void exp_ref(const float* src, float* dst, size_t n);  // std::exp in double, rounded once
float online_softmax_update_avx512(OnlineSoftmaxState& state, float* scores, size_t n);
float online_softmax_update_avx2(OnlineSoftmaxState& state, float* scores, size_t n);
float online_softmax_update_ref(OnlineSoftmaxState& state, float* scores, size_t n);

}  // namespace sqrtdk::ops
