// RoPE kernels, written once on an xsimd Arch and instantiated per ISA (rope_<isa>.cpp).
//
// Contract: as ops/rope/rope.h (checked by the caller); in place; no allocation.
// rotate_half: vectors over i in [0, D/2): x0 = v[i..], x1 = v[half + i..]; y0 = x0 c - x1 s, y1 = x1 c + x0 s.
// interleaved: vectors over the whole head: y = v * cos_pairs + swap_pairs(v) * sin_pairs, where swap_pairs
// exchanges lanes 2i and 2i+1 (xsimd::swizzle; one permute per vector).
// Tails (D/2 or D not a multiple of the lanes, e.g. head_dim 80) use the same vector code on a padded copy.
#pragma once

#include "ops/base/vec_exp.h"

#include "ops/rope/rope.h"

#include <xsimd/xsimd.hpp>

#include <cstddef>
#include <cstdint>

namespace sqrtdk::ops::rope_simd {

template <class Arch>
using Batch = xsimd::batch<float, Arch>;

template <class Arch>
Batch<Arch> load_n(const float* p, size_t n) {
  alignas(64) float buf[Batch<Arch>::size] = {};
  for (size_t i = 0; i < n; ++i) buf[i] = p[i];
  return Batch<Arch>::load_aligned(buf);
}

template <class Arch>
void store_n(float* p, size_t n, Batch<Arch> v) {
  alignas(64) float buf[Batch<Arch>::size];
  v.store_aligned(buf);
  for (size_t i = 0; i < n; ++i) p[i] = buf[i];
}

struct SwapPairs {
  static constexpr uint32_t get(uint32_t i, uint32_t) { return i ^ 1u; }
};

template <class Arch>
void rope_rotate_half_head(float* v, const float* c, const float* s, size_t half) {
  using B = Batch<Arch>;
  constexpr size_t L = B::size;
  size_t i = 0;
  for (; i + L <= half; i += L) {
    const B x0 = B::load_unaligned(v + i), x1 = B::load_unaligned(v + half + i);
    const B cc = B::load_unaligned(c + i), ss = B::load_unaligned(s + i);
    vec::fms(x0, cc, x1 * ss).store_unaligned(v + i);
    vec::fma(x1, cc, x0 * ss).store_unaligned(v + half + i);
  }
  if (i < half) {
    const size_t n = half - i;
    const B x0 = load_n<Arch>(v + i, n), x1 = load_n<Arch>(v + half + i, n);
    const B cc = load_n<Arch>(c + i, n), ss = load_n<Arch>(s + i, n);
    store_n<Arch>(v + i, n, vec::fms(x0, cc, x1 * ss));
    store_n<Arch>(v + half + i, n, vec::fma(x1, cc, x0 * ss));
  }
}

template <class Arch>
void rope_interleaved_head(float* v, const float* cp, const float* sp, size_t head_dim) {
  using B = Batch<Arch>;
  using U = xsimd::batch<uint32_t, Arch>;
  constexpr size_t L = B::size;
  constexpr auto swap = xsimd::make_batch_constant<U, SwapPairs>();
  size_t i = 0;
  for (; i + L <= head_dim; i += L) {
    const B x = B::load_unaligned(v + i);
    vec::fma(x, B::load_unaligned(cp + i), xsimd::swizzle(x, swap) * B::load_unaligned(sp + i))
        .store_unaligned(v + i);
  }
  if (i < head_dim) {  // an even count: pairs never straddle the tail
    const size_t n = head_dim - i;
    const B x = load_n<Arch>(v + i, n);
    store_n<Arch>(v + i, n, vec::fma(x, load_n<Arch>(cp + i, n), xsimd::swizzle(x, swap) * load_n<Arch>(sp + i, n)));
  }
}

template <class Arch>
void rope(const RopeTable& table, RopeLayout layout, float* x, size_t n_tokens, size_t ld, size_t n_heads,
          size_t head_dim, size_t pos0) {
  for (size_t t = 0; t < n_tokens; ++t) {
    const size_t pos = pos0 + t;
    float* row = x + t * ld;
    if (layout == RopeLayout::rotate_half) {
      for (size_t h = 0; h < n_heads; ++h)
        rope_rotate_half_head<Arch>(row + h * head_dim, table.cos_half(pos), table.sin_half(pos), head_dim / 2);
    } else {
      for (size_t h = 0; h < n_heads; ++h)
        rope_interleaved_head<Arch>(row + h * head_dim, table.cos_pairs(pos), table.sin_pairs(pos), head_dim);
    }
  }
}

}  // namespace sqrtdk::ops::rope_simd
