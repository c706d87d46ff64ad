// sqrtdk::ModelConfig: the model blueprint (llama2.c's Config), and the Arch ids of the model families.
//
// Which families exist, and what each needs (tensors, config rules, forward pass), is the registry in
// models/family.h; this header is only the plain data every layer above ops shares.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace sqrtdk {

// A family's id in .sqdk files (engine/FORMAT.md). Each value has one entry in models/families.cpp.
enum class Arch : uint32_t { gpt2 = 0, llama = 1 };
// none: callers pass token ids; byte_level: ids 0..255 are bytes (the bundled model); bpe: a Hugging Face-style BPE
// tokenizer stored in the file's tokenizer section (engine/include/sqrtdk/tokenizer.h, FORMAT.md).
enum class TokenizerKind : uint32_t { none = 0, byte_level = 1, bpe = 2 };

const char* arch_name(Arch arch);  // the family's name ("gpt2", "llama"), or "unknown"

inline constexpr uint32_t kNoToken = 0xFFFFFFFFu;

// The model blueprint: every dimension the executor needs.
struct ModelConfig {
  // Sanity caps (FORMAT.md): keep every derived size and tensor count far from overflow.
  static constexpr uint32_t kMaxWidth = 1u << 24;
  static constexpr uint32_t kMaxLayers = 4096;

  Arch arch = Arch::llama;
  uint32_t d_model = 0;     // residual stream width
  uint32_t n_layers = 0;    // transformer blocks
  uint32_t n_heads = 0;     // query heads
  uint32_t n_kv_heads = 0;  // key/value heads; divides n_heads (grouped-query attention)
  uint32_t head_dim = 0;    // per-head width
  uint32_t d_ff = 0;        // feed-forward hidden width
  uint32_t n_vocab = 0;     // vocabulary size
  uint32_t max_seq = 0;     // longest context
  float norm_eps = 1e-5f;
  float rope_theta = 10000.0f;  // llama only
  bool tied_embeddings = false;  // output head reuses tok_emb
  bool rope_interleaved = false;  // RoPE on (2i, 2i+1) pairs; else rotate-half (Hugging Face)
  TokenizerKind tokenizer = TokenizerKind::none;
  uint32_t bos_id = kNoToken;
  uint32_t eos_id = kNoToken;
  // The factor on q·k before softmax. Absent: 1/√head_dim (every standard model). Set for models trained with
  // another scale (tools/scaling_training.py trains with 1 and 1/head_dim); then finite and > 0.
  std::optional<float> attention_scale;

  // attention_scale if set, else 1/√head_dim (rounded once from double).
  float attention_scale_or_default() const;

  // Throws sqrtdk::Error (prefixed with `where`) if the values make no sense together: the rules every family
  // shares, then the family's own (models/family.h).
  void validate(const std::string& where) const;
  // Parameter count implied by the config (for reports); 0 for an unknown arch.
  uint64_t n_params() const;
};

}  // namespace sqrtdk
