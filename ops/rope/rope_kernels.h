// RoPE's kernel table: the per-ISA kernels (rope_<isa>.cpp instantiating rope_simd.h, rope_ref.cpp) behind the
// dispatch in rope.cpp, and the list that dispatch, tests and benchmarks iterate. Declarations only.
#pragma once

#include "ops/base/kernel_table.h"
#include "ops/rope/rope.h"

#include <cstddef>
#include <span>

namespace sqrtdk::ops {

// One ISA's kernel: no checks, no threads.
struct RopeKernels {
  void (*rope)(const RopeTable& table, RopeLayout layout, float* x, size_t n_tokens, size_t ld, size_t n_heads,
               size_t head_dim, size_t pos0);
};

// Best ISA first, the reference last (kernel_table.h).
std::span<const KernelEntry<RopeKernels>> rope_kernels();

void rope_avx2(const RopeTable& table, RopeLayout layout, float* x, size_t n_tokens, size_t ld, size_t n_heads,
               size_t head_dim, size_t pos0);
void rope_avx512(const RopeTable& table, RopeLayout layout, float* x, size_t n_tokens, size_t ld, size_t n_heads,
                 size_t head_dim, size_t pos0);

}  // namespace sqrtdk::ops
