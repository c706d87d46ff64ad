// The per-family tensor tables of engine/FORMAT.md; see models/tensor_names.h.
#include "models/tensor_names.h"

namespace sqrtdk {

std::vector<TensorSpec> family_tensors(const ModelConfig& c) {
  const uint64_t d_model = c.d_model, d_ff = c.d_ff, n_vocab = c.n_vocab;
  const uint64_t q_dim = uint64_t{c.n_heads} * c.head_dim;      // [n_heads * head_dim]
  const uint64_t kv_dim = uint64_t{c.n_kv_heads} * c.head_dim;  // [n_kv_heads * head_dim]
  std::vector<TensorSpec> t;
  t.reserve(family_tensor_count(c));
  t.push_back({"tok_emb", {n_vocab, d_model}});
  const bool gpt2 = c.arch == Arch::gpt2;
  if (gpt2) t.push_back({"pos_emb", {uint64_t{c.max_seq}, d_model}});
  for (uint32_t i = 0; i < c.n_layers; ++i) {
    const std::string b = "blk." + std::to_string(i) + ".";
    if (gpt2) {
      t.push_back({b + "attn_norm.weight", {d_model}});
      t.push_back({b + "attn_norm.bias", {d_model}});
      t.push_back({b + "attn_qkv.weight", {3 * d_model, d_model}});  // rows: q, then k, then v
      t.push_back({b + "attn_qkv.bias", {3 * d_model}});
      t.push_back({b + "attn_out.weight", {d_model, q_dim}});
      t.push_back({b + "attn_out.bias", {d_model}});
      t.push_back({b + "ffn_norm.weight", {d_model}});
      t.push_back({b + "ffn_norm.bias", {d_model}});
      t.push_back({b + "ffn_up.weight", {d_ff, d_model}});
      t.push_back({b + "ffn_up.bias", {d_ff}});
      t.push_back({b + "ffn_down.weight", {d_model, d_ff}});
      t.push_back({b + "ffn_down.bias", {d_model}});
    } else {
      t.push_back({b + "attn_norm.weight", {d_model}});
      t.push_back({b + "attn_q.weight", {q_dim, d_model}});
      t.push_back({b + "attn_k.weight", {kv_dim, d_model}});
      t.push_back({b + "attn_v.weight", {kv_dim, d_model}});
      t.push_back({b + "attn_out.weight", {d_model, q_dim}});
      t.push_back({b + "ffn_norm.weight", {d_model}});
      t.push_back({b + "ffn_gate.weight", {d_ff, d_model}});
      t.push_back({b + "ffn_up.weight", {d_ff, d_model}});
      t.push_back({b + "ffn_down.weight", {d_model, d_ff}});
    }
  }
  t.push_back({"out_norm.weight", {d_model}});
  if (gpt2) t.push_back({"out_norm.bias", {d_model}});
  if (!c.tied_embeddings) t.push_back({"lm_head.weight", {n_vocab, d_model}});
  return t;
}

uint64_t family_tensor_count(const ModelConfig& c) {
  const bool gpt2 = c.arch == Arch::gpt2;
  const uint64_t per_block = gpt2 ? 12 : 9;
  return (gpt2 ? 2 : 1) + per_block * c.n_layers + (gpt2 ? 2 : 1) + (c.tied_embeddings ? 0 : 1);
}

}  // namespace sqrtdk
