// Activation kernels for avx2: instantiations of ops/activation/activation_simd.h with xsimd::fma3<xsimd::avx2>.
#include "ops/activation/activation_kernels.h"
#include "ops/activation/activation_simd.h"

namespace sqrtdk::ops {

using Archavx2 = xsimd::fma3<xsimd::avx2>;

void gelu_tanh_avx2(const float* src, float* dst, size_t n) {
  activation_simd::gelu_tanh<Archavx2>(src, dst, n);
}
void silu_avx2(const float* src, float* dst, size_t n) { activation_simd::silu<Archavx2>(src, dst, n); }
void swiglu_avx2(const float* gate, const float* up, float* dst, size_t n) {
  activation_simd::swiglu<Archavx2>(gate, up, dst, n);
}
void add_avx2(const float* a, const float* b, float* dst, size_t n) { activation_simd::add<Archavx2>(a, b, dst, n); }

}  // namespace sqrtdk::ops
