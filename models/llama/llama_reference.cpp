// The llama family's executable spec: the forward pass of llama.cpp built only from the scalar ref ops, with the
// weights read as f32 (no packing, no KV cache, no chunking, no fusion). Slow and plain on purpose: tests compare the
// fast path (every ISA, fused epilogues, cache, chunks) against it.
#include "models/llama/llama.h"
#include "models/runtime/reference_ops.h"
#include "ops/activation/activation.h"
#include "ops/norm/norm.h"
#include "ops/rope/rope.h"

namespace sqrtdk {

std::vector<float> llama_reference_forward(const ModelConfig& c, const TensorReader& tensor,
                                           std::span<const uint32_t> tokens) {
  const size_t n = tokens.size(), d = c.d_model, hd = c.head_dim, qw = c.n_heads * hd, kvw = c.n_kv_heads * hd;
  const auto tok_emb = tensor("tok_emb");
  std::vector<float> x(n * d), xb(n * d);
  for (size_t t = 0; t < n; ++t) std::copy_n(tok_emb.data() + tokens[t] * d, d, x.data() + t * d);
  const ops::RopeTable rope(n, hd, c.rope_theta);
  const auto layout = c.rope_interleaved ? ops::RopeLayout::interleaved : ops::RopeLayout::rotate_half;

  for (size_t l = 0; l < c.n_layers; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    ops::rms_norm_ref(x.data(), n, d, d, tensor(b + "attn_norm.weight").data(), c.norm_eps, xb.data(), d);
    auto q = reference::linear(xb, n, d, tensor(b + "attn_q.weight"), qw);
    auto k = reference::linear(xb, n, d, tensor(b + "attn_k.weight"), kvw);
    auto v = reference::linear(xb, n, d, tensor(b + "attn_v.weight"), kvw);
    ops::rope_ref(rope, layout, q.data(), n, qw, c.n_heads, hd, 0);
    ops::rope_ref(rope, layout, k.data(), n, kvw, c.n_kv_heads, hd, 0);
    auto att = reference::attention(c, q, k, v, n);
    auto o = reference::linear(att, n, qw, tensor(b + "attn_out.weight"), d);
    for (size_t i = 0; i < x.size(); ++i) x[i] += o[i];

    ops::rms_norm_ref(x.data(), n, d, d, tensor(b + "ffn_norm.weight").data(), c.norm_eps, xb.data(), d);
    auto gate = reference::linear(xb, n, d, tensor(b + "ffn_gate.weight"), c.d_ff);
    auto up = reference::linear(xb, n, d, tensor(b + "ffn_up.weight"), c.d_ff);
    std::vector<float> h(gate.size());
    ops::swiglu_ref(gate.data(), up.data(), h.data(), h.size());
    auto down = reference::linear(h, n, c.d_ff, tensor(b + "ffn_down.weight"), d);
    for (size_t i = 0; i < x.size(); ++i) x[i] += down[i];
  }
  ops::rms_norm_ref(x.data(), n, d, d, tensor("out_norm.weight").data(), c.norm_eps, xb.data(), d);
  return reference::linear(xb, n, c.d_model, tensor(c.tied_embeddings ? "tok_emb" : "lm_head.weight"), c.n_vocab);
}

}  // namespace sqrtdk
