// Rotary position embedding (RoPE), Hugging Face Llama semantics.
//
// For head_dim D and pair index i in [0, D/2): inv_freq[i] = theta^(-2i/D), angle(pos, i) = pos * inv_freq[i].
// A pair (x0, x1) at position pos becomes (x0 cos - x1 sin, x1 cos + x0 sin). Which elements form a pair:
//   RopeLayout::rotate_half  (x[i], x[i + D/2])   Hugging Face checkpoints (q/k rows permuted by the converter)
//   RopeLayout::interleaved  (x[2i], x[2i + 1])   Meta's original layout
//
// RopeTable: cos/sin for positions [0, max_seq), built once per Model and immutable (shareable across threads).
// Angles are computed in double and rounded once to float, so table entries are within 0.5 ulp of the true
// cos/sin. Hugging Face computes inv_freq, the angle and cos/sin in float32, so its tables differ from ours by up
// to about ulp(angle) ~ pos * 2^-24 (e.g. 4e-6 at pos 63): golden comparisons against PyTorch carry that.
//
// rope(): x holds n_tokens rows (row t at x + t * ld, token t at position pos0 + t), each with n_heads heads of
// head_dim contiguous floats; rotated in place.
// Threading: the row ops' split (ops/base/threading.h, for_row_items): under 2^16 floats on one thread, above over
// items of whole rows claimed by up to n_threads (0 = resolve_threads default). Rows are independent, so the result
// is the same for any thread count. (The engine calls it with one thread from its own items, one kv group each:
// models/runtime/executor.cpp.)
// Accuracy: SIMD within 2 ulp of max(|x0|, |x1|) of the double reference (same table).
// Errors: sqrtdk::Error if head_dim differs from the table's, pos0 + n_tokens > max_seq, ld < n_heads * head_dim,
// or x is null.
#pragma once

#include <sqrtdk/isa.h>

#include <cstddef>
#include <vector>

namespace sqrtdk::ops {

enum class RopeLayout { rotate_half, interleaved };

class RopeTable {
 public:
  // Throws sqrtdk::Error unless max_seq >= 1, head_dim even and >= 2, theta finite and > 1.
  RopeTable(size_t max_seq, size_t head_dim, float theta);

  size_t max_seq() const { return max_seq_; }
  size_t head_dim() const { return head_dim_; }
  float theta() const { return theta_; }

  // [head_dim / 2]: cos / sin of angle(pos, i).
  const float* cos_half(size_t pos) const { return cos_half_.data() + pos * (head_dim_ / 2); }
  const float* sin_half(size_t pos) const { return sin_half_.data() + pos * (head_dim_ / 2); }
  // [head_dim], for the interleaved layout: cos_pairs[2i] = cos_pairs[2i+1] = cos(angle(pos, i));
  // sin_pairs[2i] = -sin(angle), sin_pairs[2i+1] = +sin(angle), so y = x * cos_pairs + swap_pairs(x) * sin_pairs.
  const float* cos_pairs(size_t pos) const { return cos_pairs_.data() + pos * head_dim_; }
  const float* sin_pairs(size_t pos) const { return sin_pairs_.data() + pos * head_dim_; }

 private:
  size_t max_seq_, head_dim_;
  float theta_;
  std::vector<float> cos_half_, sin_half_;    // [max_seq][head_dim / 2]
  std::vector<float> cos_pairs_, sin_pairs_;  // [max_seq][head_dim]
};

void rope(Isa isa, const RopeTable& table, RopeLayout layout, float* x, size_t n_tokens, size_t ld, size_t n_heads,
          size_t head_dim, size_t pos0, int n_threads = 1);

// Scalar reference: same table, each output in double from the float inputs, rounded once.
void rope_ref(const RopeTable& table, RopeLayout layout, float* x, size_t n_tokens, size_t ld, size_t n_heads,
              size_t head_dim, size_t pos0);

// The per-ISA kernels and their table: rope_kernels.h.

}  // namespace sqrtdk::ops
