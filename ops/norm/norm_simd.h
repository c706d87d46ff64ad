// LayerNorm / RMSNorm row kernels, written once on an xsimd Arch and instantiated per ISA (norm_<isa>.cpp).
//
// Contract: as ops/norm/norm.h, for rows [0, n_rows) on the calling thread; no checks, no allocation.
// Per row: pass 1 sums (4 independent batch accumulators, so the FMA/add latency is hidden), pass 2 (LayerNorm
// only) sums (x - mean)^2 (two-pass: no cancellation of E[x^2] - mean^2), pass 3 writes (x - mean) * rstd * w + b.
// The row tail (d % batch lanes) goes through the same vector code via a padded stack copy, so every width uses
// one arithmetic path. A row of 768 floats is 3 KiB: the three passes after the first hit L1.
#pragma once

#include "ops/base/vec_exp.h"

#include <xsimd/xsimd.hpp>

#include <cmath>
#include <cstddef>

namespace sqrtdk::ops::norm_simd {

template <class Arch>
using Batch = xsimd::batch<float, Arch>;

// Loads n < lanes floats into a batch whose other lanes are `fill`.
template <class Arch>
Batch<Arch> load_tail(const float* p, size_t n, float fill) {
  alignas(64) float buf[Batch<Arch>::size];
  for (size_t i = 0; i < Batch<Arch>::size; ++i) buf[i] = i < n ? p[i] : fill;
  return Batch<Arch>::load_aligned(buf);
}

template <class Arch>
void store_tail(float* p, size_t n, Batch<Arch> v) {
  alignas(64) float buf[Batch<Arch>::size];
  v.store_aligned(buf);
  for (size_t i = 0; i < n; ++i) p[i] = buf[i];
}

// Sum of f(x[i]) over i in [0, d), lanes past d filled with `fill` (chosen so f(fill) = 0).
template <class Arch, class F>
float row_sum(const float* x, size_t d, float fill, F f) {
  using B = Batch<Arch>;
  constexpr size_t L = B::size;
  B acc0(0.0f), acc1(0.0f), acc2(0.0f), acc3(0.0f);
  size_t i = 0;
  for (; i + 4 * L <= d; i += 4 * L) {
    acc0 += f(B::load_unaligned(x + i));
    acc1 += f(B::load_unaligned(x + i + L));
    acc2 += f(B::load_unaligned(x + i + 2 * L));
    acc3 += f(B::load_unaligned(x + i + 3 * L));
  }
  for (; i + L <= d; i += L) acc0 += f(B::load_unaligned(x + i));
  if (i < d) acc1 += f(load_tail<Arch>(x + i, d - i, fill));
  return xsimd::hadd((acc0 + acc1) + (acc2 + acc3));
}

// y[i] = (x[i] - shift) * scale * w[i] + (b ? b[i] : 0)
template <class Arch>
void row_scale(const float* x, size_t d, float shift, float scale, const float* w, const float* b, float* y) {
  using B = Batch<Arch>;
  constexpr size_t L = B::size;
  const B vshift(shift), vscale(scale);
  size_t i = 0;
  for (; i + L <= d; i += L) {
    const B xs = (B::load_unaligned(x + i) - vshift) * vscale;
    const B out = b ? vec::fma(xs, B::load_unaligned(w + i), B::load_unaligned(b + i)) : xs * B::load_unaligned(w + i);
    out.store_unaligned(y + i);
  }
  if (i < d) {
    const size_t n = d - i;
    const B xs = (load_tail<Arch>(x + i, n, 0.0f) - vshift) * vscale;
    const B out = b ? vec::fma(xs, load_tail<Arch>(w + i, n, 0.0f), load_tail<Arch>(b + i, n, 0.0f))
                    : xs * load_tail<Arch>(w + i, n, 0.0f);
    store_tail<Arch>(y + i, n, out);
  }
}

template <class Arch>
void layer_norm_rows(const float* src, size_t n_rows, size_t d, size_t ld_src, const float* weight,
                     const float* bias, float eps, float* dst, size_t ld_dst) {
  using B = Batch<Arch>;
  for (size_t r = 0; r < n_rows; ++r) {
    const float* x = src + r * ld_src;
    const float mean = row_sum<Arch>(x, d, 0.0f, [](B v) { return v; }) / static_cast<float>(d);
    const B vmean(mean);
    // Tail lanes are filled with the mean, so they contribute (mean - mean)^2 = 0.
    const float var = row_sum<Arch>(x, d, mean, [vmean](B v) { B c = v - vmean; return c * c; }) /
                      static_cast<float>(d);
    const float rstd = 1.0f / std::sqrt(var + eps);
    row_scale<Arch>(x, d, mean, rstd, weight, bias, dst + r * ld_dst);
  }
}

template <class Arch>
void rms_norm_rows(const float* src, size_t n_rows, size_t d, size_t ld_src, const float* weight, float eps,
                   float* dst, size_t ld_dst) {
  using B = Batch<Arch>;
  for (size_t r = 0; r < n_rows; ++r) {
    const float* x = src + r * ld_src;
    const float mean_sq = row_sum<Arch>(x, d, 0.0f, [](B v) { return v * v; }) / static_cast<float>(d);
    const float rrms = 1.0f / std::sqrt(mean_sq + eps);
    row_scale<Arch>(x, d, 0.0f, rrms, weight, nullptr, dst + r * ld_dst);
  }
}

}  // namespace sqrtdk::ops::norm_simd
