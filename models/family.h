// The model-family registry: everything sqrtdk knows about one family of transformers, in one struct, and the one
// list of families (models/families.cpp). The engine (format checks, loader, session, Hugging Face import), the
// tools (make-toy, bench) and the tests ask the registry; none of them switches on Arch.
//
// Adding a family: a folder models/<family>/ that defines its ModelFamily (see models/llama/), one line in
// models/families.cpp, its Arch value in <sqrtdk/config.h>, and its golden fixture (tools/make_golden.py).
#pragma once

#include <sqrtdk/config.h>

#include "models/runtime/executor.h"
#include "models/runtime/hf_config.h"
#include "models/runtime/weight_loader.h"

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

namespace sqrtdk {

struct TensorSpec {
  std::string name;
  std::vector<uint64_t> shape;  // outermost first; linear weights are [out, in]
};

// The bytes one decode step (one token at `position`, attending to positions 0..position) must move, by kind. A
// lower bound on the traffic, so bandwidth / total() is an upper bound on tokens/s: panel padding, activations,
// RoPE tables and the logits are left out (small, and mostly cache-resident).
struct DecodeBytes {
  double weights = 0;     // what the forward reads in full: every linear weight and bias, the norms, the lm head (f32)
  double embedding = 0;   // the token's embedding row (+ gpt2's position row)
  double kv_read = 0;     // K and V of positions 0..position, every layer and kv head
  double kv_written = 0;  // K and V of this position, every layer and kv head
  double total() const { return weights + embedding + kv_read + kv_written; }
};

// Reads a tensor of the model as f32 by name, shaped as the family's tensor table says (reference forwards).
using TensorReader = std::function<std::vector<float>(const std::string& name)>;

struct ModelFamily {
  Arch arch;
  const char* name;  // the .sqdk arch name, also used on the command line ("llama")

  // --- config and tensors (engine/FORMAT.md) ---
  // The family's own config rules, after the shared ones of ModelConfig::validate: calls fail(what) to refuse.
  void (*validate)(const ModelConfig& config, const std::function<void(const std::string& what)>& fail);
  // The tensor set in canonical (file) order with the shapes the config implies. Precondition: validate passed.
  std::vector<TensorSpec> (*tensors)(const ModelConfig& config);
  // tensors(config).size() without building the list (safe for any config).
  uint64_t (*tensor_count)(const ModelConfig& config);
  // The sum of the tensor table's elements, in closed form (wraps for absurd configs, which validate refuses).
  uint64_t (*n_params)(const ModelConfig& config);
  // Multiply-adds per token in one block's linear layers (FLOP counts in reports and benchmarks).
  double (*block_linear_macs)(const ModelConfig& config);
  // Bytes of weights and embedding rows one decode step reads (the `weights` and `embedding` of DecodeBytes; the
  // KV cache's share is the same for every family: decode_bytes_per_token adds it).
  DecodeBytes (*decode_weight_bytes)(const ModelConfig& config);
  bool uses_rope;  // positions by rotary embedding (rope_theta, rope_interleaved apply)
  // Defaults for what `sqrtdk make-toy` leaves open: the feed-forward width for a d_model, and the RoPE base.
  uint32_t (*default_d_ff)(uint32_t d_model);
  float default_rope_theta;

  // --- running it ---
  // The weight plan: fills `weights` (whose config and isa are set) from the loader, packing each linear once.
  void (*load_weights)(WeightLoader& loader, ModelWeights& weights);
  // Widths per token of the family's scratch (activations beyond the residual stream).
  ScratchWidths (*scratch_widths)(const ModelConfig& config);
  // One chunk of tokens through every block: tokens[n] at positions pos0 ..; leaves the final-normed rows in s.xb.
  void (*forward)(ForwardState& s, const uint32_t* tokens, size_t n, size_t pos0);
  // The executable spec: scalar ref ops only, weights read as f32, no packing, cache or chunking. Returns logits
  // for every position, [tokens.size(), n_vocab].
  std::vector<float> (*reference_forward)(const ModelConfig& config, const TensorReader& read,
                                          std::span<const uint32_t> tokens);

  // --- Hugging Face import (sqrtdk convert) ---
  HfImport hf;
};

// Every family, in Arch order.
std::span<const ModelFamily* const> model_families();
// The family of `arch`, or nullptr if there is none (a corrupt file's config).
const ModelFamily* find_family(Arch arch);
// The known families for messages: "gpt2 or llama", or with their Arch ids "0 = gpt2 or 1 = llama".
std::string family_names(bool with_ids = false);
// The family of a validated config (throws sqrtdk::Error for an unknown arch).
const ModelFamily& family_of(const ModelConfig& config);

// Everything one decode step at `position` moves (DecodeBytes): the family's weights and embedding rows, plus the KV
// cache read and written. The decode roofline of `sqrtdk bench` and the profiler's working set come from here.
DecodeBytes decode_bytes_per_token(const ModelConfig& config, size_t position);

// The work of a prefill of n tokens (positions 0 .. n - 1) in chunks of max_batch that returns the last position's
// logits only (Session::prefill without all_logits), as the executor runs it: every row goes through every block
// up to its KV store (the QKV projection included); past it, each chunk's last block runs attention, the output
// projection and the feed-forward for the chunk's last row alone (ForwardState::last_rows_only); the lm head runs
// once. `sqrtdk bench`'s % of the FMA peak counts this, what ran.
struct PrefillWork {
  double flops = 0;        // all of it: the linear layers, attention (q·k and p·v), the lm head
  double linear_macs = 0;  // the linear layers' and the lm head's multiply-adds
};
PrefillWork prefill_work(const ModelConfig& config, size_t n, size_t max_batch);

// The family's tensor table for `config` (see ModelFamily::tensors).
std::vector<TensorSpec> family_tensors(const ModelConfig& config);
uint64_t family_tensor_count(const ModelConfig& config);

}  // namespace sqrtdk
