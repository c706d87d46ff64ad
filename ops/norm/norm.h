// Row normalizations: LayerNorm (GPT-2) and RMSNorm (Llama).
//
//   layer_norm: dst[r, :] = (src[r, :] - mean_r) / sqrt(var_r + eps) * weight + bias     (var: biased, 1/d)
//   rms_norm:   dst[r, :] = src[r, :] / sqrt(mean(src[r, :]^2) + eps) * weight            (HF LlamaRMSNorm)
//
// Layouts: n_rows rows of width d; row r starts at src + r * ld_src (dst + r * ld_dst); ld >= d, in elements.
// dst may equal src (in place); other overlaps are not allowed. bias may be nullptr (treated as zeros).
// Accuracy: the *_ref versions accumulate statistics in double (the spec); the SIMD versions keep float
// accumulators (several partial sums, two passes for the variance) and agree with ref within 2e-5 relative
// (tests/ops/test_norm.cpp states the measured error).
// Threading: items of whole rows (~16 Ki floats) claimed by up to n_threads (0 = resolve_threads default); each
// row is computed by one thread with a fixed order, so the result is bit-identical for any thread count.
// Errors: sqrtdk::Error for d == 0, ld < d, null pointers, or eps not > 0 / not finite.
#pragma once

#include <sqrtdk/isa.h>

#include <cstddef>

namespace sqrtdk::ops {

void layer_norm(Isa isa, const float* src, size_t n_rows, size_t d, size_t ld_src, const float* weight,
                const float* bias, float eps, float* dst, size_t ld_dst, int n_threads = 1);
void rms_norm(Isa isa, const float* src, size_t n_rows, size_t d, size_t ld_src, const float* weight, float eps,
              float* dst, size_t ld_dst, int n_threads = 1);

// Scalar references (double statistics). Single-threaded; no argument checks beyond asserts.
void layer_norm_ref(const float* src, size_t n_rows, size_t d, size_t ld_src, const float* weight,
                    const float* bias, float eps, float* dst, size_t ld_dst);
void rms_norm_ref(const float* src, size_t n_rows, size_t d, size_t ld_src, const float* weight, float eps,
                  float* dst, size_t ld_dst);

// The per-ISA row kernels and their table: norm_kernels.h.

}  // namespace sqrtdk::ops
