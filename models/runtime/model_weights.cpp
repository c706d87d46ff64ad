#include "models/runtime/model_weights.h"

namespace sqrtdk {

// Memory held by what a family's weight plan filled (the file mapping is the engine's, not counted).
size_t ModelWeights::packed_bytes() const {
  size_t total = tok_emb_f32.size() * sizeof(float) + pos_emb.size() * sizeof(float) + lm_head.weights.bytes() +
                 (out_norm_weight.size() + out_norm_bias.size()) * sizeof(float);
  for (const auto& l : layers) {
    for (const Linear* lin : {&l.attn_qkv, &l.attn_out, &l.ffn_gate, &l.ffn_up, &l.ffn_down}) total += lin->bytes();
    total += (l.attn_norm_weight.size() + l.attn_norm_bias.size() + l.ffn_norm_weight.size() +
              l.ffn_norm_bias.size()) * sizeof(float);
  }
  return total;
}

std::array<size_t, 3> ModelWeights::linear_bytes_by_type() const {
  std::array<size_t, 3> by_type{};
  auto add = [&](const Linear& lin) {
    if (lin.N() > 0) by_type[static_cast<size_t>(lin.weights.type())] += lin.weights.bytes();
  };
  add(lm_head);
  for (const auto& l : layers)
    for (const Linear* lin : {&l.attn_qkv, &l.attn_out, &l.ffn_gate, &l.ffn_up, &l.ffn_down}) add(*lin);
  return by_type;
}

}  // namespace sqrtdk
