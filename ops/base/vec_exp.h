// The one vectorized exp of the ops layer: exp_rr2_p5 on an xsimd batch, used by softmax (and so attention), the
// activations and the GEMM epilogue. A template on Arch, instantiated in each per-ISA TU (ODR-safe).
//
// Algorithm (XNNPACK naming): range reduction in 2 steps (Cody-Waite: x = n*ln2 + t, ln2 split into a hi part
// with 8 trailing zero bits and a lo part, |t| <= ln2/2), a degree-5 minimax polynomial for exp(t), then
// scaling by 2^n (avx512: vscalefps; avx2: two exponent-field multiplies so subnormal results round once).
// Accuracy contract: max error 2 ulp (ops::kExpRr2P5MaxUlp) vs exp in double, subnormal results included.
// Measured 2026-11-30: every one of the 2^32 floats (bench-softmax --exp-ulp): avx2 1.981 ulp at x = -2.937;
// avx512 same algorithm (vscalefps instead of the two multiplies); the tests' stride-61 sweep
// (tests/ops/test_softmax.cpp) finds 1.965 ulp for both. Every multiply-add below is an explicit fma (fma/fnma
// here, not xsimd's, which is not one on avx512), so the bits do not depend on the optimization level or on
// -ffp-contract: the bound holds in every build (the sanitizer builds once measured 2.198 ulp on avx512, when
// xsimd's fma there was a separate multiply and add).
// Range: exp(x) = +inf for x > 88.7228, 0 for x < -103.973 (subnormals in between are kept), exp(-inf) = 0,
// exp(+inf) = +inf, NaN -> NaN.
#pragma once

// GCC 12.2 warns "__Y may be used uninitialized" inside its own AVX-512 intrinsic headers (_mm512_undefined_ps,
// GCC PR 105593, fixed in 12.3). The warning takes the pragma state at the header's location, so silence it here,
// around the first inclusion of the intrinsic headers.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#include <xsimd/xsimd.hpp>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#include <type_traits>

namespace sqrtdk::ops::vec {

template <class Arch>
inline constexpr bool kIsAvx512 = std::is_base_of_v<xsimd::avx512f, Arch>;

// fma(x, y, z) = x*y + z, fms = x*y - z and fnma = z - x*y, rounded once, on every ISA. xsimd 8.1 (Debian's) has
// no avx512 fma: xsimd::fma / fms / fnma on avx512 fall back to its generic `x * y + z`, which is one rounding or two
// depending on whether the compiler contracts it (GCC -O2/-O3 with its default -ffp-contract=fast does, GCC -O1,
// clang and -ffp-contract=off do not). That made avx512 results differ between builds (the sanitizer builds
// measured exp at 2.198 ulp, the release build 1.965). The ops layer calls these instead of xsimd's.
template <class Arch>
inline xsimd::batch<float, Arch> fma(xsimd::batch<float, Arch> x, xsimd::batch<float, Arch> y,
                                     xsimd::batch<float, Arch> z) {
  if constexpr (kIsAvx512<Arch>)
    return _mm512_fmadd_ps(x, y, z);
  else
    return xsimd::fma(x, y, z);
}
template <class Arch>
inline xsimd::batch<float, Arch> fms(xsimd::batch<float, Arch> x, xsimd::batch<float, Arch> y,
                                     xsimd::batch<float, Arch> z) {
  if constexpr (kIsAvx512<Arch>)
    return _mm512_fmsub_ps(x, y, z);
  else
    return xsimd::fms(x, y, z);
}
template <class Arch>
inline xsimd::batch<float, Arch> fnma(xsimd::batch<float, Arch> x, xsimd::batch<float, Arch> y,
                                      xsimd::batch<float, Arch> z) {
  if constexpr (kIsAvx512<Arch>)
    return _mm512_fnmadd_ps(x, y, z);
  else
    return xsimd::fnma(x, y, z);
}

template <class Arch>
inline xsimd::batch<float, Arch> exp_rr2_p5(xsimd::batch<float, Arch> x) {
  using B = xsimd::batch<float, Arch>;
  // Clamp so n stays in [-150, 129] (both scale halves normal, t accurate; exp(-inf) = 0). x86 max/min return
  // their second operand when either is NaN, and xsimd::max(a, b) is vmaxps(a, b): x second keeps NaN.
  const B xc = xsimd::min(B(89.0f), xsimd::max(B(-104.0f), x));
  const B n = xsimd::nearbyint(xc * B(0x1.715476p+0f));
  // t = x - n*ln2 in two steps: ln2_hi has 8 trailing zero bits, so n*ln2_hi is exact for |n| <= 2^8.
  B t = vec::fnma(n, B(0x1.62E400p-1f), xc);
  t = vec::fnma(n, B(0x1.7F7D1Cp-20f), t);
  // exp(t) ~ 1 + t*(c1 + t*(c2 + t*(c3 + t*(c4 + t*c5)))) on [-ln2/2, ln2/2] (minimax coefficients of XNNPACK's
  // f32 rr2_p5 kernels).
  B p = vec::fma(B(0x1.0F9F9Cp-7f), t, B(0x1.573A1Ap-5f));
  p = vec::fma(p, t, B(0x1.555A80p-3f));
  p = vec::fma(p, t, B(0x1.FFFDC6p-2f));
  p = vec::fma(p, t, B(0x1.FFFFF6p-1f));
  p = vec::fma(p, t, B(1.0f));
  if constexpr (kIsAvx512<Arch>) {
    return B(_mm512_scalef_ps(p, n));  // p * 2^n, subnormal results rounded once, overflow to inf
  } else {
    // 2^n as two normal powers of two (n1 = floor(n/2), n2 = n - n1, both in [-75, 65]) so that a subnormal
    // result is rounded once, in the last multiply.
    const __m256i ni = _mm256_cvtps_epi32(n);
    const __m256i n1 = _mm256_srai_epi32(ni, 1);
    const __m256i n2 = _mm256_sub_epi32(ni, n1);
    const __m256i bias = _mm256_set1_epi32(127);
    const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
    const __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
    return B(_mm256_mul_ps(_mm256_mul_ps(p, s1), s2));
  }
}

}  // namespace sqrtdk::ops::vec
