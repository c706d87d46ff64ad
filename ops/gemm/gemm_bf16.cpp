// The bf16 GEMM's kernel table and its reference entry (the spec: double sums of f32 src × the bf16 weights'
// exact values). SIMD kernels: gemm_bf16_avx512bf16.cpp (vdpbf16ps), gemm_bf16_avx512.cpp and gemm_bf16_avx2.cpp
// (bf16 widened to f32 in the microkernel).
#include "ops/base/float16.h"
#include "ops/base/roofs.h"
#include "ops/gemm/gemm_typed_kernels.h"

#include <sqrtdk/error.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include <cstring>

namespace sqrtdk::ops {

namespace {
inline float bf16_value(uint16_t h) { return bf16_to_float(h); }
}  // namespace

namespace {

bool choose_bf16_dot() {
  const char* forced = std::getenv("SQRTDK_BF16_KERNEL");
  if (forced != nullptr && forced[0] != '\0') {
    const std::string f = forced;
    if (f != "dot" && f != "widen")
      throw Error("SQRTDK_BF16_KERNEL='" + f + "': expected dot (vdpbf16ps) or widen (bf16 widened to f32, FMA)");
    if (verbose()) std::fprintf(stderr, "sqrtdk: bf16 GEMM kernel %s (SQRTDK_BF16_KERNEL)\n", forced);
    return f == "dot";
  }
  // ~2 ms per loop at 2-3 GHz; best of 3 (noise only slows a loop down).
  const double fma = roofs::measure_fma_gflops(Isa::avx512, 1, 200000, 3);
  const double dot = roofs::measure_bf16_dot_gflops(1, 200000, 3);
  const bool use_dot = dot >= 1.25 * fma;
  if (verbose())
    std::fprintf(stderr, "sqrtdk: bf16 GEMM kernel %s (vdpbf16ps %.0f GFLOP/s vs FMA %.0f GFLOP/s, one thread)\n",
                 use_dot ? "dot (vdpbf16ps)" : "widen (bf16 -> f32, FMA)", dot, fma);
  return use_dot;
}

}  // namespace

Isa bf16_weights_isa(Isa isa) {
  if (isa < Isa::avx512_bf16 || !cpu_supports(Isa::avx512_bf16)) return isa;
  static const bool use_dot = choose_bf16_dot();  // once per process, then constant
  return use_dot ? isa : Isa::avx512_vnni;
}

void gemm_bf16_ref(const float* src, size_t M, size_t lda, const uint16_t* weights, size_t N, size_t K,
                   size_t ld_weights, float* dst, size_t ldc, const GemmEpilogue& epilogue) {
  gemm_detail::GemmCall call{src, lda, M, N, K, nullptr, dst, ldc, 1.0f, epilogue.bias, epilogue.activation,
                             epilogue.multiply, epilogue.ld_multiply, epilogue.residual, epilogue.ld_residual,
                             0, 0, 0, 0};
  for (size_t m = 0; m < M; ++m)
    for (size_t n = 0; n < N; ++n) {
      double acc = 0;
      for (size_t k = 0; k < K; ++k) acc += static_cast<double>(src[m * lda + k]) * bf16_value(weights[n * ld_weights + k]);
      dst[m * ldc + n] = gemm_detail::epilogue_ref_at(acc, call, m, n);
    }
}

namespace gemm_detail {

namespace {
size_t bf16_ref_panel_bytes(size_t K) { return K * sizeof(uint16_t); }
size_t bf16_ref_src_row_bytes(size_t) { return 0; }  // reads the f32 src in place
void bf16_ref_prepare(const float*, size_t, size_t, size_t, size_t, uint8_t*, float*) {}
void bf16_ref_region(const TypedGemmCall& call, size_t m0, size_t m1, size_t n0, size_t n1) {
  // Each element read fully (operands first), then written: dst may alias the epilogue operands.
  const auto* w = reinterpret_cast<const uint16_t*>(call.typed_panels);
  for (size_t m = m0; m < m1; ++m)
    for (size_t n = n0; n < n1; ++n) {
      double acc = 0;
      for (size_t k = 0; k < call.K; ++k)
        acc += static_cast<double>(call.src[m * call.lda + k]) * bf16_value(w[n * call.K + k]);
      call.dst[m * call.ldc + n] = epilogue_ref_at(acc, call, m, n);
    }
}
void ref_pack(const uint16_t* weights, size_t ld, size_t, size_t K, size_t n0, size_t n1, uint8_t* panels) {
  for (size_t n = n0; n < n1; ++n) std::memcpy(panels + n * K * 2, weights + n * ld, K * 2);
}
}  // namespace

const Bf16Kernels kBf16KernelsRef{{1, 1, 1, 1, 1}, bf16_ref_panel_bytes, bf16_ref_src_row_bytes, bf16_ref_prepare, bf16_ref_region,
                                  ref_pack};

std::span<const KernelEntry<Bf16Kernels>> gemm_bf16_kernels() {
  static const KernelEntry<Bf16Kernels> table[] = {
      {Isa::avx512_bf16, "gemm_bf16_ukernel_6x64_avx512bf16_dpbf16ps", kBf16KernelsAvx512Bf16},
      {Isa::avx512, "gemm_bf16_ukernel_6x64_avx512_widen", kBf16KernelsAvx512},
      {Isa::avx2, "gemm_bf16_ukernel_4x24_avx2_widen", kBf16KernelsAvx2},
      {Isa::ref, "gemm_bf16_ref_f64", kBf16KernelsRef},
  };
  return table;
}

}  // namespace gemm_detail
}  // namespace sqrtdk::ops
