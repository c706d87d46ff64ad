// The q8 GEMM's kernel table, its reference entry (the spec), and the q8 helpers: weight quantization (GGUF Q8_0
// blocks), the per-row quantization of src every kernel shares, f16 scales. SIMD kernels: gemm_q8_avx512vnni.cpp
// (vpdpbusd) and gemm_q8_avx2.cpp (vpmaddubsw/vpmaddwd).
#include "ops/base/float16.h"
#include "ops/gemm/gemm_typed_kernels.h"

#include <sqrtdk/error.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

namespace sqrtdk::ops {

void quantize_row_q8(const float* x, size_t K, Q8Block* out) {
  if (K % kQ8BlockSize != 0)
    throw Error("quantize_row_q8: K = " + std::to_string(K) + " is not a multiple of " + std::to_string(kQ8BlockSize));
  for (size_t b = 0; b < K / kQ8BlockSize; ++b) {
    const float* xb = x + b * kQ8BlockSize;
    float amax = 0;
    for (size_t i = 0; i < kQ8BlockSize; ++i) {
      if (!std::isfinite(xb[i]))
        throw Error("quantize_row_q8: value " + std::to_string(xb[i]) + " at column " + std::to_string(b * kQ8BlockSize + i) +
                    " is not finite");
      amax = std::max(amax, std::fabs(xb[i]));
    }
    Q8Block& blk = out[b];
    blk.scale_f16 = float_to_half(amax / 127.0f);
    const float d = half_to_float(blk.scale_f16);
    for (size_t i = 0; i < kQ8BlockSize; ++i) {
      const float q = d > 0 ? std::nearbyint(xb[i] / d) : 0.0f;
      blk.q[i] = static_cast<int8_t>(std::clamp(q, -127.0f, 127.0f));
    }
  }
}

void dequantize_row_q8(const Q8Block* blocks, size_t K, float* out) {
  for (size_t b = 0; b < K / kQ8BlockSize; ++b) {
    const float d = half_to_float(blocks[b].scale_f16);
    for (size_t i = 0; i < kQ8BlockSize; ++i) out[b * kQ8BlockSize + i] = d * blocks[b].q[i];
  }
}

void quantize_src_row_q8(const float* a, size_t K, int8_t* q, float* scale) {
  float amax = 0;
  for (size_t k = 0; k < K; ++k) amax = std::max(amax, std::fabs(a[k]));
  // inv then a product (not a division per element): what a SIMD kernel computes with one broadcast, exactly.
  const float inv = amax > 0 ? 127.0f / amax : 0.0f;
  for (size_t k = 0; k < K; ++k)
    q[k] = static_cast<int8_t>(std::clamp(std::nearbyint(a[k] * inv), -127.0f, 127.0f));
  *scale = amax / 127.0f;
}

namespace {

// The spec of one element: Σ_b s_w[n, b] · Σ_{k in b} qa[k]·qw[n, k] (exact integers, then double), times the
// row's scale.
double q8_dot_ref(const int8_t* qa, const Q8Block* w, size_t K) {
  double acc = 0;
  for (size_t b = 0; b < K / kQ8BlockSize; ++b) {
    int32_t isum = 0;
    for (size_t i = 0; i < kQ8BlockSize; ++i) isum += int32_t{qa[b * kQ8BlockSize + i]} * w[b].q[i];
    acc += static_cast<double>(half_to_float(w[b].scale_f16)) * isum;
  }
  return acc;
}

}  // namespace

void gemm_q8_ref(const float* src, size_t M, size_t lda, const Q8Block* weights, size_t N, size_t K,
                 size_t ld_blocks, float* dst, size_t ldc, const GemmEpilogue& epilogue) {
  gemm_detail::GemmCall call{src, lda, M, N, K, nullptr, dst, ldc, 1.0f, epilogue.bias, epilogue.activation,
                             epilogue.multiply, epilogue.ld_multiply, epilogue.residual, epilogue.ld_residual,
                             0, 0, 0, 0};
  std::string qa(K, '\0');
  for (size_t m = 0; m < M; ++m) {
    float scale;
    quantize_src_row_q8(src + m * lda, K, reinterpret_cast<int8_t*>(qa.data()), &scale);
    for (size_t n = 0; n < N; ++n)
      dst[m * ldc + n] = gemm_detail::epilogue_ref_at(
          static_cast<double>(scale) * q8_dot_ref(reinterpret_cast<const int8_t*>(qa.data()), weights + n * ld_blocks, K),
          call, m, n);
  }
}

namespace gemm_detail {

namespace {
size_t q8_ref_panel_bytes(size_t K) { return K / kQ8BlockSize * sizeof(Q8Block); }
size_t q8_ref_src_row_bytes(size_t K) { return K; }  // int8, as quantize_src_row_q8
void q8_ref_prepare(const float* src, size_t lda, size_t m0, size_t m1, size_t K, uint8_t* out, float* scales) {
  for (size_t m = m0; m < m1; ++m)
    quantize_src_row_q8(src + m * lda, K, reinterpret_cast<int8_t*>(out + m * K), scales + m);
}
void q8_ref_region(const TypedGemmCall& call, size_t m0, size_t m1, size_t n0, size_t n1) {
  const auto* w = reinterpret_cast<const Q8Block*>(call.typed_panels);
  const size_t blocks = call.K / kQ8BlockSize;
  for (size_t m = m0; m < m1; ++m)
    for (size_t n = n0; n < n1; ++n) {
      const auto* qa = reinterpret_cast<const int8_t*>(call.src_prepared + m * call.src_row_bytes);
      call.dst[m * call.ldc + n] =
          epilogue_ref_at(static_cast<double>(call.src_scales[m]) * q8_dot_ref(qa, w + n * blocks, call.K), call, m, n);
    }
}
void q8_ref_pack(const Q8Block* weights, size_t ld, size_t, size_t K, size_t n0, size_t n1, uint8_t* panels) {
  const size_t blocks = K / kQ8BlockSize;
  for (size_t n = n0; n < n1; ++n)
    std::memcpy(panels + n * blocks * sizeof(Q8Block), weights + n * ld, blocks * sizeof(Q8Block));
}
}  // namespace

const Q8Kernels kQ8KernelsRef{{1, 1, kQ8BlockSize, 1, 1}, q8_ref_panel_bytes, q8_ref_src_row_bytes, q8_ref_prepare,
                              q8_ref_region, q8_ref_pack};

std::span<const KernelEntry<Q8Kernels>> gemm_q8_kernels() {
  static const KernelEntry<Q8Kernels> table[] = {
      {Isa::avx512_vnni, "gemm_q8_3x64_avx512vnni_vpdpbusd", kQ8KernelsAvx512Vnni},
      {Isa::avx2, "gemm_q8_3x24_avx2_vpmaddubsw", kQ8KernelsAvx2},
      {Isa::ref, "gemm_q8_ref_f64", kQ8KernelsRef},
  };
  return table;
}

}  // namespace gemm_detail
}  // namespace sqrtdk::ops
