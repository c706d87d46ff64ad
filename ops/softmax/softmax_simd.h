// SIMD building blocks of softmax and attention, written once as templates on the xsimd Arch and instantiated per
// ISA (softmax_avx2.cpp with xsimd::fma3<xsimd::avx2>, softmax_avx512.cpp with xsimd::avx512bw; attention's TUs
// include this header too). Everything here is a template on Arch (ODR safety across TUs with different -m flags).
//
//   load_partial / store_partial  first n < W lanes (masked load/store, never touching memory past n)
//   exp_array                    exp_rr2_p5 (ops/base/vec_exp.h) over an array
//   softmax_row                  one row: max, exp + sum, normalize (scale, additive mask, valid length fused)
//   online_softmax_block         fold a block of one row into an OnlineSoftmaxState (decode chunks)
//   online_softmax_columns       the same for many rows at once, vectorized over rows (fused prefill tiles)
#pragma once

#include "ops/softmax/softmax.h"

#include "ops/base/vec_exp.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>

namespace sqrtdk::ops::simd {

using vec::exp_rr2_p5;
using vec::kIsAvx512;

template <class Arch>
using Batch = xsimd::batch<float, Arch>;

// Lanes [0, n) from p (n < W), the rest `fill`. Never reads past p + n.
template <class Arch>
inline Batch<Arch> load_partial(const float* p, size_t n, float fill = 0.0f) {
  if constexpr (kIsAvx512<Arch>) {
    const __mmask16 m = static_cast<__mmask16>((1u << n) - 1u);
    return _mm512_mask_loadu_ps(_mm512_set1_ps(fill), m, p);
  } else {
    const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    const __m256 v = _mm256_maskload_ps(p, m);
    return _mm256_blendv_ps(_mm256_set1_ps(fill), v, _mm256_castsi256_ps(m));
  }
}

// Stores lanes [0, n) of v to p (n < W). Never writes past p + n.
template <class Arch>
inline void store_partial(float* p, Batch<Arch> v, size_t n) {
  if constexpr (kIsAvx512<Arch>) {
    _mm512_mask_storeu_ps(p, static_cast<__mmask16>((1u << n) - 1u), v);
  } else {
    const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    _mm256_maskstore_ps(p, m, v);
  }
}

template <class Arch>
inline float reduce_max(Batch<Arch> v) {
  alignas(64) float lanes[Batch<Arch>::size];
  v.store_aligned(lanes);
  float m = lanes[0];
  for (size_t i = 1; i < Batch<Arch>::size; ++i) m = lanes[i] > m ? lanes[i] : m;
  return m;
}

template <class Arch>
inline void exp_array(const float* src, float* dst, size_t n) {
  using B = Batch<Arch>;
  constexpr size_t W = B::size;
  size_t i = 0;
  for (; i + W <= n; i += W) exp_rr2_p5<Arch>(B::load_unaligned(src + i)).store_unaligned(dst + i);
  if (i < n) store_partial<Arch>(dst + i, exp_rr2_p5<Arch>(load_partial<Arch>(src + i, n - i)), n - i);
}

// Lanes >= n of v replaced by `fill` (n < W).
template <class Arch>
inline Batch<Arch> fill_from(Batch<Arch> v, size_t n, float fill) {
  if constexpr (kIsAvx512<Arch>) {
    return _mm512_mask_blend_ps(static_cast<__mmask16>((1u << n) - 1u), _mm512_set1_ps(fill), v);
  } else {
    const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    return _mm256_blendv_ps(_mm256_set1_ps(fill), v, _mm256_castsi256_ps(m));
  }
}

// Rows of at most kShortRowVectors vectors (128 floats on avx512: attention rows of short contexts) after the max
// pass: exp, sum and normalize with the exponentials held in registers, so the row is written once and never
// re-read (the long-row path stores e, then reads it back to normalize). Same sum order as the long path.
inline constexpr size_t kShortRowVectors = 8;

template <class Arch>
inline void softmax_row_short(const float* src, float* dst, size_t n_valid, Batch<Arch> neg_max, Batch<Arch> vscale,
                              const float* mask) {
  using B = Batch<Arch>;
  constexpr size_t W = B::size;
  const size_t n_full = n_valid / W, tail = n_valid - n_full * W;
  B e[kShortRowVectors];
  B s0(0.0f), s1(0.0f);
#pragma GCC unroll 8
  for (size_t i = 0; i < kShortRowVectors; ++i) {
    if (i >= n_full) break;
    const B x = B::load_unaligned(src + i * W);
    const B z = mask ? vec::fma(x, vscale, B::load_unaligned(mask + i * W)) + neg_max : vec::fma(x, vscale, neg_max);
    e[i] = exp_rr2_p5<Arch>(z);
    if (i % 2 == 0)
      s0 += e[i];
    else
      s1 += e[i];
  }
  double sum = n_full > 0 ? xsimd::hadd(s0 + s1) : 0.0;
  B e_tail(0.0f);
  if (tail > 0) {
    const B x = load_partial<Arch>(src + n_full * W, tail);
    const B y = mask ? vec::fma(x, vscale, load_partial<Arch>(mask + n_full * W, tail)) : x * vscale;
    e_tail = fill_from<Arch>(exp_rr2_p5<Arch>(fill_from<Arch>(y, tail, -std::numeric_limits<float>::infinity()) + neg_max),
                             tail, 0.0f);
    sum += xsimd::hadd(e_tail);
  }
  const B inv(static_cast<float>(1.0 / sum));
#pragma GCC unroll 8
  for (size_t i = 0; i < kShortRowVectors; ++i) {
    if (i >= n_full) break;
    (e[i] * inv).store_unaligned(dst + i * W);
  }
  if (tail > 0) store_partial<Arch>(dst + n_full * W, e_tail * inv, tail);
}

// One softmax row: dst[j] = softmax(scale*src + mask)[j] for j < n_valid, dst[j] = 0 for n_valid <= j < n_cols.
// mask may be null. Three passes (max; exp + sum; normalize): the row is read from memory once, the later passes
// hit cache for rows up to L2 size. Short rows take softmax_row_short after the max pass.
template <class Arch>
inline void softmax_row(const float* src, float* dst, size_t n_valid, size_t n_cols, float scale, const float* mask) {
  using B = Batch<Arch>;
  constexpr size_t W = B::size;
  const float inf = std::numeric_limits<float>::infinity();
  const B vscale(scale);
  auto y_at = [&](size_t j) {
    const B x = B::load_unaligned(src + j);
    return mask ? vec::fma(x, vscale, B::load_unaligned(mask + j)) : x * vscale;
  };
  auto y_tail = [&](size_t j) {
    const size_t n = n_valid - j;
    const B x = load_partial<Arch>(src + j, n);
    return fill_from<Arch>(mask ? vec::fma(x, vscale, load_partial<Arch>(mask + j, n)) : x * vscale, n, -inf);
  };
  // Pass 1: the max of y. Four accumulators hide the max latency.
  B m0(-inf), m1(-inf), m2(-inf), m3(-inf);
  size_t j = 0;
  for (; j + 4 * W <= n_valid; j += 4 * W) {
    m0 = xsimd::max(m0, y_at(j));
    m1 = xsimd::max(m1, y_at(j + W));
    m2 = xsimd::max(m2, y_at(j + 2 * W));
    m3 = xsimd::max(m3, y_at(j + 3 * W));
  }
  for (; j + W <= n_valid; j += W) m0 = xsimd::max(m0, y_at(j));
  if (j < n_valid) m1 = xsimd::max(m1, y_tail(j));
  const float row_max = reduce_max<Arch>(xsimd::max(xsimd::max(m0, m1), xsimd::max(m2, m3)));
  if (row_max == -inf) {
    // Fully masked row: zeros, unless a NaN hid from the max (x86 max drops a NaN operand): then NaN.
    bool has_nan = false;
    for (size_t i = 0; i < n_valid; ++i) has_nan |= std::isnan(src[i]) || (mask && std::isnan(mask[i]));
    const float fill = has_nan ? std::numeric_limits<float>::quiet_NaN() : 0.0f;
    for (size_t i = 0; i < n_valid; ++i) dst[i] = fill;
    for (size_t i = n_valid; i < n_cols; ++i) dst[i] = 0.0f;
    return;
  }
  // z = y - max, with the subtraction folded into the scaling FMA when there is no mask.
  const B neg_max(-row_max);
  if (n_valid <= kShortRowVectors * W) {
    softmax_row_short<Arch>(src, dst, n_valid, neg_max, vscale, mask);
    for (size_t i = n_valid; i < n_cols; ++i) dst[i] = 0.0f;
    return;
  }
  auto z_at = [&](size_t j) {
    const B x = B::load_unaligned(src + j);
    return mask ? vec::fma(x, vscale, B::load_unaligned(mask + j)) + neg_max : vec::fma(x, vscale, neg_max);
  };
  // Pass 2: e = exp(y - max), stored, summed. A NaN anywhere makes the sum NaN, so pass 3 spreads it to the row.
  // The sum runs in float within chunks of 16 vectors and in double across chunks, so long rows (100 000 columns)
  // still sum to 1 within 1e-6 after normalization.
  double sum = 0.0;
  j = 0;
  while (j + W <= n_valid) {
    const size_t chunk_end = std::min(n_valid - (n_valid - j) % W, j + 16 * W);
    B s0(0.0f), s1(0.0f);
    for (; j + 2 * W <= chunk_end; j += 2 * W) {
      const B e0 = exp_rr2_p5<Arch>(z_at(j));
      const B e1 = exp_rr2_p5<Arch>(z_at(j + W));
      e0.store_unaligned(dst + j);
      e1.store_unaligned(dst + j + W);
      s0 += e0;
      s1 += e1;
    }
    for (; j < chunk_end; j += W) {
      const B e = exp_rr2_p5<Arch>(z_at(j));
      e.store_unaligned(dst + j);
      s0 += e;
    }
    sum += xsimd::hadd(s0 + s1);
  }
  if (j < n_valid) {
    const B e = fill_from<Arch>(exp_rr2_p5<Arch>(y_tail(j) + neg_max), n_valid - j, 0.0f);
    store_partial<Arch>(dst + j, e, n_valid - j);
    sum += xsimd::hadd(e);
  }
  // Pass 3: normalize.
  const B inv(static_cast<float>(1.0 / sum));
  j = 0;
  for (; j + W <= n_valid; j += W) (B::load_unaligned(dst + j) * inv).store_unaligned(dst + j);
  if (j < n_valid) store_partial<Arch>(dst + j, load_partial<Arch>(dst + j, n_valid - j) * inv, n_valid - j);
  for (size_t i = n_valid; i < n_cols; ++i) dst[i] = 0.0f;
}

template <class Arch>
inline void softmax_rows(size_t n_rows, size_t n_cols, const float* src, size_t ld_src, float* dst, size_t ld_dst,
                         float scale, const SoftmaxMask& mask) {
  for (size_t r = 0; r < n_rows; ++r) {
    const size_t n_valid = mask.causal ? std::min(n_cols, mask.pos0 + r + 1) : n_cols;
    softmax_row<Arch>(src + r * ld_src, dst + r * ld_dst, n_valid, n_cols, scale,
                      mask.additive ? mask.additive + r * mask.ld : nullptr);
  }
}

// Folds scores[0, n) into state (contract: online_softmax_update in softmax.h).
template <class Arch>
inline float online_softmax_block(OnlineSoftmaxState& state, float* scores, size_t n) {
  using B = Batch<Arch>;
  constexpr size_t W = B::size;
  const float inf = std::numeric_limits<float>::infinity();
  B m0(-inf);
  size_t j = 0;
  for (; j + W <= n; j += W) m0 = xsimd::max(m0, B::load_unaligned(scores + j));
  if (j < n) m0 = xsimd::max(m0, load_partial<Arch>(scores + j, n - j, -inf));
  const float block_max = reduce_max<Arch>(m0);
  // NaN is never hidden (softmax.h). x86 max drops a NaN operand, so block_max is NaN (NaN in lane 0 of the last
  // vector) or has missed the NaN. A NaN max is carried into new_max (a plain `block_max > state.max` would drop it
  // and, on the first block, zero the scores). A missed NaN reaches the sum through exp(NaN - max) = NaN, except
  // when no score is finite (new_max = -inf): that rare case scans the block.
  float new_max = std::isnan(block_max) || block_max > state.max ? block_max : state.max;
  if (new_max == -inf) {
    bool has_nan = false;
    for (size_t i = 0; i < n; ++i) has_nan |= std::isnan(scores[i]);
    if (!has_nan) {
      for (size_t i = 0; i < n; ++i) scores[i] = 0.0f;
      return 1.0f;
    }
    new_max = std::numeric_limits<float>::quiet_NaN();  // every score, the sum and the factor become NaN below
  }
  const B vmax(new_max);
  B s(0.0f);
  j = 0;
  for (; j + W <= n; j += W) {
    const B e = exp_rr2_p5<Arch>(B::load_unaligned(scores + j) - vmax);
    e.store_unaligned(scores + j);
    s += e;
  }
  if (j < n) {
    const B e = fill_from<Arch>(exp_rr2_p5<Arch>(load_partial<Arch>(scores + j, n - j) - vmax), n - j, 0.0f);
    store_partial<Arch>(scores + j, e, n - j);
    s += e;
  }
  const float factor = state.max == -inf ? 0.0f : std::exp(state.max - new_max);
  state.sum = state.sum * factor + xsimd::hadd(s);
  state.max = new_max;
  return factor;
}

// The online softmax of fused attention, vectorized over rows: scores are stored transposed, s[j*ld + r] = score of
// key j for row r (j < n_keys, r < n_rows, n_rows a multiple of W). For each row: new max m' = max(m, max_j s),
// s <- exp(s - m'), l <- l*exp(m - m') + sum_j s, m <- m', alpha[r] = exp(m - m') (the factor for the row's
// accumulator; 0 on the first block). A row that has seen only -inf keeps m = -inf, l = 0 and gets zeros, no NaN.
template <class Arch>
inline void online_softmax_columns(float* s, size_t n_keys, size_t ld, float* m, float* l, float* alpha) {
  using B = Batch<Arch>;
  constexpr size_t W = B::size;
  const float inf = std::numeric_limits<float>::infinity();
  for (size_t r = 0; r < ld; r += W) {
    B mt(-inf);
    for (size_t j = 0; j < n_keys; ++j) mt = xsimd::max(mt, B::load_unaligned(s + j * ld + r));
    const B m_old = B::load_unaligned(m + r);
    const B m_new = xsimd::max(m_old, mt);
    const B shift = xsimd::select(m_new == B(-inf), B(0.0f), m_new);
    B sum(0.0f);
    for (size_t j = 0; j < n_keys; ++j) {
      const B e = exp_rr2_p5<Arch>(B::load_unaligned(s + j * ld + r) - shift);
      e.store_unaligned(s + j * ld + r);
      sum += e;
    }
    const B a = exp_rr2_p5<Arch>(m_old - shift);
    vec::fma(B::load_unaligned(l + r), a, sum).store_unaligned(l + r);
    m_new.store_unaligned(m + r);
    a.store_unaligned(alpha + r);
  }
}

}  // namespace sqrtdk::ops::simd
