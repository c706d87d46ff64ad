// RoPE kernels for avx512: instantiation of ops/rope/rope_simd.h with xsimd::avx512bw.
// g++ 12 false positive: _mm512_undefined_ps() is `__m512 __Y = __Y;`, and once inlined into the masked
// permute behind xsimd::swizzle it trips -Wmaybe-uninitialized. The value is never read; clang is silent.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include "ops/rope/rope_kernels.h"
#include "ops/rope/rope_simd.h"

namespace sqrtdk::ops {

void rope_avx512(const RopeTable& table, RopeLayout layout, float* x, size_t n_tokens, size_t ld, size_t n_heads,
               size_t head_dim, size_t pos0) {
  rope_simd::rope<xsimd::avx512bw>(table, layout, x, n_tokens, ld, n_heads, head_dim, pos0);
}

}  // namespace sqrtdk::ops
