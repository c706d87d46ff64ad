// oneDNN as a peer of sqrtdk's GEMM: the bar in bench-gemm and a cross-check in tests/ops/test_gemm.cpp. Not part
// of libsqrtdk (the engine has one GEMM, ours; consumers of the installed library never need oneDNN): a static
// library, sqrtdk_onednn_peer, linked by sqrtdk-tests and the benchmarks only. oneDNN types stay in the .cpp.
//
// OnednnMatmul computes what ops::gemm computes, dst[M, N] = epilogue(src[M, K] · weightsᵀ) with weights [N, K],
// in oneDNN's best configuration ("plan once, execute many"):
//   constructor: creates the v2.6 matmul primitive for this exact M, these strides and this epilogue, with the
//                OpenMP thread count it will run with in effect (oneDNN's brgemm picks its blocking from it), and
//                reorders the weights once into the layout that primitive prefers (format_tag::any);
//   bind():      wraps the caller's buffers in memory objects, once;
//   execute():   the only work in a timed loop: primitive.execute on a stream made at construction, then wait.
// Epilogue as ops::GemmEpilogue, as post-ops: bias (the matmul's own), eltwise gelu_tanh / swish(1) = silu,
// binary_mul for multiply, sum for a residual that is dst itself (same stride), else binary_add.
// Threads: oneDNN's OpenMP runtime uses the calling thread's omp_get_max_threads(); ScopedOmpThreads sets it and
// restores it on every exit, exceptions included. Errors: oneDNN's errors become sqrtdk::Error.
#pragma once

#include "ops/gemm/gemm.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace sqrtdk::perf {

// Sets the calling thread's OpenMP thread count (omp_set_num_threads) for its lifetime; restores the previous one
// on destruction, also during unwinding.
class ScopedOmpThreads {
 public:
  explicit ScopedOmpThreads(int n_threads);
  ~ScopedOmpThreads();
  ScopedOmpThreads(const ScopedOmpThreads&) = delete;
  ScopedOmpThreads& operator=(const ScopedOmpThreads&) = delete;

 private:
  int saved_;
};

class OnednnMatmul {
 public:
  // weights [N, K] (row stride ld_weights) are reordered and may be freed afterwards. The epilogue's pointers are
  // not read here, only which operands are present, their strides, and whether residual is dst (sum post-op);
  // `dst` is only compared with epilogue.residual. n_threads: the count execute() will run with (0 = the
  // current omp_get_max_threads()).
  OnednnMatmul(const float* weights, size_t N, size_t K, size_t ld_weights, size_t M, size_t lda, size_t ldc,
               const ops::GemmEpilogue& epilogue = {}, const float* dst = nullptr, int n_threads = 0);
  ~OnednnMatmul();
  OnednnMatmul(OnednnMatmul&&) noexcept;
  OnednnMatmul& operator=(OnednnMatmul&&) noexcept;

  // The buffers of the next execute() calls: src [M, K] (stride lda), dst [M, N] (stride ldc), and the epilogue's
  // operands (same presence, strides and residual-is-dst as at construction, else sqrtdk::Error).
  void bind(const float* src, float* dst, const ops::GemmEpilogue& epilogue = {});
  // Runs the primitive on the bound buffers with the calling thread's current OpenMP thread count and waits.
  void execute();
  // bind + execute with n_threads set for the call (and restored after, exceptions included).
  void run(const float* src, float* dst, const ops::GemmEpilogue& epilogue, int n_threads);

  size_t weight_bytes() const;    // the reordered weights
  const char* impl_name() const;  // oneDNN's implementation, e.g. "brg:avx512_core"

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// oneDNN's matmul in the bf16 and int8 types: the peer of ops::gemm with bf16 and q8 weights (bench-gemm --dtype),
// planned once like OnednnMatmul (primitive for this exact M and thread count, weights reordered once into the
// layout it prefers, format_tag::any), without an epilogue. dst is f32 [M, N] (row stride ldc) for both:
//   bf16: src [M, K] bf16 (row stride lda), weights [N, K] bf16; dst = src · weightsᵀ, f32 accumulation.
//   int8: src [M, K] u8 with one zero point, weights [N, K] s8, one output scale per column n (oneDNN 2.6 has
//         no per-K-block scales): dst[m, n] = output_scales[n] · Σ_k (src[m, k] - src_zero_point) · w[n, k].
class OnednnTypedMatmul {
 public:
  static OnednnTypedMatmul bf16(const uint16_t* weights, size_t N, size_t K, size_t ld_weights, size_t M,
                                size_t lda, size_t ldc, int n_threads = 0);
  static OnednnTypedMatmul int8(const int8_t* weights, size_t N, size_t K, size_t ld_weights,
                                const float* output_scales, int32_t src_zero_point, size_t M, size_t lda,
                                size_t ldc, int n_threads = 0);
  ~OnednnTypedMatmul();
  OnednnTypedMatmul(OnednnTypedMatmul&&) noexcept;
  OnednnTypedMatmul& operator=(OnednnTypedMatmul&&) noexcept;

  // src: bf16 (uint16_t) or u8 elements as created; dst f32.
  void bind(const void* src, float* dst);
  // Runs the primitive on the bound buffers with the calling thread's current OpenMP thread count and waits.
  void execute();

  size_t weight_bytes() const;    // the reordered weights (and any compensation oneDNN keeps beside them)
  const char* impl_name() const;  // e.g. "brg:avx512_core_bf16", "brg:avx512_core_amx"

  struct Impl;

 private:
  explicit OnednnTypedMatmul(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Caps the ISA oneDNN's kernels may use, for this process (dnnl::set_max_cpu_isa): "avx512_core",
// "avx512_core_vnni", "avx512_core_bf16", "avx512_core_amx", "all". Must come before oneDNN creates any primitive;
// sqrtdk::Error for an unknown name or when oneDNN refuses (too late).
void onednn_set_max_cpu_isa(const std::string& name);

// One call, planned and run at once (tests): dst = epilogue(src · weightsᵀ) through a fresh OnednnMatmul.
void onednn_gemm(const float* src, size_t M, size_t lda, const float* weights, size_t N, size_t K, size_t ld_weights,
                 float* dst, size_t ldc, const ops::GemmEpilogue& epilogue = {}, int n_threads = 1);

}  // namespace sqrtdk::perf
