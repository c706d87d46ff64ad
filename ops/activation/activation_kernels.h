// The activations' kernel table: the per-ISA kernels (activation_<isa>.cpp instantiating activation_simd.h,
// activation_ref.cpp) behind the dispatch in activation.cpp, and the list that dispatch, tests and benchmarks
// iterate. Declarations only.
#pragma once

#include "ops/activation/activation.h"
#include "ops/base/kernel_table.h"

#include <cstddef>
#include <span>

namespace sqrtdk::ops {

// One ISA's kernels, on [0, n) from the calling thread: no checks, no threads.
struct ActivationKernels {
  void (*gelu_tanh)(const float* src, float* dst, size_t n);
  void (*silu)(const float* src, float* dst, size_t n);
  void (*swiglu)(const float* gate, const float* up, float* dst, size_t n);
  void (*add)(const float* a, const float* b, float* dst, size_t n);
};

// Best ISA first, the reference last (kernel_table.h).
std::span<const KernelEntry<ActivationKernels>> activation_kernels();

void gelu_tanh_avx2(const float* src, float* dst, size_t n);
void gelu_tanh_avx512(const float* src, float* dst, size_t n);
void silu_avx2(const float* src, float* dst, size_t n);
void silu_avx512(const float* src, float* dst, size_t n);
void swiglu_avx2(const float* gate, const float* up, float* dst, size_t n);
void swiglu_avx512(const float* gate, const float* up, float* dst, size_t n);
void add_avx2(const float* a, const float* b, float* dst, size_t n);
void add_avx512(const float* a, const float* b, float* dst, size_t n);

}  // namespace sqrtdk::ops
