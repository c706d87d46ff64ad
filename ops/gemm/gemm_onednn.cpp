// The oneDNN backend of gemm (SQRTDK_GEMM=onednn): a v2.6 matmul primitive. The bar our kernels are measured
// against and a cross-check in tests; oneDNN types stay in this file (PackedWeights holds an opaque pointer).
//
// pack(): the weights [N, K] (= a [K, N] matrix with strides {1, ld}) are reordered once into the layout the
// primitive prefers (format_tag::any, asked for M = 128; oneDNN's brgemm kernels pick the weight blocking from N
// and K). gemm(): one primitive per (M, strides, epilogue) is created on first use and cached inside the weights
// (a mutex guards the cache, so concurrent gemm() calls are safe). Post-ops: bias (the matmul's own), eltwise
// gelu_tanh / swish(1) = silu, binary_mul for multiply, and sum (residual == dst) or binary_add for residual.
// Threads: the OpenMP runtime's count for the calling thread is set to n_threads for the call and restored.
#include "ops/gemm/gemm_kernels.h"

#include <sqrtdk/error.h>

#include <oneapi/dnnl/dnnl.hpp>
#include <omp.h>

#include <map>
#include <mutex>
#include <tuple>

namespace sqrtdk::ops::gemm_detail {

using dnnl::memory;
using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;

struct OnednnWeights {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  size_t N = 0, K = 0;
  memory::desc weights_md;
  memory weights;
  using Key = std::tuple<size_t, size_t, size_t, bool, int, bool, size_t, int, size_t>;
  mutable std::mutex mutex;
  mutable std::map<Key, dnnl::matmul> primitives;
};

namespace {
memory::dims dims2(size_t a, size_t b) { return {static_cast<memory::dim>(a), static_cast<memory::dim>(b)}; }
memory::desc strided(size_t rows, size_t cols, size_t ld) {
  return memory::desc(dims2(rows, cols), dt::f32, dims2(ld, 1));
}
}  // namespace

std::shared_ptr<OnednnWeights> onednn_pack(const float* weights, size_t N, size_t K, size_t ld_weights) {
  try {
    auto w = std::make_shared<OnednnWeights>();
    w->N = N;
    w->K = K;
    const memory::desc src_md(dims2(128, K), dt::f32, tag::ab);
    const memory::desc any_md(dims2(K, N), dt::f32, tag::any);
    const memory::desc dst_md(dims2(128, N), dt::f32, tag::ab);
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src_md, any_md, dst_md), w->engine);
    w->weights_md = pd.weights_desc();
    // [N, K] with row stride ld is the [K, N] matrix with strides {1, ld}.
    const memory::desc user_md(dims2(K, N), dt::f32, dims2(1, ld_weights));
    memory user(user_md, w->engine, const_cast<float*>(weights));
    w->weights = memory(w->weights_md, w->engine);
    dnnl::stream stream(w->engine);
    dnnl::reorder(user, w->weights).execute(stream, user, w->weights);
    stream.wait();
    return w;
  } catch (const dnnl::error& e) {
    throw Error(std::string("onednn_pack: oneDNN error: ") + e.what());
  }
}

size_t onednn_bytes(const OnednnWeights& w) { return w.weights_md.get_size(); }

void onednn_gemm(const OnednnWeights& w, const float* src, size_t M, size_t lda, float* dst, size_t ldc,
                 const GemmEpilogue& e, int n_threads) {
  try {
    const bool sum_residual = e.residual == dst && e.ld_residual == ldc;
    const OnednnWeights::Key key{M,
                                 lda,
                                 ldc,
                                 e.bias != nullptr,
                                 static_cast<int>(e.activation),
                                 e.multiply != nullptr,
                                 e.multiply ? e.ld_multiply : 0,
                                 e.residual == nullptr ? 0 : (sum_residual ? 1 : 2),
                                 e.residual ? e.ld_residual : 0};
    dnnl::matmul prim;
    {
      std::lock_guard<std::mutex> lock(w.mutex);
      auto it = w.primitives.find(key);
      if (it == w.primitives.end()) {
        dnnl::post_ops ops;
        if (e.activation == Activation::gelu_tanh) ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_gelu_tanh, 0, 0);
        if (e.activation == Activation::silu) ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_swish, 1.0f, 0);
        if (e.multiply) ops.append_binary(dnnl::algorithm::binary_mul, strided(M, w.N, e.ld_multiply));
        if (e.residual) {
          if (sum_residual)
            ops.append_sum(1.0f);
          else
            ops.append_binary(dnnl::algorithm::binary_add, strided(M, w.N, e.ld_residual));
        }
        dnnl::primitive_attr attr;
        attr.set_post_ops(ops);
        const memory::desc bias_md(dims2(1, w.N), dt::f32, tag::ab);
        const auto desc = e.bias ? dnnl::matmul::desc(strided(M, w.K, lda), w.weights_md, bias_md,
                                                      strided(M, w.N, ldc))
                                 : dnnl::matmul::desc(strided(M, w.K, lda), w.weights_md, strided(M, w.N, ldc));
        it = w.primitives.emplace(key, dnnl::matmul(dnnl::matmul::primitive_desc(desc, attr, w.engine))).first;
      }
      prim = it->second;
    }
    std::unordered_map<int, memory> args;
    args[DNNL_ARG_SRC] = memory(strided(M, w.K, lda), w.engine, const_cast<float*>(src));
    args[DNNL_ARG_WEIGHTS] = w.weights;
    args[DNNL_ARG_DST] = memory(strided(M, w.N, ldc), w.engine, dst);
    if (e.bias) args[DNNL_ARG_BIAS] = memory({dims2(1, w.N), dt::f32, tag::ab}, w.engine, const_cast<float*>(e.bias));
    int post_index = e.activation != Activation::none ? 1 : 0;
    if (e.multiply)
      args[DNNL_ARG_ATTR_MULTIPLE_POST_OP(post_index++) | DNNL_ARG_SRC_1] =
          memory(strided(M, w.N, e.ld_multiply), w.engine, const_cast<float*>(e.multiply));
    if (e.residual && !sum_residual)
      args[DNNL_ARG_ATTR_MULTIPLE_POST_OP(post_index) | DNNL_ARG_SRC_1] =
          memory(strided(M, w.N, e.ld_residual), w.engine, const_cast<float*>(e.residual));
    const int saved = omp_get_max_threads();
    omp_set_num_threads(n_threads);
    dnnl::stream stream(w.engine);
    prim.execute(stream, args);
    stream.wait();
    omp_set_num_threads(saved);
  } catch (const dnnl::error& e) {
    throw Error(std::string("gemm (onednn backend): oneDNN error: ") + e.what());
  }
}

}  // namespace sqrtdk::ops::gemm_detail
