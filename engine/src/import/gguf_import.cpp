// GGUF -> .sqdk (`sqrtdk convert model.gguf`): metadata -> ModelConfig, llama.cpp tensor names -> ours, F32 / F16 /
// BF16 / Q8_0 data -> the output dtype, llama q/k rows back to the Hugging Face layout, tokenizer.ggml.* -> a
// TokenizerSpec.
//
// Order of work, as the Hugging Face importer: parse and check the whole file, map the config, plan every tensor
// (presence, type, shape, nothing left unused), and only then open the streaming writer and convert row by row.
// Memory stays at a few chunk buffers (about 4 MiB of f32 each) whatever the model size.
#include "engine/src/import/gguf.h"

#include <sqrtdk/chat.h>
#include <sqrtdk/error.h>

#include "engine/src/format/format_internal.h"
#include "engine/src/import/dtype_convert.h"
#include "models/family.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <unordered_map>

namespace sqrtdk {

using format_detail::quote_name;

namespace {

constexpr uint64_t kChunkElements = uint64_t{1} << 20;  // 4 MiB of f32 per conversion step
// Q8_0: f16 scale d, then 32 int8 q; value = d * q. The same block as .sqdk's q8 (<sqrtdk/format.h>).
constexpr uint64_t kQ8Block = sqrtdk::kQ8BlockElements;

Error unsupported(const std::string& message) { return Error(ErrorKind::unsupported, message); }
Error bad_gguf_file(const std::string& message) { return Error(ErrorKind::bad_file, message); }

// A metadata dimension: an integer in 1..2^32-1 (ModelConfig::validate then applies the real caps).
uint32_t dim(const GgufFile& f, const std::string& key, const std::string& why) {
  const uint64_t v = f.require_uint(key, why);
  if (v == 0 || v > UINT32_MAX)
    throw bad_gguf_file(f.where_key(key) + std::to_string(v) + " (expected a positive integer below 2^32)");
  return static_cast<uint32_t>(v);
}

float finite_real(const GgufFile& f, const std::string& key, double v) {
  if (!std::isfinite(v) || !std::isfinite(static_cast<float>(v)))
    throw bad_gguf_file(f.where_key(key) + std::to_string(v) + " (expected a finite number)");
  return static_cast<float>(v);
}

// Our tensor name -> llama.cpp's (llama.cpp's gguf-py tensor_mapping: token_embd, position_embd, blk.N.attn_output,
// output_norm, output; the other block names are the same as ours).
std::string gguf_tensor_name(const std::string& name) {
  if (name == "tok_emb") return "token_embd.weight";
  if (name == "pos_emb") return "position_embd.weight";
  if (name == "lm_head.weight") return "output.weight";
  if (name.rfind("out_norm.", 0) == 0) return "output_norm." + name.substr(9);
  const size_t at = name.find(".attn_out.");
  if (at != std::string::npos) return name.substr(0, at) + ".attn_output." + name.substr(at + 10);
  return name;
}

}  // namespace

const char* gguf_supported_architectures() { return "llama, gpt2"; }

ModelConfig gguf_model_config(const GgufFile& f) {
  const std::string arch = f.require_string("general.architecture", "it says which model this is");
  ModelConfig c;
  if (arch == "llama") {
    c.arch = Arch::llama;
  } else if (arch == "gpt2") {
    c.arch = Arch::gpt2;
  } else {
    std::string why;
    if (arch == "qwen2" || arch == "qwen2moe")
      why = "; its attention has q/k/v biases, which sqrtdk's llama does not compute";
    throw unsupported(f.where_key("general.architecture") + "architecture '" + quote_name(arch) +
                      "' is not supported (sqrtdk converts GGUF architectures " + gguf_supported_architectures() +
                      why + ")");
  }
  const std::string p = arch + ".";
  const std::string needed = "the " + arch + " model needs it";
  c.d_model = dim(f, p + "embedding_length", needed);
  c.n_layers = dim(f, p + "block_count", needed);
  c.n_heads = dim(f, p + "attention.head_count", needed);
  c.n_kv_heads = f.find_kv(p + "attention.head_count_kv") ? dim(f, p + "attention.head_count_kv", needed) : c.n_heads;
  c.d_ff = dim(f, p + "feed_forward_length", needed);
  c.max_seq = dim(f, p + "context_length", needed);
  c.tokenizer = gguf_has_tokenizer(f) ? TokenizerKind::bpe : TokenizerKind::none;  // the spec: tokenizer_spec_from_gguf
  c.tied_embeddings = f.find_tensor("output.weight") == nullptr;

  if (c.arch == Arch::llama) {
    if (f.find_kv(p + "attention.key_length")) {
      c.head_dim = dim(f, p + "attention.key_length", needed);
      if (f.find_kv(p + "attention.value_length") && dim(f, p + "attention.value_length", needed) != c.head_dim)
        throw unsupported(f.where_key(p + "attention.value_length") + std::to_string(*f.get_uint(p + "attention.value_length")) +
                          " differs from attention.key_length " + std::to_string(c.head_dim) +
                          " (sqrtdk's llama has one head_dim)");
    } else {
      if (c.d_model % c.n_heads != 0)
        throw bad_gguf_file(f.where_key(p + "embedding_length") + std::to_string(c.d_model) +
                       " is not a multiple of attention.head_count " + std::to_string(c.n_heads) +
                       " and attention.key_length is absent");
      c.head_dim = c.d_model / c.n_heads;
    }
    if (f.find_kv(p + "rope.dimension_count")) {
      const uint32_t rope_dims = dim(f, p + "rope.dimension_count", needed);
      if (rope_dims != c.head_dim)
        throw unsupported(f.where_key(p + "rope.dimension_count") + std::to_string(rope_dims) +
                          " differs from head_dim " + std::to_string(c.head_dim) +
                          " (partial RoPE is not supported)");
    }
    c.norm_eps = finite_real(f, p + "attention.layer_norm_rms_epsilon",
                             f.require_real(p + "attention.layer_norm_rms_epsilon", needed));
    c.rope_theta = 10000.0f;
    if (auto base = f.get_real(p + "rope.freq_base")) c.rope_theta = finite_real(f, p + "rope.freq_base", *base);
    if (auto type = f.get_string(p + "rope.scaling.type"); type && *type != "none")
      throw unsupported(f.where_key(p + "rope.scaling.type") + "'" + quote_name(*type) +
                        "' RoPE scaling is not supported");
    if (auto factor = f.get_real(p + "rope.scaling.factor"); factor && *factor != 0 && *factor != 1)
      throw unsupported(f.where_key(p + "rope.scaling.factor") + std::to_string(*factor) +
                        ": RoPE scaling is not supported");
    if (auto experts = f.get_uint(p + "expert_count"); experts && *experts > 0)
      throw unsupported(f.where_key(p + "expert_count") + std::to_string(*experts) +
                        " experts: mixture-of-experts models are not supported");
  } else {
    if (c.d_model % c.n_heads != 0)
      throw bad_gguf_file(f.where_key(p + "embedding_length") + std::to_string(c.d_model) +
                     " is not a multiple of attention.head_count " + std::to_string(c.n_heads));
    c.head_dim = c.d_model / c.n_heads;
    c.norm_eps = finite_real(f, p + "attention.layer_norm_epsilon",
                             f.require_real(p + "attention.layer_norm_epsilon", needed));
    c.rope_theta = 0.0f;
  }

  // The vocabulary: <arch>.vocab_size, else the token list, else token_embd's rows.
  const std::optional<uint64_t> n_tokens = f.array_size("tokenizer.ggml.tokens");
  if (f.find_kv(p + "vocab_size")) {
    c.n_vocab = dim(f, p + "vocab_size", needed);
    if (n_tokens && *n_tokens > c.n_vocab)
      throw bad_gguf_file(f.where_key(p + "vocab_size") + std::to_string(c.n_vocab) + " is less than the " +
                     std::to_string(*n_tokens) + " tokens of tokenizer.ggml.tokens");
  } else if (n_tokens) {
    if (*n_tokens == 0 || *n_tokens > UINT32_MAX)
      throw bad_gguf_file(f.where_key("tokenizer.ggml.tokens") + std::to_string(*n_tokens) + " tokens (expected 1..2^32-1)");
    c.n_vocab = static_cast<uint32_t>(*n_tokens);
  } else if (const GgufTensor* emb = f.find_tensor("token_embd.weight"); emb && emb->ne.size() == 2 &&
                                                                          emb->ne[1] <= UINT32_MAX) {
    c.n_vocab = static_cast<uint32_t>(emb->ne[1]);
  } else {
    throw bad_gguf_file(f.path() + ": the vocabulary size is unknown (no " + p + "vocab_size, tokenizer.ggml.tokens or token_embd.weight)");
  }
  for (const char* key : {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id"}) {
    const std::optional<uint64_t> id = f.get_uint(key);
    uint32_t& slot = std::strstr(key, "bos") ? c.bos_id : c.eos_id;
    slot = id && *id < c.n_vocab ? static_cast<uint32_t>(*id) : kNoToken;
  }
  c.validate(f.path() + ": config from metadata");
  return c;
}

std::vector<GgufPlannedTensor> plan_gguf_tensors(const GgufFile& f, const ModelConfig& config) {
  std::vector<GgufPlannedTensor> plan;
  std::unordered_map<std::string, bool> used;
  for (const TensorSpec& spec : family_tensors(config)) {
    GgufPlannedTensor p;
    p.name = spec.name;
    p.shape = spec.shape;
    const std::string source = gguf_tensor_name(spec.name);
    p.source = f.find_tensor(source);
    if (!p.source)
      throw bad_gguf_file(f.path() + ": tensor '" + source + "' is missing (needed for " + spec.name + ")");
    const GgufTensor& t = *p.source;
    const uint32_t type = t.type;
    if (type != uint32_t(GgmlType::f32) && type != uint32_t(GgmlType::f16) && type != uint32_t(GgmlType::bf16) &&
        type != uint32_t(GgmlType::q8_0))
      throw unsupported(f.where_tensor(t.name) + "type " + ggml_type_name(type) + " (" + std::to_string(type) +
                        ") is not supported (sqrtdk converts F32, F16, BF16 and Q8_0 tensors)");
    if (t.shape != spec.shape) {
      std::string expected_ne;
      for (auto it = spec.shape.rbegin(); it != spec.shape.rend(); ++it)
        expected_ne += (expected_ne.empty() ? "" : ", ") + std::to_string(*it);
      std::string ne;
      for (uint64_t d : t.ne) ne += (ne.empty() ? "" : ", ") + std::to_string(d);
      throw bad_gguf_file(f.where_tensor(t.name) + "ne [" + ne + "], expected [" + expected_ne +
                     "] (innermost first) from the metadata");
    }
    if (config.arch == Arch::llama) {
      const bool is_q = spec.name.ends_with(".attn_q.weight"), is_k = spec.name.ends_with(".attn_k.weight");
      if (is_q || is_k) p.unpermute_heads = is_q ? config.n_heads : config.n_kv_heads;
    }
    used[t.name] = true;
    plan.push_back(std::move(p));
  }
  for (const GgufTensor& t : f.tensors()) {
    if (used.count(t.name)) continue;
    if (t.name == "rope_freqs.weight")
      throw unsupported(f.where_tensor(t.name) + "per-frequency RoPE factors (Llama 3.1 rope scaling) are not supported");
    throw bad_gguf_file(f.where_tensor(t.name) + "is not used by " + arch_name(config.arch) +
                   " (a model variant sqrtdk does not support?)");
  }
  return plan;
}

void gguf_decode_f32(uint32_t type, const unsigned char* src, uint64_t n, float* dst) {
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::f32:
      std::memcpy(dst, src, n * 4);
      return;
    case GgmlType::f16:
      for (uint64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        dst[i] = f16_to_f32(h);
      }
      return;
    case GgmlType::bf16:
      for (uint64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        dst[i] = bf16_to_f32(h);
      }
      return;
    case GgmlType::q8_0:
      for (uint64_t b = 0; b < n / kQ8Block; ++b) {
        const unsigned char* block = src + b * sqrtdk::kQ8BlockBytes;
        uint16_t h;
        std::memcpy(&h, block, 2);
        const float d = f16_to_f32(h);  // as llama.cpp's dequantize_row_q8_0: f32(d) * q, one rounding
        for (uint64_t j = 0; j < kQ8Block; ++j) dst[b * kQ8Block + j] = d * static_cast<float>(static_cast<int8_t>(block[2 + j]));
      }
      return;
  }
  throw Error(ErrorKind::internal, "gguf_decode_f32: type " + std::to_string(type));
}


// ---- tokenizer.ggml.* -> TokenizerSpec ----

namespace {

// The pre-tokenizer regexes of tokenizer.ggml.pre, as the models' tokenizer.json files write them.
constexpr const char* kGpt2Regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr const char* kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// llama.cpp's token types (llama_token_type).
enum : int64_t { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };

}  // namespace

bool gguf_has_tokenizer(const GgufFile& f) {
  const std::optional<std::string> model = f.get_string("tokenizer.ggml.model");
  return model && *model != "none";
}

TokenizerSpec tokenizer_spec_from_gguf(const GgufFile& f, const std::string& where) {
  const std::string model = f.require_string("tokenizer.ggml.model", "it says which tokenizer the file has");
  const std::string needed = "the '" + quote_name(model) + "' tokenizer needs it";
  TokenizerSpec spec;
  if (model == "gpt2") {
    spec.style = TokenizerStyle::byte_level_bpe;
  } else if (model == "llama") {
    spec.style = TokenizerStyle::sentencepiece_bpe;
  } else {
    throw unsupported(f.where_key("tokenizer.ggml.model") + "'" + quote_name(model) +
                      "' is not supported (sqrtdk reads the 'gpt2' byte-level BPE and 'llama' SentencePiece tokenizers)");
  }
  auto require = [&](const char* key) {
    if (!f.find_kv(key)) throw bad_gguf_file(f.path() + ": key '" + key + "' is missing (" + needed + ")");
  };
  require("tokenizer.ggml.tokens");
  std::vector<std::string> tokens = *f.get_string_array("tokenizer.ggml.tokens");
  const uint64_t n = tokens.size();
  if (n == 0) throw bad_gguf_file(f.where_key("tokenizer.ggml.tokens") + "no tokens");
  std::vector<int64_t> types(n, kNormal);
  if (auto t = f.get_int_array("tokenizer.ggml.token_type")) {
    if (t->size() != n)
      throw bad_gguf_file(f.where_key("tokenizer.ggml.token_type") + std::to_string(t->size()) + " types for " +
                     std::to_string(n) + " tokens");
    types = std::move(*t);
    for (uint64_t i = 0; i < n; ++i)
      if (types[i] < kNormal || types[i] > kByte)
        throw bad_gguf_file(f.where_key("tokenizer.ggml.token_type") + "token " + std::to_string(i) + " has type " +
                       std::to_string(types[i]) + " (expected 1..6)");
  }

  if (spec.style == TokenizerStyle::byte_level_bpe) {
    const std::string pre = f.get_string("tokenizer.ggml.pre").value_or("default");
    if (pre == "default" || pre == "gpt-2") {
      spec.split_regex = kGpt2Regex;
    } else if (pre == "llama-bpe" || pre == "llama3") {
      spec.split_regex = kLlama3Regex;
      spec.ignore_merges = true;
    } else if (pre == "qwen2") {
      spec.split_regex = kQwen2Regex;
      spec.nfc = true;
    } else {
      throw unsupported(f.where_key("tokenizer.ggml.pre") + "pre-tokenizer '" + quote_name(pre) +
                        "' is not supported (sqrtdk knows default, gpt-2, llama-bpe, llama3 and qwen2)");
    }
    // Control and user-defined tokens are added tokens: matched in the raw text, not pieces of the byte alphabet.
    spec.vocab.resize(n);
    std::unordered_map<std::string, uint32_t> id_of;
    id_of.reserve(n);
    for (uint64_t i = 0; i < n; ++i) {
      if (types[i] == kControl || types[i] == kUserDefined) {
        spec.added.push_back({.id = static_cast<uint32_t>(i), .content = tokens[i], .special = types[i] == kControl});
      } else {
        spec.vocab[i] = tokens[i];
        id_of.emplace(tokens[i], static_cast<uint32_t>(i));
      }
    }
    const std::vector<std::string> merges =
        f.find_kv("tokenizer.ggml.merges") ? *f.get_string_array("tokenizer.ggml.merges") : std::vector<std::string>{};
    spec.merges.reserve(merges.size());
    for (size_t i = 0; i < merges.size(); ++i) {
      const std::string& m = merges[i];
      const size_t space = m.find(' ');
      const auto left = space == std::string::npos ? id_of.end() : id_of.find(m.substr(0, space));
      const auto right = space == std::string::npos ? id_of.end() : id_of.find(m.substr(space + 1));
      if (left == id_of.end() || right == id_of.end())
        throw bad_gguf_file(f.where_key("tokenizer.ggml.merges") + "merge #" + std::to_string(i) + " '" + quote_name(m) +
                       "' is not two tokens of the vocabulary separated by a space");
      spec.merges.emplace_back(left->second, right->second);
    }
  } else {
    require("tokenizer.ggml.scores");
    const std::vector<float> scores = *f.get_real_array("tokenizer.ggml.scores");
    if (scores.size() != n)
      throw bad_gguf_file(f.where_key("tokenizer.ggml.scores") + std::to_string(scores.size()) + " scores for " +
                     std::to_string(n) + " tokens");
    spec.vocab = tokens;
    spec.merges = sentencepiece_merges(spec.vocab, scores);
    spec.add_prefix_space = f.get_bool("tokenizer.ggml.add_space_prefix").value_or(true);
    for (uint64_t i = 0; i < n; ++i) {
      if (types[i] == kByte) spec.byte_fallback = true;
      if (types[i] == kUnknown && spec.unk_id == kNoToken) spec.unk_id = static_cast<uint32_t>(i);
      // As Hugging Face's tokenizer.json for these models: <unk>, <s>, </s> and user-defined pieces are added
      // tokens that keep their piece in the vocabulary.
      if (types[i] == kUnknown || types[i] == kControl || types[i] == kUserDefined)
        spec.added.push_back(
            {.id = static_cast<uint32_t>(i), .content = tokens[i], .special = types[i] != kUserDefined});
    }
  }

  auto token_id = [&](const char* key) -> uint32_t {
    const std::optional<uint64_t> id = f.get_uint(key);
    if (!id) return kNoToken;
    if (*id >= n)
      throw bad_gguf_file(f.where_key(key) + std::to_string(*id) + " is not a token id (the vocabulary has " +
                     std::to_string(n) + " tokens)");
    return static_cast<uint32_t>(*id);
  };
  spec.bos_id = token_id("tokenizer.ggml.bos_token_id");
  spec.eos_id = token_id("tokenizer.ggml.eos_token_id");
  spec.pad_id = token_id("tokenizer.ggml.padding_token_id");
  if (const uint32_t unk = token_id("tokenizer.ggml.unknown_token_id"); unk != kNoToken) spec.unk_id = unk;
  for (const char* key : {"tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"}) {
    const uint32_t id = token_id(key);
    if (id != kNoToken && id != spec.eos_id &&
        std::find(spec.end_of_turn_ids.begin(), spec.end_of_turn_ids.end(), id) == spec.end_of_turn_ids.end())
      spec.end_of_turn_ids.push_back(id);
  }
  // llama.cpp's defaults: SentencePiece models start with BOS, byte-level BPE models do not unless they say so.
  spec.add_bos = f.get_bool("tokenizer.ggml.add_bos_token").value_or(spec.style == TokenizerStyle::sentencepiece_bpe);
  spec.add_eos = f.get_bool("tokenizer.ggml.add_eos_token").value_or(false);
  // The Jinja template, recognised as one of the families rendered natively (none for anything else); its turn-end
  // marker also stops generation.
  if (const std::optional<std::string> jinja = f.get_string("tokenizer.chat_template")) {
    spec.chat_template = detect_chat_template(*jinja);
    const char* marker = spec.chat_template == ChatTemplateKind::chatml   ? "<|im_end|>"
                         : spec.chat_template == ChatTemplateKind::llama3 ? "<|eot_id|>"
                                                                          : nullptr;
    for (const AddedToken& a : spec.added)
      if (marker && a.content == marker && a.id != spec.eos_id &&
          std::find(spec.end_of_turn_ids.begin(), spec.end_of_turn_ids.end(), a.id) == spec.end_of_turn_ids.end())
        spec.end_of_turn_ids.push_back(a.id);
  }
  spec.validate(where, ErrorKind::bad_file);
  return spec;
}

namespace {

// The output dtype a GGUF tensor type stores as without loss (Q8_0: none).
std::optional<DType> lossless_dtype(uint32_t type) {
  if (type == uint32_t(GgmlType::f32)) return DType::f32;
  if (type == uint32_t(GgmlType::f16)) return DType::f16;
  if (type == uint32_t(GgmlType::bf16)) return DType::bf16;
  return std::nullopt;
}

}  // namespace

ConvertResult convert_gguf_with(const std::string& gguf_path, const std::string& out_path,
                                const ConvertOptions& options, const GgufConvertTestKnobs& knobs) {
  const std::unique_ptr<GgufFile> file = GgufFile::open(gguf_path);
  const GgufFile& f = *file;
  ConvertResult result;
  ModelConfig config = gguf_model_config(f);
  if (!options.with_tokenizer) config.tokenizer = TokenizerKind::none;
  if (config.arch == Arch::llama && !knobs.unpermute_qk) config.rope_interleaved = knobs.interleaved_rope;
  result.config = config;
  const std::vector<GgufPlannedTensor> plan = plan_gguf_tensors(f, config);
  // The tokenizer is read (and refused if it cannot be represented) before anything is written.
  std::optional<TokenizerSpec> tokenizer;
  if (options.with_tokenizer && gguf_has_tokenizer(f)) {
    tokenizer = tokenizer_spec_from_gguf(f, f.path());
    result.tokenizer = tokenizer->summary();
  }

  // Output dtype: asked for; else q8 when every linear weight is Q8_0 (copied as it is), with the embeddings and lm
  // head q8 if they are Q8_0 too, else f32; else the tensors' own when they share a lossless one; else f32.
  const auto is_q8 = [](const GgufPlannedTensor& p) { return p.source->type == uint32_t(GgmlType::q8_0); };
  const auto is_linear = [](const GgufPlannedTensor& p) {
    return p.shape.size() == 2 && !import_detail::is_head_tensor(p.name);
  };
  DType out_dtype = DType::f32;
  std::optional<DType> default_head;
  if (options.dtype) {
    out_dtype = *options.dtype;
  } else if (std::all_of(plan.begin(), plan.end(), [&](const GgufPlannedTensor& p) { return !is_linear(p) || is_q8(p); })) {
    out_dtype = DType::q8;
    default_head = std::all_of(plan.begin(), plan.end(), [&](const GgufPlannedTensor& p) {
      return !import_detail::is_head_tensor(p.name) || is_q8(p);
    }) ? DType::q8 : DType::f32;
  } else if (const uint32_t first = plan.front().source->type;
             lossless_dtype(first) && std::all_of(plan.begin(), plan.end(), [&](const GgufPlannedTensor& p) {
               return p.source->type == first;
             })) {
    out_dtype = *lossless_dtype(first);
  }
  const DType head_dtype = options.head_dtype.value_or(default_head.value_or(out_dtype));
  result.dtype = out_dtype;
  result.head_dtype = head_dtype;

  std::vector<TensorToDeclare> declared;
  uint64_t total_bytes = 0;
  for (const auto& p : plan) {
    const DType out = import_detail::output_dtype_for(p.name, p.shape, out_dtype, head_dtype);
    import_detail::check_output_dtype(f.path(), p.name, p.shape, out);
    declared.push_back({p.name, out, p.shape});
    total_bytes += tensor_bytes(out, p.shape);
  }
  std::error_code ec;
  if (std::filesystem::equivalent(out_path, gguf_path, ec))
    throw Error(out_path + ": is the GGUF file being converted (write the .sqdk somewhere else)");
  WeightFileWriter writer(out_path, config, declared);
  if (tokenizer) writer.set_tokenizer(*tokenizer);

  std::vector<unsigned char> raw, encoded;
  std::vector<float> values;
  uint64_t done_bytes = 0;
  for (size_t i = 0; i < plan.size(); ++i) {
    const GgufPlannedTensor& p = plan[i];
    const DType out_dtype = declared[i].dtype;
    const GgufTensor& t = *p.source;
    const uint64_t row_elements = t.row_elements(), n_rows = t.n_rows(), row_bytes = t.row_bytes();
    const uint64_t head_dim = p.unpermute_heads && knobs.unpermute_qk ? n_rows / p.unpermute_heads : 0;
    // A raw copy when nothing changes: same dtype, rows in place (bit-identical, NaN payloads included).
    // Q8_0 to q8 too: .sqdk's q8 blocks are GGUF's block_q8_0, and whole rows move (the q/k unpermutation).
    const bool copy = lossless_dtype(t.type) == out_dtype || (t.type == uint32_t(GgmlType::q8_0) && out_dtype == DType::q8);
    const uint64_t rows_per_step = std::max<uint64_t>(1, kChunkElements / row_elements);
    uint64_t overflowed = 0;
    for (uint64_t r0 = 0; r0 < n_rows; r0 += rows_per_step) {
      const uint64_t r1 = std::min(n_rows, r0 + rows_per_step), n = (r1 - r0) * row_elements;
      raw.resize((r1 - r0) * row_bytes);
      if (head_dim == 0) {
        f.read(t.offset + r0 * row_bytes, raw.size(), raw.data());
      } else {
        for (uint64_t r = r0; r < r1; ++r)
          f.read(t.offset + gguf_rope_source_row(r, head_dim) * row_bytes, row_bytes, raw.data() + (r - r0) * row_bytes);
      }
      const unsigned char* chunk = raw.data();
      if (!copy) {
        values.resize(n);
        gguf_decode_f32(t.type, raw.data(), n, values.data());
        encoded.resize(import_detail::encoded_bytes(out_dtype, n));
        try {
          overflowed += import_detail::encode_f32(values.data(), n, out_dtype, encoded.data());
        } catch (const Error& e) {
          throw Error(f.where_tensor(t.name) + e.what());
        }
        chunk = encoded.data();
      }
      const uint64_t out_bytes = import_detail::encoded_bytes(out_dtype, n);
      writer.append(chunk, out_bytes);
      done_bytes += out_bytes;
      if (options.progress) options.progress(done_bytes, total_bytes);
    }
    if (overflowed)
      throw Error(f.where_tensor(t.name) + std::to_string(overflowed) + " values are beyond the range of " +
                  dtype_name(out_dtype) + " (convert with --dtype f32 or bf16)");
    result.bytes_read += t.size;
  }
  writer.commit();
  result.n_tensors = plan.size();
  result.file_size = writer.file_size();
  return result;
}

ConvertResult convert_gguf(const std::string& gguf_path, const std::string& out_path, const ConvertOptions& options) {
  return convert_gguf_with(gguf_path, out_path, options, {});
}

}  // namespace sqrtdk
