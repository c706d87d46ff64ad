// Activation kernels, written once on an xsimd Arch and instantiated per ISA (activation_<isa>.cpp).
//
// Contract: as ops/activation/activation.h, on [0, n) from the calling thread; no checks, no allocation.
// gelu_tanh_batch / silu_batch are the one activation implementation: ops/activation and the GEMM epilogue
// (ops/gemm/gemm_simd.h) both call them.
// Body: one batch per step (exp is long enough that a single chain keeps both FMA pipes busy); the tail
// (n % lanes) goes through the same vector code via a padded stack copy, so every element takes one path.
#pragma once

#include "ops/base/vec_exp.h"

#include <cstddef>

namespace sqrtdk::ops::activation_simd {

template <class Arch>
using Batch = xsimd::batch<float, Arch>;

template <class Arch>
Batch<Arch> load_tail(const float* p, size_t n) {
  alignas(64) float buf[Batch<Arch>::size] = {};
  for (size_t i = 0; i < n; ++i) buf[i] = p[i];
  return Batch<Arch>::load_aligned(buf);
}

template <class Arch>
void store_tail(float* p, size_t n, Batch<Arch> v) {
  alignas(64) float buf[Batch<Arch>::size];
  v.store_aligned(buf);
  for (size_t i = 0; i < n; ++i) p[i] = buf[i];
}

// x / (1 + exp(-2 sqrt(2/pi) (x + 0.044715 x^3))) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), the form
// without cancellation near tanh = -1 (activation.h).
template <class Arch>
Batch<Arch> gelu_tanh_batch(Batch<Arch> x) {
  using B = Batch<Arch>;
  const B minus_two_k(-2.0f * 0.7978845608028654f), c(0.044715f), one(1.0f);
  const B u = x * vec::fma(c * x, x, one);  // x + 0.044715 x^3
  return x / (one + vec::exp_rr2_p5<Arch>(minus_two_k * u));
}

template <class Arch>
Batch<Arch> silu_batch(Batch<Arch> x) {
  using B = Batch<Arch>;
  return x / (B(1.0f) + vec::exp_rr2_p5<Arch>(-x));
}

// dst[i] = f(src[i]) over n floats (dst may equal src).
template <class Arch, class F>
void map_unary(const float* src, float* dst, size_t n, F f) {
  using B = Batch<Arch>;
  constexpr size_t L = B::size;
  size_t i = 0;
  for (; i + L <= n; i += L) f(B::load_unaligned(src + i)).store_unaligned(dst + i);
  if (i < n) store_tail<Arch>(dst + i, n - i, f(load_tail<Arch>(src + i, n - i)));
}

template <class Arch, class F>
void map_binary(const float* a, const float* b, float* dst, size_t n, F f) {
  using B = Batch<Arch>;
  constexpr size_t L = B::size;
  size_t i = 0;
  for (; i + L <= n; i += L) f(B::load_unaligned(a + i), B::load_unaligned(b + i)).store_unaligned(dst + i);
  if (i < n) store_tail<Arch>(dst + i, n - i, f(load_tail<Arch>(a + i, n - i), load_tail<Arch>(b + i, n - i)));
}

template <class Arch>
void gelu_tanh(const float* src, float* dst, size_t n) {
  map_unary<Arch>(src, dst, n, [](Batch<Arch> v) { return gelu_tanh_batch<Arch>(v); });
}

template <class Arch>
void silu(const float* src, float* dst, size_t n) {
  map_unary<Arch>(src, dst, n, [](Batch<Arch> v) { return silu_batch<Arch>(v); });
}

template <class Arch>
void swiglu(const float* gate, const float* up, float* dst, size_t n) {
  map_binary<Arch>(gate, up, dst, n, [](Batch<Arch> g, Batch<Arch> u) { return silu_batch<Arch>(g) * u; });
}

template <class Arch>
void add(const float* a, const float* b, float* dst, size_t n) {
  map_binary<Arch>(a, b, dst, n, [](Batch<Arch> x, Batch<Arch> y) { return x + y; });
}

}  // namespace sqrtdk::ops::activation_simd
