// Elementwise activations and the residual add, on n contiguous floats.
//
//   gelu_tanh(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))   (GPT-2's "gelu_new"), in place or src -> dst
//   silu(x)      = x / (1 + exp(-x)), in place or src -> dst
//   swiglu:      dst[i] = silu(gate[i]) * up[i]                        (Llama FFN; dst may equal gate or up)
//   add:         dst[i] = a[i] + b[i]                                  (dst may equal a or b)
//
// The SIMD versions compute tanh and the sigmoid through the ops layer's one vector exp (exp_rr2_p5 in
// ops/base/vec_exp.h, at most 2 ulp), in the same code the GEMM epilogue fuses (activation_simd.h):
// 0.5 (1 + tanh(u)) = 1 / (1 + exp(-2u)), so gelu_tanh(x) = x / (1 + exp(-2u)) with no cancellation near
// u = 0 and the right limits (exp -> inf gives -0, exp -> 0 gives x). Measured against the double reference over
// [-120, 120] (tests/ops/test_activation.cpp): max abs error 4.8e-7 (gelu_tanh), 1.9e-6 (silu; half an ulp of
// outputs near 100); max relative error 1.4e-6 (gelu_tanh), 2.1e-7 (silu) where |result| >= 1e-6.
// Threading: n is cut into items of 16 Ki floats claimed by up to n_threads (0 = resolve_threads default);
// elementwise, so bit-identical for any thread count.
// Errors: sqrtdk::Error for null pointers when n > 0.
#pragma once

#include <sqrtdk/isa.h>

#include <cstddef>

namespace sqrtdk::ops {

void gelu_tanh(Isa isa, float* x, size_t n, int n_threads = 1);
void silu(Isa isa, float* x, size_t n, int n_threads = 1);
// Out of place (dst may equal src).
void gelu_tanh(Isa isa, const float* src, float* dst, size_t n, int n_threads = 1);
void silu(Isa isa, const float* src, float* dst, size_t n, int n_threads = 1);
void swiglu(Isa isa, const float* gate, const float* up, float* dst, size_t n, int n_threads = 1);
void add(Isa isa, const float* a, const float* b, float* dst, size_t n, int n_threads = 1);

// Scalar references: each value computed in double, rounded once.
void gelu_tanh_ref(float* x, size_t n);
void silu_ref(float* x, size_t n);
void gelu_tanh_ref(const float* src, float* dst, size_t n);
void silu_ref(const float* src, float* dst, size_t n);
void swiglu_ref(const float* gate, const float* up, float* dst, size_t n);
void add_ref(const float* a, const float* b, float* dst, size_t n);

// The per-ISA kernels and their table: activation_kernels.h.

}  // namespace sqrtdk::ops
