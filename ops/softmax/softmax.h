// Softmax: the row-wise softmax (scale and mask fused), the vectorized exp behind it, and the online (streaming)
// softmax state that fused attention folds key tiles into.
//
//   softmax_rows:  dst[r][j] = exp(y[r][j] - max_j y[r][j]) / sum_j exp(y[r][j] - max_j y[r][j]),
//                  y[r][j] = scale * src[r][j] + mask.additive[r][j]   (additive mask optional, -inf masks out)
//                  causal mask: row r keeps columns 0 .. pos0 + r, every later column becomes exactly 0.
//   Edge behaviour (each tested): inputs are shifted by the row max, so [1000, 1001, 1002] == [0, 1, 2] (no
//   overflow); a fully masked row (every y = -inf, or causal with no visible column) gives all zeros, never NaN;
//   any NaN in a row makes the whole row NaN (never silently hidden); an input of +inf makes its row NaN.
//   Accuracy: each output within 4 ulp + (n + |y| + |y - max|) * 2^-24 relative of the exact value: exp's 2 ulp
//   and the normalization, the float sum of n terms, and the float roundings of y and of y - max, which exp turns
//   into a relative error of its result (a probability of 1e-8 has |y - max| ~ 18, so ~1e-6 relative); rows of
//   1 .. 100 000 columns sum to 1 within 1e-6.
//   Threading: items of whole rows claimed by up to n_threads (0 = default); each row is computed by one thread,
//   so the result is bit-identical for any thread count. src == dst (in place) is allowed; other overlaps are not.
#pragma once

#include <sqrtdk/isa.h>

#include <cstddef>
#include <limits>

namespace sqrtdk::ops {

struct SoftmaxMask {
  const float* additive = nullptr;  // [n_rows][ld] added after scaling; -inf masks a column out
  size_t ld = 0;
  bool causal = false;  // row r keeps columns 0 .. pos0 + r
  size_t pos0 = 0;
};

// src: [n_rows][ld_src], dst: [n_rows][ld_dst] (n_cols used of each). Throws sqrtdk::Error on bad arguments.
void softmax_rows(Isa isa, size_t n_rows, size_t n_cols, const float* src, size_t ld_src, float* dst, size_t ld_dst,
                  float scale = 1.0f, const SoftmaxMask& mask = {}, int n_threads = 1);

// The specification: plain loops, double accumulation, same edge behaviour.
void softmax_rows_ref(size_t n_rows, size_t n_cols, const float* src, size_t ld_src, float* dst, size_t ld_dst,
                      float scale = 1.0f, const SoftmaxMask& mask = {});

// ---- exp_rr2_p5: the vectorized exp ----
// The ops layer's one vector exp (ops/base/vec_exp.h: algorithm, range and measured error) over an array; Isa::ref
// is std::exp in double, rounded once. kExpRr2P5MaxUlp: the contract's bound, in ulp of the result.
inline constexpr double kExpRr2P5MaxUlp = 2.0;
void exp_rr2_p5(Isa isa, const float* src, float* dst, size_t n);

// ---- Online (streaming) softmax ----
// The state of one row whose scores arrive block by block: max = largest score so far, sum = sum of
// exp(score - max) so far. Folding a new block raises max and rescales sum (and the caller's accumulators,
// e.g. attention's output row) by exp(old_max - new_max).
struct OnlineSoftmaxState {
  float max = -std::numeric_limits<float>::infinity();
  float sum = 0.0f;
};

// Folds scores[0, n) into `state`: overwrites scores with exp(score - new_max) and returns the factor
// exp(old_max - new_max) by which accumulators built under the old max must be multiplied (1 if unchanged,
// 0 on the first block). A block of all -inf leaves the state unchanged and writes zeros. A NaN score (or a NaN
// state), whatever its position in the block, makes the state's sum NaN (and it stays NaN through later updates
// and merges) and the NaN score's own weight NaN, so the normalized result is NaN; the reference also sets max,
// every weight and (after the first block) the factor to NaN.
float online_softmax_update(Isa isa, OnlineSoftmaxState& state, float* scores, size_t n);

// Merges two partial states (e.g. two cache chunks of one decode row): returns the merged state and the factors
// by which a's and b's accumulators must be multiplied before adding them. A NaN state gives a NaN state and factors.
OnlineSoftmaxState online_softmax_merge(const OnlineSoftmaxState& a, const OnlineSoftmaxState& b, float& factor_a,
                                        float& factor_b);

// The per-ISA kernels and their table: softmax_kernels.h.

}  // namespace sqrtdk::ops
