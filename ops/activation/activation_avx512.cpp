// Activation kernels for avx512: instantiations of ops/activation/activation_simd.h with xsimd::avx512bw.
// g++ 12 false positive: _mm512_undefined_ps() is `__m512 __Y = __Y;`, and once inlined into the masked builtins
// behind xsimd's avx512 ops it trips -Wuninitialized. The value is never read (mask all-ones); clang is silent.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include "ops/activation/activation_kernels.h"
#include "ops/activation/activation_simd.h"

namespace sqrtdk::ops {

using Archavx512 = xsimd::avx512bw;

void gelu_tanh_avx512(const float* src, float* dst, size_t n) {
  activation_simd::gelu_tanh<Archavx512>(src, dst, n);
}
void silu_avx512(const float* src, float* dst, size_t n) { activation_simd::silu<Archavx512>(src, dst, n); }
void swiglu_avx512(const float* gate, const float* up, float* dst, size_t n) {
  activation_simd::swiglu<Archavx512>(gate, up, dst, n);
}
void add_avx512(const float* a, const float* b, float* dst, size_t n) { activation_simd::add<Archavx512>(a, b, dst, n); }

}  // namespace sqrtdk::ops
