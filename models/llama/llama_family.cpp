// The llama family's registry entry (models/family.h): its tensors (engine/FORMAT.md), config rules, weight plan,
// scratch, and how Hugging Face's LlamaForCausalLM checkpoints map onto it. The forward pass is llama.cpp.
#include "models/llama/llama.h"

#include <sqrtdk/error.h>

#include <cmath>

namespace sqrtdk {

namespace {

// RoPE rotates (x[2i], x[2i+1]) or (x[i], x[i + hd/2]) by pos·θ^(-2i/hd): head_dim must be even, and the base
// θ > 1 so that the frequencies fall with i (θ <= 1 gives no rotation or growing ones: the RoPE table refuses it).
void validate(const ModelConfig& c, const std::function<void(const std::string&)>& fail) {
  if (c.head_dim % 2 != 0)
    fail("head_dim " + std::to_string(c.head_dim) + " is odd (expected even for llama: RoPE rotates pairs)");
  if (!(std::isfinite(c.rope_theta) && c.rope_theta > 1))
    fail("rope_theta " + std::to_string(c.rope_theta) + " (expected finite and > 1 for llama)");
}

uint64_t tensor_count(const ModelConfig& c) { return 1 + 9 * uint64_t{c.n_layers} + 1 + (c.tied_embeddings ? 0 : 1); }

// Canonical order: tok_emb, then per block attn_norm.weight, attn_q/k/v.weight, attn_out.weight, ffn_norm.weight,
// ffn_gate/up/down.weight, then out_norm.weight, then lm_head.weight unless tied_embeddings.
std::vector<TensorSpec> tensors(const ModelConfig& c) {
  const uint64_t d = c.d_model, d_ff = c.d_ff;
  const uint64_t q_dim = uint64_t{c.n_heads} * c.head_dim;      // [n_heads * head_dim]
  const uint64_t kv_dim = uint64_t{c.n_kv_heads} * c.head_dim;  // [n_kv_heads * head_dim]
  std::vector<TensorSpec> t;
  t.reserve(tensor_count(c));
  t.push_back({"tok_emb", {c.n_vocab, d}});
  for (uint32_t i = 0; i < c.n_layers; ++i) {
    const std::string b = "blk." + std::to_string(i) + ".";
    t.push_back({b + "attn_norm.weight", {d}});
    t.push_back({b + "attn_q.weight", {q_dim, d}});
    t.push_back({b + "attn_k.weight", {kv_dim, d}});
    t.push_back({b + "attn_v.weight", {kv_dim, d}});
    t.push_back({b + "attn_out.weight", {d, q_dim}});
    t.push_back({b + "ffn_norm.weight", {d}});
    t.push_back({b + "ffn_gate.weight", {d_ff, d}});
    t.push_back({b + "ffn_up.weight", {d_ff, d}});
    t.push_back({b + "ffn_down.weight", {d, d_ff}});
  }
  t.push_back({"out_norm.weight", {d}});
  if (!c.tied_embeddings) t.push_back({"lm_head.weight", {c.n_vocab, d}});
  return t;
}

uint64_t n_params(const ModelConfig& c) {
  const uint64_t d = c.d_model, ff = c.d_ff, v = c.n_vocab, q = uint64_t{c.n_heads} * c.head_dim;
  const uint64_t kv = uint64_t{c.n_kv_heads} * c.head_dim, head = c.tied_embeddings ? 0 : v * d;
  return v * d + c.n_layers * (2 * d + q * d + 2 * kv * d + d * q + 3 * ff * d) + d + head;
}

double block_linear_macs(const ModelConfig& c) {
  const double d = c.d_model, q = double(c.n_heads) * c.head_dim, kv = double(c.n_kv_heads) * c.head_dim;
  return d * (q + 2 * kv) + q * d + 3.0 * d * c.d_ff;  // q|k|v, out, gate + up + down
}

// One decode step reads every block weight, the final norm, the lm head ([n_vocab, d_model] packed: a copy even when
// tied, so the token's row of tok_emb is a separate read) and one tok_emb row.
DecodeBytes decode_weight_bytes(const ModelConfig& c) {
  const double d = c.d_model, v = c.n_vocab;
  const double norms = 2 * d;  // attn_norm, ffn_norm
  DecodeBytes b;
  b.weights = (c.n_layers * (norms + block_linear_macs(c)) + d + v * d) * sizeof(float);
  b.embedding = d * sizeof(float);
  return b;
}

// 8/3 d_model rounded up to a multiple of 16: llama's SwiGLU sizing.
uint32_t default_d_ff(uint32_t d_model) { return (8 * d_model / 3 + 15) / 16 * 16; }

void load_weights(WeightLoader& load, ModelWeights& m) {
  const ModelConfig& c = m.config;
  const uint64_t d = c.d_model, q_rows = uint64_t{c.n_heads} * c.head_dim;
  const uint64_t kv_rows = uint64_t{c.n_kv_heads} * c.head_dim;
  m.tok_emb = load.embedding("tok_emb", c.n_vocab, d, m.tok_emb_f32);
  m.layers.resize(c.n_layers);
  for (uint32_t i = 0; i < c.n_layers; ++i) {
    const std::string b = "blk." + std::to_string(i) + ".";
    LayerWeights& l = m.layers[i];
    l.attn_norm_weight = load.copy(b + "attn_norm.weight", {d});
    l.ffn_norm_weight = load.copy(b + "ffn_norm.weight", {d});
    // q, k and v as one GEMM: one pass over the normed input.
    l.attn_qkv = load.linear({{b + "attn_q.weight", q_rows}, {b + "attn_k.weight", kv_rows},
                              {b + "attn_v.weight", kv_rows}}, d);
    l.attn_out = load.linear({{b + "attn_out.weight", d}}, q_rows);
    l.ffn_gate = load.linear({{b + "ffn_gate.weight", c.d_ff}}, d);
    l.ffn_up = load.linear({{b + "ffn_up.weight", c.d_ff}}, d);
    l.ffn_down = load.linear({{b + "ffn_down.weight", d}}, c.d_ff);
  }
  m.out_norm_weight = load.copy("out_norm.weight", {d});
  m.lm_head = load.linear({{c.tied_embeddings ? "tok_emb" : "lm_head.weight", c.n_vocab}}, d);
}

ScratchWidths scratch_widths(const ModelConfig& c) { return {c.d_ff, c.d_ff}; }  // up and gate of SwiGLU

// --- Hugging Face LlamaForCausalLM ---

ModelConfig hf_config(const HfConfigFields& f) {
  ModelConfig c;
  c.arch = Arch::llama;
  c.tokenizer = TokenizerKind::none;
  c.d_model = f.dim("hidden_size");
  c.n_layers = f.dim("num_hidden_layers");
  c.n_heads = f.dim("num_attention_heads");
  c.n_kv_heads = f.dim_or("num_key_value_heads", c.n_heads);
  if (!f.has("head_dim") && c.d_model % c.n_heads != 0)
    f.fail("hidden_size " + std::to_string(c.d_model) + " is not a multiple of num_attention_heads " +
           std::to_string(c.n_heads) + " and no head_dim is given");
  c.head_dim = f.dim_or("head_dim", c.d_model / c.n_heads);
  c.d_ff = f.dim("intermediate_size");
  c.n_vocab = f.dim("vocab_size");
  c.max_seq = f.dim("max_position_embeddings");
  c.norm_eps = f.real_or("rms_norm_eps", 1e-6f);
  c.rope_theta = f.real_or("rope_theta", 10000.0f);
  c.tied_embeddings = f.flag_or("tie_word_embeddings", false);
  c.rope_interleaved = f.flag_or("rope_interleaved", false);
  if (f.has("rope_scaling")) f.unsupported("rope_scaling " + f.brief("rope_scaling"));
  if (f.flag_or("attention_bias", false)) f.unsupported("attention_bias true");
  if (f.flag_or("mlp_bias", false)) f.unsupported("mlp_bias true");
  const std::string act = f.text_or("hidden_act", "silu");
  if (act != "silu") f.unsupported("hidden_act '" + f.quote(act) + "' (sqrtdk's llama uses SwiGLU with silu)");
  c.bos_id = f.token_or_none("bos_token_id", c.n_vocab);
  c.eos_id = f.token_or_none("eos_token_id", c.n_vocab);
  return c;
}

std::string hf_tensor_name(const std::string& name, const std::function<bool(const std::string&)>&, bool& transpose) {
  transpose = false;
  if (name == "tok_emb") return "model.embed_tokens.weight";
  if (name == "lm_head.weight") return "lm_head.weight";
  if (name == "out_norm.weight") return "model.norm.weight";
  const size_t a = name.find('.', 4), b = name.rfind('.');
  const std::string block = name.substr(4, a - 4), part = name.substr(a + 1, b - a - 1);
  static const std::pair<const char*, const char*> parts[] = {
      {"attn_norm", "input_layernorm"},         {"attn_q", "self_attn.q_proj"}, {"attn_k", "self_attn.k_proj"},
      {"attn_v", "self_attn.v_proj"},           {"attn_out", "self_attn.o_proj"},
      {"ffn_norm", "post_attention_layernorm"}, {"ffn_gate", "mlp.gate_proj"},  {"ffn_up", "mlp.up_proj"},
      {"ffn_down", "mlp.down_proj"}};
  for (const auto& [ours, theirs] : parts)
    if (part == ours) return "model.layers." + block + "." + theirs + ".weight";
  throw Error("internal: no llama name for " + name);
}

constexpr const char* kHfArchitectures[] = {"LlamaForCausalLM", nullptr};

}  // namespace

extern const ModelFamily kLlamaFamily{
    .arch = Arch::llama,
    .name = "llama",
    .validate = validate,
    .tensors = tensors,
    .tensor_count = tensor_count,
    .n_params = n_params,
    .block_linear_macs = block_linear_macs,
    .decode_weight_bytes = decode_weight_bytes,
    .uses_rope = true,
    .default_d_ff = default_d_ff,
    .default_rope_theta = 10000.0f,
    .load_weights = load_weights,
    .scratch_widths = scratch_widths,
    .forward = llama_forward,
    .reference_forward = llama_reference_forward,
    .hf = {.architectures = kHfArchitectures,
           .model_type = "llama",
           .config = hf_config,
           .tensor_name = hf_tensor_name,
           .ignored_tensors = R"(model\.layers\.[0-9]+\.self_attn\.rotary_emb\.inv_freq)"},
};

}  // namespace sqrtdk
