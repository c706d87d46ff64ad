// ModelWeights: what a family's forward pass reads (llama2.c's TransformerWeights, packed for our GEMM).
// Filled once by the family's weight plan (models/family.h) at load; const afterwards and shared by every session.
#pragma once

#include <sqrtdk/config.h>
#include <sqrtdk/isa.h>

#include "ops/base/aligned_buffer.h"
#include "ops/attention/attention_paths.h"
#include "ops/gemm/gemm.h"

#include <array>
#include <vector>

namespace sqrtdk {

// A linear layer y = x·Wᵀ (+ bias): W [N, K] packed once.
struct Linear {
  ops::PackedWeights weights;  // [N, K] packed for the model's ISA
  AlignedBuffer<float> bias;   // [N], empty if the layer has no bias
  size_t N() const { return weights.N(); }
  size_t K() const { return weights.K(); }
  const float* bias_or_null() const { return bias.empty() ? nullptr : bias.data(); }
  size_t bytes() const { return weights.bytes() + bias.size() * sizeof(float); }
};

// One block's weights; a family leaves what it does not use empty.
struct LayerWeights {
  AlignedBuffer<float> attn_norm_weight, attn_norm_bias;  // [d_model]; bias empty for llama
  Linear attn_qkv;   // [(n_heads + 2 n_kv_heads) head_dim, d_model]: rows q, then k, then v (llama's three fused)
  Linear attn_out;   // [d_model, n_heads head_dim]
  AlignedBuffer<float> ffn_norm_weight, ffn_norm_bias;    // [d_model]
  Linear ffn_gate;   // llama only: [d_ff, d_model]
  Linear ffn_up;     // [d_ff, d_model]
  Linear ffn_down;   // [d_model, d_ff]
};

struct ModelWeights {
  ModelConfig config;
  Isa isa = Isa::ref;

  const float* tok_emb = nullptr;          // [n_vocab, d_model] (in the file mapping, or tok_emb_f32)
  AlignedBuffer<float> tok_emb_f32;        // a converted copy when the file stores f16/bf16
  AlignedBuffer<float> pos_emb;            // gpt2: [max_seq, d_model]
  std::vector<LayerWeights> layers;        // [n_layers]
  AlignedBuffer<float> out_norm_weight, out_norm_bias;  // [d_model]
  Linear lm_head;                          // [n_vocab, d_model] (tok_emb when tied)
  ops::AttentionPathTable attention_paths; // measured fused/unfused crossovers for these heads (empty: built-in rule)

  size_t qkv_width() const { return (config.n_heads + 2 * config.n_kv_heads) * config.head_dim; }
  size_t packed_bytes() const;  // memory held: packed linears, norms, converted tables (not the file mapping)
  // The packed linear weights' bytes (lm head included) by their type, indexed by ops::WeightType (f32, bf16, q8).
  std::array<size_t, 3> linear_bytes_by_type() const;
};

}  // namespace sqrtdk
