// The roof probes' loops for AVX2 + FMA (ymm, 8 floats): roofs_simd.h with xsimd::fma3<xsimd::avx2>.
// Compiled with avx2 flags only.
#include "ops/base/roofs.h"

#include "ops/base/roofs_simd.h"

namespace sqrtdk::roofs {

namespace {
using Arch = xsimd::fma3<xsimd::avx2>;
}  // namespace

float fma_loop_avx2(long iterations) { return simd::fma_loop<Arch>(iterations); }
float read_loop_avx2(const float* src, size_t n) { return simd::read_loop<Arch>(src, n); }
float read_streams_loop_avx2(const float* src, size_t n, int n_streams) {
  return simd::read_streams_loop<Arch>(src, n, n_streams);
}
void read_write_loop_avx2(const float* src, float* dst, size_t n) { simd::read_write_loop<Arch>(src, dst, n); }
void read2_write_loop_avx2(const float* a, const float* b, float* dst, size_t n) {
  simd::read2_write_loop<Arch>(a, b, dst, n);
}

}  // namespace sqrtdk::roofs
