// The gpt2 family's registry entry (models/family.h): its tensors (engine/FORMAT.md), config rules, weight plan,
// scratch, and how Hugging Face's GPT2LMHeadModel checkpoints map onto it. The forward pass is gpt2.cpp.
#include "models/gpt2/gpt2.h"

#include <sqrtdk/error.h>

#include <cmath>
#include <cstring>

namespace sqrtdk {

namespace {

void validate(const ModelConfig& c, const std::function<void(const std::string&)>& fail) {
  if (uint64_t{c.n_heads} * c.head_dim != c.d_model)
    fail("d_model " + std::to_string(c.d_model) + " is not n_heads " + std::to_string(c.n_heads) + " x head_dim " +
         std::to_string(c.head_dim) + " (gpt2 needs them equal)");
  if (c.n_kv_heads != c.n_heads)
    fail("n_kv_heads " + std::to_string(c.n_kv_heads) + " differs from n_heads " + std::to_string(c.n_heads) +
         " (gpt2 has no grouped-query attention)");
  if (c.rope_interleaved) fail("the interleaved-RoPE flag is set but gpt2 has no RoPE");
  if (!std::isfinite(c.rope_theta)) fail("rope_theta is not finite");
}

uint64_t tensor_count(const ModelConfig& c) { return 2 + 12 * uint64_t{c.n_layers} + 2 + (c.tied_embeddings ? 0 : 1); }

// Canonical order: tok_emb, pos_emb, then per block attn_norm.{weight,bias}, attn_qkv.{weight,bias},
// attn_out.{weight,bias}, ffn_norm.{weight,bias}, ffn_up.{weight,bias}, ffn_down.{weight,bias}, then
// out_norm.{weight,bias}, then lm_head.weight unless tied_embeddings.
std::vector<TensorSpec> tensors(const ModelConfig& c) {
  const uint64_t d = c.d_model, d_ff = c.d_ff;
  const uint64_t q_dim = uint64_t{c.n_heads} * c.head_dim;  // [n_heads * head_dim] = d_model
  std::vector<TensorSpec> t;
  t.reserve(tensor_count(c));
  t.push_back({"tok_emb", {c.n_vocab, d}});
  t.push_back({"pos_emb", {c.max_seq, d}});
  for (uint32_t i = 0; i < c.n_layers; ++i) {
    const std::string b = "blk." + std::to_string(i) + ".";
    t.push_back({b + "attn_norm.weight", {d}});
    t.push_back({b + "attn_norm.bias", {d}});
    t.push_back({b + "attn_qkv.weight", {3 * d, d}});  // rows: q, then k, then v
    t.push_back({b + "attn_qkv.bias", {3 * d}});
    t.push_back({b + "attn_out.weight", {d, q_dim}});
    t.push_back({b + "attn_out.bias", {d}});
    t.push_back({b + "ffn_norm.weight", {d}});
    t.push_back({b + "ffn_norm.bias", {d}});
    t.push_back({b + "ffn_up.weight", {d_ff, d}});
    t.push_back({b + "ffn_up.bias", {d_ff}});
    t.push_back({b + "ffn_down.weight", {d, d_ff}});
    t.push_back({b + "ffn_down.bias", {d}});
  }
  t.push_back({"out_norm.weight", {d}});
  t.push_back({"out_norm.bias", {d}});
  if (!c.tied_embeddings) t.push_back({"lm_head.weight", {c.n_vocab, d}});
  return t;
}

uint64_t n_params(const ModelConfig& c) {
  const uint64_t d = c.d_model, ff = c.d_ff, v = c.n_vocab, q = uint64_t{c.n_heads} * c.head_dim;
  const uint64_t head = c.tied_embeddings ? 0 : v * d;
  return v * d + uint64_t{c.max_seq} * d +
         c.n_layers * (4 * d + 3 * d * d + 3 * d + d * q + d + ff * d + ff + d * ff + d) + 2 * d + head;
}

double block_linear_macs(const ModelConfig& c) {
  const double d = c.d_model, q = double(c.n_heads) * c.head_dim, kv = double(c.n_kv_heads) * c.head_dim;
  return d * (q + 2 * kv) + q * d + 2.0 * d * c.d_ff;  // qkv, out, up + down
}

// One decode step reads every block weight and bias, the final norm, the lm head ([n_vocab, d_model] packed: a copy
// even when tied, so the token's row of tok_emb is a separate read), one tok_emb row and one pos_emb row.
DecodeBytes decode_weight_bytes(const ModelConfig& c) {
  const double d = c.d_model, v = c.n_vocab, q = double(c.n_heads) * c.head_dim, kv = double(c.n_kv_heads) * c.head_dim;
  const double norms = 4 * d;                          // attn_norm and ffn_norm, weight and bias
  const double biases = (q + 2 * kv) + d + c.d_ff + d;  // qkv, out, up, down
  DecodeBytes b;
  b.weights = (c.n_layers * (norms + block_linear_macs(c) + biases) + 2 * d + v * d) * sizeof(float);
  b.embedding = 2 * d * sizeof(float);
  return b;
}

uint32_t default_d_ff(uint32_t d_model) { return 4 * d_model; }

void load_weights(WeightLoader& load, ModelWeights& m) {
  const ModelConfig& c = m.config;
  const uint64_t d = c.d_model, q_rows = uint64_t{c.n_heads} * c.head_dim;
  m.tok_emb = load.embedding("tok_emb", c.n_vocab, d, m.tok_emb_f32);
  m.pos_emb = load.copy("pos_emb", {c.max_seq, d});
  m.layers.resize(c.n_layers);
  for (uint32_t i = 0; i < c.n_layers; ++i) {
    const std::string b = "blk." + std::to_string(i) + ".";
    LayerWeights& l = m.layers[i];
    l.attn_norm_weight = load.copy(b + "attn_norm.weight", {d});
    l.ffn_norm_weight = load.copy(b + "ffn_norm.weight", {d});
    l.attn_norm_bias = load.copy(b + "attn_norm.bias", {d});
    l.ffn_norm_bias = load.copy(b + "ffn_norm.bias", {d});
    l.attn_qkv = load.linear({{b + "attn_qkv.weight", 3 * d}}, d, {{b + "attn_qkv.bias", 3 * d}});
    l.attn_out = load.linear({{b + "attn_out.weight", d}}, q_rows, {{b + "attn_out.bias", d}});
    l.ffn_up = load.linear({{b + "ffn_up.weight", c.d_ff}}, d, {{b + "ffn_up.bias", c.d_ff}});
    l.ffn_down = load.linear({{b + "ffn_down.weight", d}}, c.d_ff, {{b + "ffn_down.bias", d}});
  }
  m.out_norm_weight = load.copy("out_norm.weight", {d});
  m.out_norm_bias = load.copy("out_norm.bias", {d});
  m.lm_head = load.linear({{c.tied_embeddings ? "tok_emb" : "lm_head.weight", c.n_vocab}}, d);
}

ScratchWidths scratch_widths(const ModelConfig& c) { return {c.d_ff, 0}; }

// --- Hugging Face GPT2LMHeadModel ---

ModelConfig hf_config(const HfConfigFields& f) {
  ModelConfig c;
  c.arch = Arch::gpt2;
  c.tokenizer = TokenizerKind::none;
  c.d_model = f.dim("n_embd");
  c.n_layers = f.dim("n_layer");
  c.n_heads = f.dim("n_head");
  c.n_kv_heads = c.n_heads;
  if (c.d_model % c.n_heads != 0)
    f.fail("n_embd " + std::to_string(c.d_model) + " is not a multiple of n_head " + std::to_string(c.n_heads));
  c.head_dim = c.d_model / c.n_heads;
  const uint64_t d_ff = f.has("n_inner") ? f.dim("n_inner") : uint64_t{4} * c.d_model;
  if (d_ff > UINT32_MAX) f.fail("4 x n_embd overflows (n_inner is null)");
  c.d_ff = static_cast<uint32_t>(d_ff);
  c.n_vocab = f.dim("vocab_size");
  c.max_seq = f.has("n_positions") ? f.dim("n_positions") : f.dim("n_ctx");
  c.norm_eps = f.real_or("layer_norm_epsilon", 1e-5f);
  c.rope_theta = 0.0f;
  c.tied_embeddings = f.flag_or("tie_word_embeddings", true);
  const std::string act = f.text_or("activation_function", "gelu_new");
  if (act != "gelu_new" && act != "gelu_pytorch_tanh" && act != "gelu_fast")
    f.unsupported("activation_function '" + f.quote(act) + "' (sqrtdk's GPT-2 uses the tanh GELU, gelu_new)");
  if (!f.flag_or("scale_attn_weights", true)) f.unsupported("scale_attn_weights false");
  if (f.flag_or("scale_attn_by_inverse_layer_idx", false)) f.unsupported("scale_attn_by_inverse_layer_idx");
  if (f.flag_or("add_cross_attention", false)) f.unsupported("add_cross_attention");
  c.bos_id = f.token_or_none("bos_token_id", c.n_vocab);
  c.eos_id = f.token_or_none("eos_token_id", c.n_vocab);
  return c;
}

// HF name of a .sqdk tensor ("blk.3.ffn_up.weight" -> "transformer.h.3.mlp.c_fc.weight"); transposed for Conv1D.
// Checkpoints saved from GPT2Model have no "transformer." prefix.
std::string hf_tensor_name(const std::string& name, const std::function<bool(const std::string&)>& has,
                           bool& transpose) {
  transpose = false;
  const std::string prefix = !has("transformer.wte.weight") && has("wte.weight") ? "" : "transformer.";
  if (name == "tok_emb") return prefix + "wte.weight";
  if (name == "pos_emb") return prefix + "wpe.weight";
  if (name == "lm_head.weight") return "lm_head.weight";
  if (name.rfind("out_norm.", 0) == 0) return prefix + "ln_f." + name.substr(9);
  // blk.{i}.<part>.<weight|bias>
  const size_t a = name.find('.', 4), b = name.rfind('.');
  const std::string block = name.substr(4, a - 4), part = name.substr(a + 1, b - a - 1), leaf = name.substr(b + 1);
  static const std::pair<const char*, const char*> parts[] = {
      {"attn_norm", "ln_1"},         {"attn_qkv", "attn.c_attn"}, {"attn_out", "attn.c_proj"},
      {"ffn_norm", "ln_2"},          {"ffn_up", "mlp.c_fc"},      {"ffn_down", "mlp.c_proj"}};
  for (const auto& [ours, theirs] : parts)
    if (part == ours) {
      transpose = leaf == "weight" && std::strchr(theirs, '.') != nullptr;  // the Conv1D layers
      return prefix + "h." + block + "." + theirs + "." + leaf;
    }
  throw Error("internal: no GPT-2 name for " + name);
}

constexpr const char* kHfArchitectures[] = {"GPT2LMHeadModel", "GPT2Model", nullptr};

}  // namespace

extern const ModelFamily kGpt2Family{
    .arch = Arch::gpt2,
    .name = "gpt2",
    .validate = validate,
    .tensors = tensors,
    .tensor_count = tensor_count,
    .n_params = n_params,
    .block_linear_macs = block_linear_macs,
    .decode_weight_bytes = decode_weight_bytes,
    .uses_rope = false,
    .default_d_ff = default_d_ff,
    .default_rope_theta = 0.0f,
    .load_weights = load_weights,
    .scratch_widths = scratch_widths,
    .forward = gpt2_forward,
    .reference_forward = gpt2_reference_forward,
    .hf = {.architectures = kHfArchitectures,
           .model_type = "gpt2",
           .config = hf_config,
           .tensor_name = hf_tensor_name,
           .ignored_tensors = R"((transformer\.)?h\.[0-9]+\.attn\.(bias|masked_bias))"},
};

}  // namespace sqrtdk
