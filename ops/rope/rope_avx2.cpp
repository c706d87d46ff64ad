// RoPE kernels for avx2: instantiation of ops/rope/rope_simd.h with xsimd::fma3<xsimd::avx2>.
#include "ops/rope/rope_kernels.h"
#include "ops/rope/rope_simd.h"

namespace sqrtdk::ops {

void rope_avx2(const RopeTable& table, RopeLayout layout, float* x, size_t n_tokens, size_t ld, size_t n_heads,
               size_t head_dim, size_t pos0) {
  rope_simd::rope<xsimd::fma3<xsimd::avx2>>(table, layout, x, n_tokens, ld, n_heads, head_dim, pos0);
}

}  // namespace sqrtdk::ops
