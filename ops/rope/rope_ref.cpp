// RopeTable construction and the scalar reference rope (the specification).
#include "ops/rope/rope.h"

#include <sqrtdk/error.h>

#include <cassert>
#include <cmath>
#include <string>

namespace sqrtdk::ops {

RopeTable::RopeTable(size_t max_seq, size_t head_dim, float theta)
    : max_seq_(max_seq), head_dim_(head_dim), theta_(theta) {
  if (max_seq == 0) throw Error("RopeTable: max_seq must be >= 1");
  if (head_dim < 2 || head_dim % 2 != 0)
    throw Error("RopeTable: head_dim must be even and >= 2, got " + std::to_string(head_dim));
  if (!std::isfinite(theta) || !(theta > 1.0f))
    throw Error("RopeTable: theta must be finite and > 1, got " + std::to_string(theta));
  const size_t half = head_dim / 2;
  cos_half_.resize(max_seq * half);
  sin_half_.resize(max_seq * half);
  cos_pairs_.resize(max_seq * head_dim);
  sin_pairs_.resize(max_seq * head_dim);
  for (size_t pos = 0; pos < max_seq; ++pos) {
    for (size_t i = 0; i < half; ++i) {
      const double inv_freq = std::pow(static_cast<double>(theta), -2.0 * static_cast<double>(i) / head_dim);
      const double angle = static_cast<double>(pos) * inv_freq;
      const float c = static_cast<float>(std::cos(angle)), s = static_cast<float>(std::sin(angle));
      cos_half_[pos * half + i] = c;
      sin_half_[pos * half + i] = s;
      cos_pairs_[pos * head_dim + 2 * i] = c;
      cos_pairs_[pos * head_dim + 2 * i + 1] = c;
      sin_pairs_[pos * head_dim + 2 * i] = -s;
      sin_pairs_[pos * head_dim + 2 * i + 1] = s;
    }
  }
}

void rope_ref(const RopeTable& table, RopeLayout layout, float* x, size_t n_tokens, size_t ld, size_t n_heads,
              size_t head_dim, size_t pos0) {
  assert(head_dim == table.head_dim() && pos0 + n_tokens <= table.max_seq());
  const size_t half = head_dim / 2;
  for (size_t t = 0; t < n_tokens; ++t) {
    const float* c = table.cos_half(pos0 + t);  // [half]
    const float* s = table.sin_half(pos0 + t);  // [half]
    for (size_t h = 0; h < n_heads; ++h) {
      float* v = x + t * ld + h * head_dim;  // [head_dim]
      for (size_t i = 0; i < half; ++i) {
        // The pair's two indices in this layout.
        const size_t i0 = layout == RopeLayout::rotate_half ? i : 2 * i;
        const size_t i1 = layout == RopeLayout::rotate_half ? i + half : 2 * i + 1;
        const double x0 = v[i0], x1 = v[i1];
        v[i0] = static_cast<float>(x0 * c[i] - x1 * s[i]);
        v[i1] = static_cast<float>(x1 * c[i] + x0 * s[i]);
      }
    }
  }
}

}  // namespace sqrtdk::ops
