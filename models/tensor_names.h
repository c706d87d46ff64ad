// The tensor set of each model family (engine/FORMAT.md, "Tensor names"): names and the shapes the config implies,
// in one fixed canonical order. Used by the loader's family check, by `sqrtdk make-toy` and by the executor, so the
// table in FORMAT.md lives in code in exactly one place.
#pragma once

#include <sqrtdk/format.h>

#include <cstdint>
#include <string>
#include <vector>

namespace sqrtdk {

struct TensorSpec {
  std::string name;
  std::vector<uint64_t> shape;  // outermost first; linear weights are [out, in]
};

// Canonical order: tok_emb, pos_emb (gpt2), then per block i = 0..n_layers-1:
//   gpt2:  attn_norm.{weight,bias}, attn_qkv.{weight,bias}, attn_out.{weight,bias}, ffn_norm.{weight,bias},
//          ffn_up.{weight,bias}, ffn_down.{weight,bias}
//   llama: attn_norm.weight, attn_q.weight, attn_k.weight, attn_v.weight, attn_out.weight, ffn_norm.weight,
//          ffn_gate.weight, ffn_up.weight, ffn_down.weight
// then out_norm.weight (+ .bias for gpt2), then lm_head.weight unless tied_embeddings.
// Precondition: config.validate() passed (sizes are then small enough that no shape overflows).
std::vector<TensorSpec> family_tensors(const ModelConfig& config);

// Number of tensors family_tensors() returns, computed without building the list (safe for any config).
uint64_t family_tensor_count(const ModelConfig& config);

}  // namespace sqrtdk
