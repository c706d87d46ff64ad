// oneDNN v2.6 matmul as sqrtdk's GEMM peer (onednn_peer.h). Compiled into sqrtdk_onednn_peer, never libsqrtdk.
#include "perf/common/onednn_peer.h"

#include <sqrtdk/error.h>

#include <oneapi/dnnl/dnnl.hpp>
#include <omp.h>

#include <string>
#include <unordered_map>

namespace sqrtdk::perf {

using dnnl::memory;
using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;

namespace {
memory::dims dims2(size_t a, size_t b) { return {static_cast<memory::dim>(a), static_cast<memory::dim>(b)}; }
memory::desc strided(size_t rows, size_t cols, size_t ld) {
  return memory::desc(dims2(rows, cols), dt::f32, dims2(ld, 1));
}
}  // namespace

ScopedOmpThreads::ScopedOmpThreads(int n_threads) : saved_(omp_get_max_threads()) {
  if (n_threads > 0) omp_set_num_threads(n_threads);
}
ScopedOmpThreads::~ScopedOmpThreads() { omp_set_num_threads(saved_); }

struct OnednnMatmul::Impl {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  size_t M = 0, N = 0, K = 0, lda = 0, ldc = 0;
  bool bias = false, multiply = false, residual = false, sum_residual = false;
  size_t ld_multiply = 0, ld_residual = 0;
  int multiply_post_op = -1, residual_post_op = -1;  // post-op index of each binary operand
  dnnl::matmul::primitive_desc pd;
  dnnl::matmul primitive;
  memory weights;  // reordered into pd.weights_desc()
  std::unordered_map<int, memory> args;
  bool bound = false;
};

OnednnMatmul::OnednnMatmul(const float* weights, size_t N, size_t K, size_t ld_weights, size_t M, size_t lda,
                           size_t ldc, const ops::GemmEpilogue& e, const float* dst, int n_threads)
    : impl_(std::make_unique<Impl>()) {
  const std::string where = "OnednnMatmul(M " + std::to_string(M) + ", N " + std::to_string(N) + ", K " +
                            std::to_string(K) + ")";
  if (M == 0 || N == 0 || K == 0) throw Error(where + ": M, N and K must be ≥ 1");
  if (weights == nullptr) throw Error(where + ": weights is null");
  if (ld_weights < K || lda < K || ldc < N) throw Error(where + ": a stride is below its width");
  Impl& p = *impl_;
  p.M = M;
  p.N = N;
  p.K = K;
  p.lda = lda;
  p.ldc = ldc;
  p.bias = e.bias != nullptr;
  p.multiply = e.multiply != nullptr;
  p.residual = e.residual != nullptr;
  p.sum_residual = p.residual && e.residual == dst && e.ld_residual == ldc;
  p.ld_multiply = p.multiply ? e.ld_multiply : 0;
  p.ld_residual = p.residual ? e.ld_residual : 0;
  try {
    const ScopedOmpThreads threads(n_threads);  // primitive creation sees the count execute() will run with
    dnnl::post_ops ops;
    int index = 0;
    if (e.activation == ops::Activation::gelu_tanh) {
      ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_gelu_tanh, 0, 0);
      ++index;
    } else if (e.activation == ops::Activation::silu) {
      ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_swish, 1.0f, 0);
      ++index;
    }
    if (p.multiply) {
      ops.append_binary(dnnl::algorithm::binary_mul, strided(M, N, p.ld_multiply));
      p.multiply_post_op = index++;
    }
    if (p.sum_residual) {
      ops.append_sum(1.0f);
    } else if (p.residual) {
      ops.append_binary(dnnl::algorithm::binary_add, strided(M, N, p.ld_residual));
      p.residual_post_op = index;
    }
    dnnl::primitive_attr attr;
    attr.set_post_ops(ops);
    const memory::desc any_md(dims2(K, N), dt::f32, tag::any);
    const memory::desc bias_md(dims2(1, N), dt::f32, tag::ab);
    const auto desc = p.bias ? dnnl::matmul::desc(strided(M, K, lda), any_md, bias_md, strided(M, N, ldc))
                             : dnnl::matmul::desc(strided(M, K, lda), any_md, strided(M, N, ldc));
    p.pd = dnnl::matmul::primitive_desc(desc, attr, p.engine);
    p.primitive = dnnl::matmul(p.pd);
    // [N, K] with row stride ld is the [K, N] matrix with strides {1, ld}.
    memory user(memory::desc(dims2(K, N), dt::f32, dims2(1, ld_weights)), p.engine, const_cast<float*>(weights));
    p.weights = memory(p.pd.weights_desc(), p.engine);
    dnnl::reorder(user, p.weights).execute(p.stream, user, p.weights);
    p.stream.wait();
  } catch (const dnnl::error& err) {
    throw Error(where + ": oneDNN error: " + err.what());
  }
}

OnednnMatmul::~OnednnMatmul() = default;
OnednnMatmul::OnednnMatmul(OnednnMatmul&&) noexcept = default;
OnednnMatmul& OnednnMatmul::operator=(OnednnMatmul&&) noexcept = default;

void OnednnMatmul::bind(const float* src, float* dst, const ops::GemmEpilogue& e) {
  Impl& p = *impl_;
  if (src == nullptr || dst == nullptr) throw Error("OnednnMatmul::bind: src or dst is null");
  const bool sum_residual = e.residual != nullptr && e.residual == dst && e.ld_residual == p.ldc;
  if ((e.bias != nullptr) != p.bias || (e.multiply != nullptr) != p.multiply ||
      (e.residual != nullptr) != p.residual || sum_residual != p.sum_residual ||
      (p.multiply && e.ld_multiply != p.ld_multiply) || (p.residual && e.ld_residual != p.ld_residual))
    throw Error("OnednnMatmul::bind: the epilogue differs from the one the primitive was created for");
  try {
    p.args.clear();
    p.args[DNNL_ARG_SRC] = memory(strided(p.M, p.K, p.lda), p.engine, const_cast<float*>(src));
    p.args[DNNL_ARG_WEIGHTS] = p.weights;
    p.args[DNNL_ARG_DST] = memory(strided(p.M, p.N, p.ldc), p.engine, dst);
    if (p.bias)
      p.args[DNNL_ARG_BIAS] = memory({dims2(1, p.N), dt::f32, tag::ab}, p.engine, const_cast<float*>(e.bias));
    if (p.multiply)
      p.args[DNNL_ARG_ATTR_MULTIPLE_POST_OP(p.multiply_post_op) | DNNL_ARG_SRC_1] =
          memory(strided(p.M, p.N, p.ld_multiply), p.engine, const_cast<float*>(e.multiply));
    if (p.residual && !p.sum_residual)
      p.args[DNNL_ARG_ATTR_MULTIPLE_POST_OP(p.residual_post_op) | DNNL_ARG_SRC_1] =
          memory(strided(p.M, p.N, p.ld_residual), p.engine, const_cast<float*>(e.residual));
    p.bound = true;
  } catch (const dnnl::error& err) {
    throw Error(std::string("OnednnMatmul::bind: oneDNN error: ") + err.what());
  }
}

void OnednnMatmul::execute() {
  Impl& p = *impl_;
  if (!p.bound) throw Error("OnednnMatmul::execute: no buffers bound (call bind first)");
  try {
    p.primitive.execute(p.stream, p.args);
    p.stream.wait();
  } catch (const dnnl::error& err) {
    throw Error(std::string("OnednnMatmul::execute: oneDNN error: ") + err.what());
  }
}

void OnednnMatmul::run(const float* src, float* dst, const ops::GemmEpilogue& epilogue, int n_threads) {
  bind(src, dst, epilogue);
  const ScopedOmpThreads threads(n_threads);
  execute();
}

size_t OnednnMatmul::weight_bytes() const { return impl_->pd.weights_desc().get_size(); }

const char* OnednnMatmul::impl_name() const { return impl_->pd.impl_info_str(); }

struct OnednnTypedMatmul::Impl {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  size_t M = 0, N = 0, K = 0, lda = 0, ldc = 0;
  dt src_type = dt::undef;
  dnnl::matmul::primitive_desc pd;
  dnnl::matmul primitive;
  memory weights;  // reordered into pd.weights_desc()
  std::unordered_map<int, memory> args;
  bool bound = false;
};

namespace {

// The shared part of OnednnTypedMatmul's two constructors: checks, primitive, weights reordered once.
std::unique_ptr<OnednnTypedMatmul::Impl> make_typed_matmul(const char* type, dt src_type, dt weight_type,
                                                           const void* weights, size_t N, size_t K,
                                                           size_t ld_weights, size_t M, size_t lda, size_t ldc,
                                                           const dnnl::primitive_attr& attr, int n_threads) {
  const std::string where = std::string("OnednnTypedMatmul::") + type + "(M " + std::to_string(M) + ", N " +
                            std::to_string(N) + ", K " + std::to_string(K) + ")";
  if (M == 0 || N == 0 || K == 0) throw Error(where + ": M, N and K must be ≥ 1");
  if (weights == nullptr) throw Error(where + ": weights is null");
  if (ld_weights < K || lda < K || ldc < N) throw Error(where + ": a stride is below its width");
  auto p = std::make_unique<OnednnTypedMatmul::Impl>();
  p->M = M;
  p->N = N;
  p->K = K;
  p->lda = lda;
  p->ldc = ldc;
  p->src_type = src_type;
  try {
    const ScopedOmpThreads threads(n_threads);  // primitive creation sees the count execute() will run with
    const memory::desc src_md(dims2(M, K), src_type, dims2(lda, 1));
    const memory::desc any_md(dims2(K, N), weight_type, tag::any);
    const memory::desc dst_md(dims2(M, N), dt::f32, dims2(ldc, 1));
    p->pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(src_md, any_md, dst_md), attr, p->engine);
    p->primitive = dnnl::matmul(p->pd);
    // [N, K] with row stride ld is the [K, N] matrix with strides {1, ld}.
    memory user(memory::desc(dims2(K, N), weight_type, dims2(1, ld_weights)), p->engine, const_cast<void*>(weights));
    p->weights = memory(p->pd.weights_desc(), p->engine);
    dnnl::reorder(user, p->weights).execute(p->stream, user, p->weights);
    p->stream.wait();
  } catch (const dnnl::error& err) {
    throw Error(where + ": oneDNN error: " + err.what());
  }
  return p;
}

}  // namespace

OnednnTypedMatmul::OnednnTypedMatmul(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
OnednnTypedMatmul::~OnednnTypedMatmul() = default;
OnednnTypedMatmul::OnednnTypedMatmul(OnednnTypedMatmul&&) noexcept = default;
OnednnTypedMatmul& OnednnTypedMatmul::operator=(OnednnTypedMatmul&&) noexcept = default;

OnednnTypedMatmul OnednnTypedMatmul::bf16(const uint16_t* weights, size_t N, size_t K, size_t ld_weights, size_t M,
                                          size_t lda, size_t ldc, int n_threads) {
  return OnednnTypedMatmul(make_typed_matmul("bf16", dt::bf16, dt::bf16, weights, N, K, ld_weights, M, lda, ldc,
                                             dnnl::primitive_attr(), n_threads));
}

OnednnTypedMatmul OnednnTypedMatmul::int8(const int8_t* weights, size_t N, size_t K, size_t ld_weights,
                                          const float* output_scales, int32_t src_zero_point, size_t M, size_t lda,
                                          size_t ldc, int n_threads) {
  if (output_scales == nullptr) throw Error("OnednnTypedMatmul::int8: output_scales is null");
  dnnl::primitive_attr attr;
  // Scales and zero point fixed at creation (known before the timed loop): oneDNN's cheapest form of both.
  attr.set_output_scales(1 << 1, std::vector<float>(output_scales, output_scales + N));  // mask: per dst column
  if (src_zero_point != 0) attr.set_zero_points(DNNL_ARG_SRC, 0, {src_zero_point});
  return OnednnTypedMatmul(
      make_typed_matmul("int8", dt::u8, dt::s8, weights, N, K, ld_weights, M, lda, ldc, attr, n_threads));
}

void OnednnTypedMatmul::bind(const void* src, float* dst) {
  Impl& p = *impl_;
  if (src == nullptr || dst == nullptr) throw Error("OnednnTypedMatmul::bind: src or dst is null");
  try {
    p.args.clear();
    p.args[DNNL_ARG_SRC] =
        memory(memory::desc(dims2(p.M, p.K), p.src_type, dims2(p.lda, 1)), p.engine, const_cast<void*>(src));
    p.args[DNNL_ARG_WEIGHTS] = p.weights;
    p.args[DNNL_ARG_DST] = memory(strided(p.M, p.N, p.ldc), p.engine, dst);
    p.bound = true;
  } catch (const dnnl::error& err) {
    throw Error(std::string("OnednnTypedMatmul::bind: oneDNN error: ") + err.what());
  }
}

void OnednnTypedMatmul::execute() {
  Impl& p = *impl_;
  if (!p.bound) throw Error("OnednnTypedMatmul::execute: no buffers bound (call bind first)");
  try {
    p.primitive.execute(p.stream, p.args);
    p.stream.wait();
  } catch (const dnnl::error& err) {
    throw Error(std::string("OnednnTypedMatmul::execute: oneDNN error: ") + err.what());
  }
}

size_t OnednnTypedMatmul::weight_bytes() const { return impl_->pd.weights_desc().get_size(); }

const char* OnednnTypedMatmul::impl_name() const { return impl_->pd.impl_info_str(); }

void onednn_set_max_cpu_isa(const std::string& name) {
  static const std::unordered_map<std::string, dnnl::cpu_isa> isas = {
      {"avx512_core", dnnl::cpu_isa::avx512_core},
      {"avx512_core_vnni", dnnl::cpu_isa::avx512_core_vnni},
      {"avx512_core_bf16", dnnl::cpu_isa::avx512_core_bf16},
      {"avx512_core_amx", dnnl::cpu_isa::avx512_core_amx},
      {"all", dnnl::cpu_isa::all}};
  const auto it = isas.find(name);
  if (it == isas.end())
    throw Error("oneDNN ISA '" + name + "': expected avx512_core, avx512_core_vnni, avx512_core_bf16, "
                "avx512_core_amx or all");
  try {
    dnnl::set_max_cpu_isa(it->second);
  } catch (const dnnl::error& err) {
    throw Error("oneDNN refused max ISA '" + name + "' (set before any primitive is created): " + err.what());
  }
}

void onednn_gemm(const float* src, size_t M, size_t lda, const float* weights, size_t N, size_t K, size_t ld_weights,
                 float* dst, size_t ldc, const ops::GemmEpilogue& epilogue, int n_threads) {
  OnednnMatmul matmul(weights, N, K, ld_weights, M, lda, ldc, epilogue, dst, n_threads);
  matmul.run(src, dst, epilogue, n_threads);
}

}  // namespace sqrtdk::perf
