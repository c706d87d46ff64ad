// The roof probes' loops for AVX-512 (zmm, 16 floats): roofs_simd.h instantiated with xsimd::avx512bw.
// Compiled with avx512 flags only.
#include "ops/base/roofs.h"

#include "ops/base/roofs_simd.h"

namespace sqrtdk::roofs {

namespace {
using Arch = xsimd::avx512bw;
}  // namespace

float fma_loop_avx512(long iterations) { return simd::fma_loop<Arch>(iterations); }
float read_loop_avx512(const float* src, size_t n) { return simd::read_loop<Arch>(src, n); }
float read_streams_loop_avx512(const float* src, size_t n, int n_streams) {
  return simd::read_streams_loop<Arch>(src, n, n_streams);
}
void read_write_loop_avx512(const float* src, float* dst, size_t n) { simd::read_write_loop<Arch>(src, dst, n); }
void read2_write_loop_avx512(const float* a, const float* b, float* dst, size_t n) {
  simd::read2_write_loop<Arch>(a, b, dst, n);
}

}  // namespace sqrtdk::roofs
