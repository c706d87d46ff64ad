// RoPE: argument checks, row split over threads, dispatch through the kernel table (defined here).
#include "ops/rope/rope.h"

#include "ops/base/threading.h"
#include "ops/rope/rope_kernels.h"

#include <sqrtdk/error.h>

#include <string>

namespace sqrtdk::ops {

std::span<const KernelEntry<RopeKernels>> rope_kernels() {
  static constexpr KernelEntry<RopeKernels> table[] = {
      {Isa::avx512, "rope_avx512", {rope_avx512}},
      {Isa::avx2, "rope_avx2", {rope_avx2}},
      {Isa::ref, "rope_ref_f64", {rope_ref}},
  };
  return table;
}

void rope(Isa isa, const RopeTable& table, RopeLayout layout, float* x, size_t n_tokens, size_t ld, size_t n_heads,
          size_t head_dim, size_t pos0, int n_threads) {
  if (head_dim != table.head_dim())
    throw Error("rope: head_dim " + std::to_string(head_dim) + " differs from the table's " +
                std::to_string(table.head_dim()));
  if (pos0 > table.max_seq() || n_tokens > table.max_seq() - pos0)
    throw Error("rope: positions [" + std::to_string(pos0) + ", " + std::to_string(pos0 + n_tokens) +
                ") exceed the table's max_seq " + std::to_string(table.max_seq()));
  if (n_heads == 0) throw Error("rope: n_heads must be >= 1");
  if (ld < n_heads * head_dim)
    throw Error("rope: ld " + std::to_string(ld) + " < n_heads * head_dim = " + std::to_string(n_heads * head_dim));
  if (n_tokens > 0 && x == nullptr) throw Error("rope: x is null");
  const auto kernel = select_kernel(rope_kernels(), isa).kernels.rope;
  for_row_items(n_tokens, n_heads * head_dim, n_threads, [&](size_t begin, size_t end) {
    kernel(table, layout, x + begin * ld, end - begin, ld, n_heads, head_dim, pos0 + begin);
  });
}

}  // namespace sqrtdk::ops
