// Softmax dispatch (per ISA) and argument checks at the op boundary; the scalar reference (the spec) is in
// softmax_ref.cpp, the SIMD kernels in softmax_simd.h.
#include "ops/softmax/softmax.h"

#include "ops/base/threading.h"

#include <sqrtdk/error.h>

#include <cmath>
#include <string>

namespace sqrtdk::ops {

namespace {

void softmax_rows_isa(Isa isa, size_t n_rows, size_t n_cols, const float* src, size_t ld_src, float* dst,
                      size_t ld_dst, float scale, const SoftmaxMask& mask) {
  switch (isa) {
    case Isa::avx512: softmax_rows_avx512(n_rows, n_cols, src, ld_src, dst, ld_dst, scale, mask); return;
    case Isa::avx2: softmax_rows_avx2(n_rows, n_cols, src, ld_src, dst, ld_dst, scale, mask); return;
    case Isa::ref: softmax_rows_ref(n_rows, n_cols, src, ld_src, dst, ld_dst, scale, mask); return;
  }
}

}  // namespace

void softmax_rows(Isa isa, size_t n_rows, size_t n_cols, const float* src, size_t ld_src, float* dst, size_t ld_dst,
                  float scale, const SoftmaxMask& mask, int n_threads) {
  const std::string shape = "softmax_rows(n_rows=" + std::to_string(n_rows) + ", n_cols=" + std::to_string(n_cols) +
                            ", ld_src=" + std::to_string(ld_src) + ", ld_dst=" + std::to_string(ld_dst) + ")";
  if (!cpu_supports(isa)) throw Error(shape + ": ISA " + isa_name(isa) + " is not supported by this CPU");
  if (n_rows == 0 || n_cols == 0) return;
  if (src == nullptr || dst == nullptr) throw Error(shape + ": src and dst must not be null");
  if (ld_src < n_cols || ld_dst < n_cols) throw Error(shape + ": ld_src and ld_dst must be >= n_cols");
  if (src == dst && ld_src != ld_dst) throw Error(shape + ": in place needs ld_src == ld_dst");
  if (mask.additive != nullptr && mask.ld < n_cols) throw Error(shape + ": mask.ld must be >= n_cols");
  if (!std::isfinite(scale)) throw Error(shape + ": scale must be finite, got " + std::to_string(scale));
  // Under 2^16 elements (~15 us on one core) waking a second thread costs more than it saves (measured: 64×64 at 2
  // threads ran at a quarter of the 1-thread rate per core): one thread. Rows are independent, so the split never
  // changes the results.
  const size_t by_work = n_rows * n_cols < (size_t{1} << 16) ? 1 : static_cast<size_t>(resolve_threads(n_threads));
  const int threads = static_cast<int>(std::min(by_work, n_rows));
  if (threads <= 1) {
    softmax_rows_isa(isa, n_rows, n_cols, src, ld_src, dst, ld_dst, scale, mask);
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    const Range r = split_range(n_rows, static_cast<size_t>(threads), static_cast<size_t>(omp_get_thread_num()));
    SoftmaxMask m = mask;
    if (m.additive) m.additive += r.begin * m.ld;
    m.pos0 += r.begin;  // row r.begin + i keeps columns 0 .. pos0 + r.begin + i
    softmax_rows_isa(isa, r.end - r.begin, n_cols, src + r.begin * ld_src, ld_src, dst + r.begin * ld_dst, ld_dst,
                     scale, m);
  }
}

void exp_rr2_p5(Isa isa, const float* src, float* dst, size_t n) {
  if (!cpu_supports(isa)) throw Error(std::string("exp_rr2_p5: ISA ") + isa_name(isa) + " is not supported");
  if (n == 0) return;
  if (src == nullptr || dst == nullptr) throw Error("exp_rr2_p5: src and dst must not be null");
  switch (isa) {
    case Isa::avx512: exp_rr2_p5_avx512(src, dst, n); return;
    case Isa::avx2: exp_rr2_p5_avx2(src, dst, n); return;
    case Isa::ref:
      for (size_t i = 0; i < n; ++i) dst[i] = static_cast<float>(std::exp(static_cast<double>(src[i])));
      return;
  }
}

float online_softmax_update(Isa isa, OnlineSoftmaxState& state, float* scores, size_t n) {
  if (!cpu_supports(isa)) throw Error(std::string("online_softmax_update: ISA ") + isa_name(isa) + " is not supported");
  if (n > 0 && scores == nullptr) throw Error("online_softmax_update: scores must not be null");
  switch (isa) {
    case Isa::avx512: return online_softmax_update_avx512(state, scores, n);
    case Isa::avx2: return online_softmax_update_avx2(state, scores, n);
    case Isa::ref: break;
  }
  const float inf = std::numeric_limits<float>::infinity();
  float new_max = state.max;
  for (size_t i = 0; i < n; ++i) new_max = scores[i] > new_max ? scores[i] : new_max;
  if (new_max == -inf) {
    for (size_t i = 0; i < n; ++i) scores[i] = 0.0f;
    return 1.0f;
  }
  double sum = 0.0;
  for (size_t i = 0; i < n; ++i) {
    scores[i] = static_cast<float>(std::exp(static_cast<double>(scores[i]) - new_max));
    sum += scores[i];
  }
  const float factor = state.max == -inf ? 0.0f : std::exp(state.max - new_max);
  state.sum = static_cast<float>(state.sum * static_cast<double>(factor) + sum);
  state.max = new_max;
  return factor;
}

OnlineSoftmaxState online_softmax_merge(const OnlineSoftmaxState& a, const OnlineSoftmaxState& b, float& factor_a,
                                        float& factor_b) {
  const float inf = std::numeric_limits<float>::infinity();
  const float m = a.max > b.max ? a.max : b.max;
  if (m == -inf) {  // both empty
    factor_a = factor_b = 1.0f;
    return a;
  }
  factor_a = a.max == -inf ? 0.0f : std::exp(a.max - m);
  factor_b = b.max == -inf ? 0.0f : std::exp(b.max - m);
  return {m, a.sum * factor_a + b.sum * factor_b};
}

}  // namespace sqrtdk::ops
