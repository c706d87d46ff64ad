// The gpt2 family's executable spec: the forward pass of gpt2.cpp built only from the scalar ref ops, with the
// weights read as f32 (no packing, no KV cache, no chunking, no fusion). Slow and plain on purpose: tests compare the
// fast path (every ISA, fused epilogues, cache, chunks) against it.
#include "models/gpt2/gpt2.h"
#include "models/runtime/reference_ops.h"
#include "ops/activation/activation.h"
#include "ops/norm/norm.h"

namespace sqrtdk {

std::vector<float> gpt2_reference_forward(const ModelConfig& c, const TensorReader& tensor,
                                          std::span<const uint32_t> tokens) {
  const size_t n = tokens.size(), d = c.d_model;
  const auto tok_emb = tensor("tok_emb"), pos_emb = tensor("pos_emb");
  std::vector<float> x(n * d), xb(n * d);
  for (size_t t = 0; t < n; ++t)
    for (size_t i = 0; i < d; ++i) x[t * d + i] = tok_emb[tokens[t] * d + i] + pos_emb[t * d + i];

  for (size_t l = 0; l < c.n_layers; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    ops::layer_norm_ref(x.data(), n, d, d, tensor(b + "attn_norm.weight").data(),
                        tensor(b + "attn_norm.bias").data(), c.norm_eps, xb.data(), d);
    auto qkv = reference::linear(xb, n, d, tensor(b + "attn_qkv.weight"), 3 * d, tensor(b + "attn_qkv.bias").data());
    std::vector<float> q(n * d), k(n * d), v(n * d);
    for (size_t t = 0; t < n; ++t)
      for (size_t i = 0; i < d; ++i) {
        q[t * d + i] = qkv[t * 3 * d + i];
        k[t * d + i] = qkv[t * 3 * d + d + i];
        v[t * d + i] = qkv[t * 3 * d + 2 * d + i];
      }
    auto att = reference::attention(c, q, k, v, n);
    auto o = reference::linear(att, n, d, tensor(b + "attn_out.weight"), d, tensor(b + "attn_out.bias").data());
    for (size_t i = 0; i < x.size(); ++i) x[i] += o[i];

    ops::layer_norm_ref(x.data(), n, d, d, tensor(b + "ffn_norm.weight").data(),
                        tensor(b + "ffn_norm.bias").data(), c.norm_eps, xb.data(), d);
    auto h = reference::linear(xb, n, d, tensor(b + "ffn_up.weight"), c.d_ff, tensor(b + "ffn_up.bias").data());
    ops::gelu_tanh_ref(h.data(), h.size());
    auto down = reference::linear(h, n, c.d_ff, tensor(b + "ffn_down.weight"), d, tensor(b + "ffn_down.bias").data());
    for (size_t i = 0; i < x.size(); ++i) x[i] += down[i];
  }
  ops::layer_norm_ref(x.data(), n, d, d, tensor("out_norm.weight").data(), tensor("out_norm.bias").data(),
                      c.norm_eps, xb.data(), d);
  return reference::linear(xb, n, c.d_model, tensor(c.tied_embeddings ? "tok_emb" : "lm_head.weight"), c.n_vocab);
}

}  // namespace sqrtdk
