// Activation kernels, written once on an xsimd Arch and instantiated per ISA (activation_<isa>.cpp).
//
// Contract: as ops/activation/activation.h, on [0, n) from the calling thread; no checks, no allocation.
// Body: one batch per step (xsimd::exp is long enough that a single chain keeps both FMA pipes busy); the tail
// (n % lanes) goes through the same vector code via a padded stack copy, so every element takes one path.
#pragma once

#include <xsimd/xsimd.hpp>

#include <cstddef>
#include <cstdint>
#include <limits>

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

// e^x with Cephes' expf method (about 1 ulp over the normal range; tests/ops/test_activation.cpp measures it):
// n = round(x log2 e), r = x - n ln2 (ln2 split hi/lo so r is exact), e^r by a degree-5 polynomial,
// then scaled by 2^n as two power-of-two factors so n in [-150, 128] never overflows the exponent field
// (the result is subnormal or 0 below x = -87.3, +inf above ln(FLT_MAX) = 88.72, NaN stays NaN).
// Written here instead of xsimd::exp: ~20% faster on avx512 (MACHINE.md) and g++ 12 warns inside xsimd's.
template <class Arch>
Batch<Arch> exp_cephes(Batch<Arch> x) {
  using B = Batch<Arch>;
  using I = xsimd::batch<int32_t, Arch>;
  const B max_x(88.72283935546875f), min_x(-104.0f);
  const B xc = xsimd::select(x < min_x, min_x, xsimd::select(x > max_x, max_x, x));  // NaN passes through
  const I ni = xsimd::nearbyint_as_int(xc * B(1.44269504088896341f));
  const B n = xsimd::to_float(ni);
  B r = xsimd::fnma(n, B(0.693359375f), xc);
  r = xsimd::fnma(n, B(-2.12194440e-4f), r);
  B p(1.9875691500e-4f);
  p = xsimd::fma(p, r, B(1.3981999507e-3f));
  p = xsimd::fma(p, r, B(8.3334519073e-3f));
  p = xsimd::fma(p, r, B(4.1665795894e-2f));
  p = xsimd::fma(p, r, B(1.6666665459e-1f));
  p = xsimd::fma(p, r, B(5.0000001201e-1f));
  p = xsimd::fma(p, r * r, r + B(1.0f));
  const I n1 = ni >> 1, n2 = ni - n1;
  const B scale1 = xsimd::bitwise_cast<B>((n1 + I(127)) << 23);
  const B scale2 = xsimd::bitwise_cast<B>((n2 + I(127)) << 23);
  B result = p * scale1 * scale2;
  result = xsimd::select(x > max_x, B(std::numeric_limits<float>::infinity()), result);
  return xsimd::select(x != x, x, result);
}

// x / (1 + exp(-2 sqrt(2/pi) (x + 0.044715 x^3))) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
template <class Arch>
Batch<Arch> gelu_tanh_batch(Batch<Arch> x) {
  using B = Batch<Arch>;
  const B minus_two_k(-2.0f * 0.7978845608028654f), c(0.044715f), one(1.0f);
  const B u = x * xsimd::fma(c * x, x, one);  // x + 0.044715 x^3
  return x / (one + exp_cephes<Arch>(minus_two_k * u));
}

template <class Arch>
Batch<Arch> silu_batch(Batch<Arch> x) {
  using B = Batch<Arch>;
  return x / (B(1.0f) + exp_cephes<Arch>(-x));
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
