// Building blocks of the reference forward passes (models/runtime/reference_ops.h).
#include "models/runtime/reference_ops.h"

#include "ops/attention/attention.h"
#include "ops/gemm/gemm.h"

#include <cmath>

namespace sqrtdk::reference {

// y[n, N] = x[n, K] · W[N, K]ᵀ (+ bias)
std::vector<float> linear(const std::vector<float>& x, size_t n, size_t K, const std::vector<float>& w, size_t N,
                          const float* bias) {
  std::vector<float> y(n * N);
  ops::GemmEpilogue e;
  e.bias = bias;
  ops::gemm_ref(x.data(), n, K, w.data(), N, K, K, y.data(), N, e);
  return y;
}

// Causal attention over all n tokens: q [n, n_heads·hd], k and v [n, n_kv_heads·hd].
std::vector<float> attention(const ModelConfig& c, const std::vector<float>& q, const std::vector<float>& k,
                             const std::vector<float>& v, size_t n) {
  const size_t hd = c.head_dim, kvw = c.n_kv_heads * hd;
  // Re-lay k and v as the cache layout [n_kv_heads][n][hd].
  std::vector<float> kc(c.n_kv_heads * n * hd), vc(kc.size());
  for (size_t h = 0; h < c.n_kv_heads; ++h)
    for (size_t t = 0; t < n; ++t)
      for (size_t i = 0; i < hd; ++i) {
        kc[(h * n + t) * hd + i] = k[t * kvw + h * hd + i];
        vc[(h * n + t) * hd + i] = v[t * kvw + h * hd + i];
      }
  std::vector<float> out(n * c.n_heads * hd);
  ops::AttentionParams p;
  p.n_heads = c.n_heads;
  p.n_kv_heads = c.n_kv_heads;
  p.head_dim = hd;
  p.n_queries = n;
  p.pos0 = 0;
  p.causal = true;
  p.scale = c.attention_scale_or_default();
  p.q = q.data();
  p.ldq = c.n_heads * hd;
  p.k_cache = kc.data();
  p.v_cache = vc.data();
  p.cache_stride = n;
  p.out = out.data();
  p.ldo = c.n_heads * hd;
  ops::attention_ref(p);
  return out;
}

}  // namespace sqrtdk::reference
