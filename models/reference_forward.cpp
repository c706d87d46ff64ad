// Reference forward passes: the executable spec of both families, built only from the scalar ref ops, with the
// weights read from the file as f32 (no packing, no KV cache, no chunking, no fusion). Slow and plain on purpose:
// tests compare the fast path (every ISA, fused epilogues, cache, chunks) against it.
#include "models/runtime/executor.h"
#include "ops/activation/activation.h"
#include "ops/norm/norm.h"

#include <cmath>

namespace sqrtdk {

namespace {

std::vector<float> tensor(const WeightFile& f, const std::string& name) {
  const TensorInfo* t = f.find(name);
  if (!t) throw Error(f.path() + ": missing tensor '" + name + "'");
  std::vector<float> out(t->n_elements());
  f.read_f32(*t, out.data());
  return out;
}

// y[n, N] = x[n, K] · W[N, K]ᵀ (+ bias)
std::vector<float> linear(const std::vector<float>& x, size_t n, size_t K, const std::vector<float>& w, size_t N,
                          const float* bias = nullptr) {
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
  p.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
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

std::vector<float> logits(const WeightFile& f, const std::vector<float>& xb, size_t n) {
  const ModelConfig& c = f.config();
  return linear(xb, n, c.d_model, tensor(f, c.tied_embeddings ? "tok_emb" : "lm_head.weight"), c.n_vocab);
}

}  // namespace

std::vector<float> llama_reference_forward(const WeightFile& f, std::span<const uint32_t> tokens) {
  const ModelConfig& c = f.config();
  const size_t n = tokens.size(), d = c.d_model, hd = c.head_dim, qw = c.n_heads * hd, kvw = c.n_kv_heads * hd;
  const auto tok_emb = tensor(f, "tok_emb");
  std::vector<float> x(n * d), xb(n * d);
  for (size_t t = 0; t < n; ++t) std::copy_n(tok_emb.data() + tokens[t] * d, d, x.data() + t * d);
  const ops::RopeTable rope(n, hd, c.rope_theta);
  const auto layout = c.rope_interleaved ? ops::RopeLayout::interleaved : ops::RopeLayout::rotate_half;

  for (size_t l = 0; l < c.n_layers; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    ops::rms_norm_ref(x.data(), n, d, d, tensor(f, b + "attn_norm.weight").data(), c.norm_eps, xb.data(), d);
    auto q = linear(xb, n, d, tensor(f, b + "attn_q.weight"), qw);
    auto k = linear(xb, n, d, tensor(f, b + "attn_k.weight"), kvw);
    auto v = linear(xb, n, d, tensor(f, b + "attn_v.weight"), kvw);
    ops::rope_ref(rope, layout, q.data(), n, qw, c.n_heads, hd, 0);
    ops::rope_ref(rope, layout, k.data(), n, kvw, c.n_kv_heads, hd, 0);
    auto att = attention(c, q, k, v, n);
    auto o = linear(att, n, qw, tensor(f, b + "attn_out.weight"), d);
    for (size_t i = 0; i < x.size(); ++i) x[i] += o[i];

    ops::rms_norm_ref(x.data(), n, d, d, tensor(f, b + "ffn_norm.weight").data(), c.norm_eps, xb.data(), d);
    auto gate = linear(xb, n, d, tensor(f, b + "ffn_gate.weight"), c.d_ff);
    auto up = linear(xb, n, d, tensor(f, b + "ffn_up.weight"), c.d_ff);
    std::vector<float> h(gate.size());
    ops::swiglu_ref(gate.data(), up.data(), h.data(), h.size());
    auto down = linear(h, n, c.d_ff, tensor(f, b + "ffn_down.weight"), d);
    for (size_t i = 0; i < x.size(); ++i) x[i] += down[i];
  }
  ops::rms_norm_ref(x.data(), n, d, d, tensor(f, "out_norm.weight").data(), c.norm_eps, xb.data(), d);
  return logits(f, xb, n);
}

std::vector<float> gpt2_reference_forward(const WeightFile& f, std::span<const uint32_t> tokens) {
  const ModelConfig& c = f.config();
  const size_t n = tokens.size(), d = c.d_model;
  const auto tok_emb = tensor(f, "tok_emb"), pos_emb = tensor(f, "pos_emb");
  std::vector<float> x(n * d), xb(n * d);
  for (size_t t = 0; t < n; ++t)
    for (size_t i = 0; i < d; ++i) x[t * d + i] = tok_emb[tokens[t] * d + i] + pos_emb[t * d + i];

  for (size_t l = 0; l < c.n_layers; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    ops::layer_norm_ref(x.data(), n, d, d, tensor(f, b + "attn_norm.weight").data(),
                        tensor(f, b + "attn_norm.bias").data(), c.norm_eps, xb.data(), d);
    auto qkv = linear(xb, n, d, tensor(f, b + "attn_qkv.weight"), 3 * d, tensor(f, b + "attn_qkv.bias").data());
    std::vector<float> q(n * d), k(n * d), v(n * d);
    for (size_t t = 0; t < n; ++t)
      for (size_t i = 0; i < d; ++i) {
        q[t * d + i] = qkv[t * 3 * d + i];
        k[t * d + i] = qkv[t * 3 * d + d + i];
        v[t * d + i] = qkv[t * 3 * d + 2 * d + i];
      }
    auto att = attention(c, q, k, v, n);
    auto o = linear(att, n, d, tensor(f, b + "attn_out.weight"), d, tensor(f, b + "attn_out.bias").data());
    for (size_t i = 0; i < x.size(); ++i) x[i] += o[i];

    ops::layer_norm_ref(x.data(), n, d, d, tensor(f, b + "ffn_norm.weight").data(),
                        tensor(f, b + "ffn_norm.bias").data(), c.norm_eps, xb.data(), d);
    auto h = linear(xb, n, d, tensor(f, b + "ffn_up.weight"), c.d_ff, tensor(f, b + "ffn_up.bias").data());
    ops::gelu_tanh_ref(h.data(), h.size());
    auto down = linear(h, n, c.d_ff, tensor(f, b + "ffn_down.weight"), d, tensor(f, b + "ffn_down.bias").data());
    for (size_t i = 0; i < x.size(); ++i) x[i] += down[i];
  }
  ops::layer_norm_ref(x.data(), n, d, d, tensor(f, "out_norm.weight").data(), tensor(f, "out_norm.bias").data(),
                      c.norm_eps, xb.data(), d);
  return logits(f, xb, n);
}

}  // namespace sqrtdk
