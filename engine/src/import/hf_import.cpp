// Hugging Face checkpoint -> .sqdk (contract in hf_import.h).
//
// Order of work: config.json -> ModelConfig; open the safetensors file(s); plan every .sqdk tensor (family_tensors
// order) with its source tensor, expected source shape and whether it is transposed; check the whole plan and the
// unused tensors; only then open the streaming writer and convert chunk by chunk.
#include <sqrtdk/convert.h>
#include <sqrtdk/tokenizer.h>

#include <sqrtdk/error.h>

#include "engine/src/format/format_internal.h"
#include "engine/src/import/dtype_convert.h"
#include "engine/src/import/safetensors.h"
#include "models/family.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <memory>
#include <regex>
#include <unordered_map>

namespace sqrtdk {

using format_detail::quote_name;
using nlohmann::json;

namespace {

constexpr uint64_t kMaxJsonFileBytes = uint64_t{64} << 20;  // config.json and the shard index
constexpr int kMaxJsonDepth = 64;
constexpr size_t kMaxShards = 4096;
constexpr uint64_t kChunkElements = uint64_t{1} << 20;  // 4 MiB of f32 per conversion step

std::string brief(const json& v) {
  std::string s = v.dump(-1, ' ', true, json::error_handler_t::replace);
  if (s.size() > 40) s = s.substr(0, 37) + "...";
  return s;
}

std::string shape_text(const std::vector<uint64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string read_text_file(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) throw Error(path + ": missing (or not a regular file)");
  const uint64_t size = std::filesystem::file_size(path, ec);
  if (ec) throw Error(path + ": cannot read its size: " + ec.message());
  if (size > kMaxJsonFileBytes)
    throw Error(path + ": " + std::to_string(size) + " bytes is over the " + std::to_string(kMaxJsonFileBytes) +
                "-byte limit for a JSON file here");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw Error(path + ": read failed");
  return text;
}

json parse_json(std::string_view text, const std::string& where) {
  struct TooDeep {};
  try {
    return json::parse(text.begin(), text.end(), [](int depth, json::parse_event_t, json&) {
      if (depth > kMaxJsonDepth) throw TooDeep{};
      return true;
    });
  } catch (const json::exception& e) {
    throw Error(where + ": not valid JSON: " + e.what());
  } catch (const TooDeep&) {
    throw Error(where + ": JSON nests deeper than " + std::to_string(kMaxJsonDepth) + " levels");
  }
}

// Typed access to config.json fields with errors naming the field. A field set to null counts as absent.
class ConfigFields final : public HfConfigFields {
 public:
  ConfigFields(const json& j, std::string where, std::string family)
      : j_(j), where_(std::move(where)), family_(std::move(family)) {}
  bool has(const char* key) const override { return j_.contains(key) && !j_[key].is_null(); }
  std::string brief(const char* key) const override { return has(key) ? sqrtdk::brief(j_[key]) : "null"; }
  std::string quote(const std::string& text) const override { return quote_name(text); }
  [[noreturn]] void fail(const std::string& what) const override { throw Error(where_ + ": " + what); }
  const json& get(const char* key) const {
    if (!has(key)) throw Error(where_ + ": field '" + key + "' is missing (" + family_ + " needs it)");
    return j_[key];
  }
  uint32_t dim(const char* key) const override {
    const json& v = get(key);
    if (!v.is_number_unsigned() || v.get<uint64_t>() == 0 || v.get<uint64_t>() > UINT32_MAX)
      throw Error(where_ + ": field '" + key + "' must be a positive integer below 2^32, got " + sqrtdk::brief(v));
    return static_cast<uint32_t>(v.get<uint64_t>());
  }
  uint32_t dim_or(const char* key, uint32_t fallback) const override { return has(key) ? dim(key) : fallback; }
  float real_or(const char* key, float fallback) const override {
    if (!has(key)) return fallback;
    const json& v = j_[key];
    if (!v.is_number() || !std::isfinite(v.get<double>()))
      throw Error(where_ + ": field '" + key + "' must be a finite number, got " + sqrtdk::brief(v));
    return static_cast<float>(v.get<double>());
  }
  bool flag_or(const char* key, bool fallback) const override {
    if (!has(key)) return fallback;
    if (!j_[key].is_boolean()) throw Error(where_ + ": field '" + key + "' must be true or false, got " + sqrtdk::brief(j_[key]));
    return j_[key].get<bool>();
  }
  std::string text_or(const char* key, const std::string& fallback) const override {
    if (!has(key)) return fallback;
    if (!j_[key].is_string()) throw Error(where_ + ": field '" + key + "' must be a string, got " + sqrtdk::brief(j_[key]));
    return j_[key].get<std::string>();
  }
  // bos_token_id / eos_token_id: an id inside the vocabulary, or the first of a list; else none.
  uint32_t token_or_none(const char* key, uint32_t n_vocab) const override {
    if (!has(key)) return kNoToken;
    json v = j_[key];
    if (v.is_array() && !v.empty()) v = v[0];
    if (v.is_number_unsigned() && v.get<uint64_t>() < n_vocab) return static_cast<uint32_t>(v.get<uint64_t>());
    return kNoToken;
  }
  [[noreturn]] void unsupported(const std::string& what) const override {
    throw Error(ErrorKind::unsupported,
                where_ + ": " + what + " is not supported by sqrtdk's " + family_ + " converter");
  }

 private:
  const json& j_;
  std::string where_, family_;
};

}  // namespace

ModelConfig parse_hf_config(std::string_view json_text, const std::string& where) {
  const json j = parse_json(json_text, where);
  if (!j.is_object()) throw Error(where + ": not a JSON object");
  std::string architecture;
  if (j.contains("architectures") && !j["architectures"].is_null()) {
    const json& a = j["architectures"];
    if (!a.is_array() || a.empty() || !a[0].is_string())
      throw Error(where + ": field 'architectures' must be a list of names, got " + brief(a));
    architecture = a[0].get<std::string>();
  } else if (j.contains("model_type") && j["model_type"].is_string()) {
    const std::string type = j["model_type"].get<std::string>();
    architecture = "model_type " + type;
    for (const ModelFamily* f : model_families())
      if (type == f->hf.model_type) architecture = f->hf.architectures[0];
  } else {
    throw Error(where + ": neither 'architectures' nor 'model_type' says which model this is");
  }

  const ModelFamily* family = nullptr;
  std::string known;  // "GPT2LMHeadModel and LlamaForCausalLM"
  for (const ModelFamily* f : model_families()) {
    for (const char* const* name = f->hf.architectures; *name; ++name)
      if (architecture == *name) family = f;
    known += (known.empty() ? "" : " and ") + std::string(f->hf.architectures[0]);
  }
  if (!family)
    throw Error(where + ": unknown architecture '" + quote_name(architecture) + "' (sqrtdk converts " + known + ")");
  const ModelConfig c = family->hf.config(ConfigFields(j, where, architecture));
  c.validate(where);
  return c;
}

namespace {

// The safetensors file(s) of a checkpoint, with one name -> tensor lookup over all shards.
struct Checkpoint {
  struct Source {
    const SafetensorsFile* file = nullptr;
    const SafetensorsTensor* tensor = nullptr;
  };
  std::vector<std::unique_ptr<SafetensorsFile>> files;
  std::unordered_map<std::string, Source> by_name;
  std::string description;  // for messages: the file, or the index

  const Source* find(const std::string& name) const {
    auto it = by_name.find(name);
    return it == by_name.end() ? nullptr : &it->second;
  }
};

Checkpoint open_checkpoint(const std::filesystem::path& dir) {
  Checkpoint ck;
  std::error_code ec;
  const std::filesystem::path single = dir / "model.safetensors", index = dir / "model.safetensors.index.json";
  std::vector<std::string> shard_names;
  json weight_map;
  if (std::filesystem::exists(single, ec)) {
    shard_names.push_back("model.safetensors");
    ck.description = single.string();
  } else if (std::filesystem::exists(index, ec)) {
    ck.description = index.string();
    const json j = parse_json(read_text_file(index.string()), index.string());
    if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
      throw Error(index.string() + ": no 'weight_map' object");
    weight_map = j["weight_map"];
    for (const auto& [name, file] : weight_map.items()) {
      if (!file.is_string())
        throw Error(index.string() + ": tensor '" + quote_name(name) + "': shard must be a file name, got " + brief(file));
      const std::string shard = file.get<std::string>();
      // A shard is a plain file name in the checkpoint folder: no paths out of it.
      if (shard.empty() || shard[0] == '.' || shard.find('/') != std::string::npos ||
          shard.find('\0') != std::string::npos || shard.find('\\') != std::string::npos)
        throw Error(index.string() + ": tensor '" + quote_name(name) + "': shard '" + quote_name(shard) +
                    "' is not a plain file name in the checkpoint folder");
      if (std::find(shard_names.begin(), shard_names.end(), shard) == shard_names.end()) {
        if (shard_names.size() >= kMaxShards)
          throw Error(index.string() + ": more than " + std::to_string(kMaxShards) + " shards");
        shard_names.push_back(shard);
      }
    }
    if (shard_names.empty()) throw Error(index.string() + ": 'weight_map' lists no tensors");
    std::sort(shard_names.begin(), shard_names.end());
  } else {
    std::string hint;
    if (std::filesystem::exists(dir / "pytorch_model.bin", ec) ||
        std::filesystem::exists(dir / "pytorch_model.bin.index.json", ec))
      hint = " (PyTorch .bin checkpoints are not read: only safetensors)";
    throw Error(dir.string() + ": no model.safetensors or model.safetensors.index.json" + hint);
  }

  for (const auto& shard : shard_names) {
    ck.files.push_back(SafetensorsFile::open((dir / shard).string()));
    const SafetensorsFile* file = ck.files.back().get();
    for (const auto& t : file->tensors()) {
      auto [it, inserted] = ck.by_name.emplace(t.name, Checkpoint::Source{file, &t});
      if (!inserted)
        throw Error(file->path() + ": tensor '" + quote_name(t.name) + "' is also in " + it->second.file->path());
    }
  }
  for (const auto& [name, file] : weight_map.items()) {
    const Checkpoint::Source* src = ck.find(name);
    const std::string shard = file.get<std::string>();
    if (!src || std::filesystem::path(src->file->path()).filename() != shard)
      throw Error(ck.description + ": tensor '" + quote_name(name) + "' is listed in shard '" + quote_name(shard) +
                  "' but that shard does not hold it");
  }
  return ck;
}

// One .sqdk tensor and where it comes from.
struct PlannedTensor {
  std::string name;                 // .sqdk name
  std::vector<uint64_t> shape;      // .sqdk shape
  std::string source_name;          // HF name
  std::vector<uint64_t> source_shape;  // shape the source must have
  bool transpose = false;           // GPT-2 Conv1D: source [in, out] -> [out, in]
  Checkpoint::Source source;
};

float load_as_f32(const unsigned char* p, DType d) {
  if (d == DType::f32) {
    float v;
    std::memcpy(&v, p, 4);
    return v;
  }
  uint16_t h;
  std::memcpy(&h, p, 2);
  return d == DType::f16 ? f16_to_f32(h) : bf16_to_f32(h);
}

// dst[i] = src[i] converted from `from` to `to` (n elements, different dtypes). Returns how many finite values
// became infinite (narrowing past the target's range). One loop per pair, so the bf16 ones (shifts and the
// round-to-nearest-even of f32_to_bf16, written inline with the same bits) vectorize; f16 goes through the
// library's f16 functions.
uint64_t convert_elements(const unsigned char* src, DType from, unsigned char* dst, DType to, uint64_t n) {
  uint64_t overflowed = 0;
  auto load32 = [&](uint64_t i) {
    uint32_t x;
    std::memcpy(&x, src + 4 * i, 4);
    return x;
  };
  auto load16 = [&](uint64_t i) {
    uint16_t h;
    std::memcpy(&h, src + 2 * i, 2);
    return h;
  };
  auto store32 = [&](uint64_t i, uint32_t x) { std::memcpy(dst + 4 * i, &x, 4); };
  auto store16 = [&](uint64_t i, uint16_t h) { std::memcpy(dst + 2 * i, &h, 2); };
  auto f32_bits = [](float f) {
    uint32_t x;
    std::memcpy(&x, &f, 4);
    return x;
  };
  auto bf16_from_bits = [](uint32_t x) -> uint16_t {  // = f32_to_bf16
    if ((x & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((x >> 16) | 0x0040);
    return static_cast<uint16_t>((x + 0x7FFFu + ((x >> 16) & 1)) >> 16);
  };
  // A finite source that lands on the target's Inf.
  auto bf16_overflow = [](uint32_t x, uint16_t h) { return (x & 0x7F800000u) != 0x7F800000u && (h & 0x7FFFu) == 0x7F80u; };
  auto f16_overflow = [](uint32_t x, uint16_t h) { return (x & 0x7F800000u) != 0x7F800000u && (h & 0x7FFFu) == 0x7C00u; };
  if (from == DType::bf16 && to == DType::f32) {
    for (uint64_t i = 0; i < n; ++i) store32(i, uint32_t{load16(i)} << 16);
  } else if (from == DType::f16 && to == DType::f32) {
    for (uint64_t i = 0; i < n; ++i) store32(i, f32_bits(f16_to_f32(load16(i))));
  } else if (from == DType::f32 && to == DType::bf16) {
    for (uint64_t i = 0; i < n; ++i) {
      const uint32_t x = load32(i);
      const uint16_t h = bf16_from_bits(x);
      store16(i, h);
      overflowed += bf16_overflow(x, h);
    }
  } else if (from == DType::f32 && to == DType::f16) {
    for (uint64_t i = 0; i < n; ++i) {
      const uint32_t x = load32(i);
      float f;
      std::memcpy(&f, &x, 4);
      const uint16_t h = f32_to_f16(f);
      store16(i, h);
      overflowed += f16_overflow(x, h);
    }
  } else if (from == DType::f16 && to == DType::bf16) {
    for (uint64_t i = 0; i < n; ++i) store16(i, bf16_from_bits(f32_bits(f16_to_f32(load16(i)))));  // always in range
  } else if (from == DType::bf16 && to == DType::f16) {
    for (uint64_t i = 0; i < n; ++i) {
      const uint32_t x = uint32_t{load16(i)} << 16;
      float f;
      std::memcpy(&f, &x, 4);
      const uint16_t h = f32_to_f16(f);
      store16(i, h);
      overflowed += f16_overflow(x, h);
    }
  }
  return overflowed;
}

// dst rows [r0, r1) of the transpose of src [K][N] (element size `es`): dst[(r - r0) * K + c] = src[c * N + r].
void transpose_rows(const unsigned char* src, uint64_t K, uint64_t N, uint64_t r0, uint64_t r1, size_t es,
                    unsigned char* dst) {
  constexpr uint64_t kTile = 32;  // keeps the strided writes of one tile inside L1
  for (uint64_t c0 = 0; c0 < K; c0 += kTile) {
    const uint64_t c1 = std::min(K, c0 + kTile);
    for (uint64_t r = r0; r < r1; ++r)
      for (uint64_t c = c0; c < c1; ++c) std::memcpy(dst + ((r - r0) * K + c) * es, src + (c * N + r) * es, es);
  }
}

bool tensors_equal(const Checkpoint::Source& a, const Checkpoint::Source& b) {
  const SafetensorsTensor &ta = *a.tensor, &tb = *b.tensor;
  if (ta.shape != tb.shape) return false;
  if (ta.dtype == tb.dtype) return std::memcmp(a.file->data(ta), b.file->data(tb), ta.size) == 0;
  const size_t sa = dtype_size(*ta.dtype), sb = dtype_size(*tb.dtype);
  for (uint64_t i = 0; i < ta.n_elements; ++i) {
    const float x = load_as_f32(a.file->data(ta) + i * sa, *ta.dtype);
    const float y = load_as_f32(b.file->data(tb) + i * sb, *tb.dtype);
    if (std::memcmp(&x, &y, 4) != 0) return false;
  }
  return true;
}

}  // namespace

ConvertResult convert_hf_checkpoint(const std::string& hf_dir, const std::string& out_path,
                                    const ConvertOptions& options) {
  const std::filesystem::path dir(hf_dir);
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) throw Error(hf_dir + ": not a folder");
  const std::string config_path = (dir / "config.json").string();
  ConvertResult result;
  ModelConfig config = parse_hf_config(read_text_file(config_path), config_path);
  TokenizerSpec tokenizer;
  const bool has_tokenizer = options.with_tokenizer && tokenizer_spec_from_dir(hf_dir, tokenizer);
  if (has_tokenizer) {
    config.tokenizer = TokenizerKind::bpe;
    config.bos_id = tokenizer.bos_id;
    config.eos_id = tokenizer.eos_id;
    result.tokenizer = tokenizer.summary();
  }
  result.config = config;
  const Checkpoint ck = open_checkpoint(dir);

  // Plan: every tensor the family needs, in canonical order, with its source.
  const ModelFamily& family = family_of(config);
  const auto in_checkpoint = [&ck](const std::string& name) { return ck.find(name) != nullptr; };
  std::vector<PlannedTensor> plan;
  std::unordered_map<std::string, bool> used;
  for (const TensorSpec& spec : family_tensors(config)) {
    PlannedTensor p;
    p.name = spec.name;
    p.shape = spec.shape;
    p.source_name = family.hf.tensor_name(spec.name, in_checkpoint, p.transpose);
    p.source_shape = spec.shape;
    if (p.transpose) std::reverse(p.source_shape.begin(), p.source_shape.end());
    const Checkpoint::Source* src = ck.find(p.source_name);
    if (!src)
      throw Error(ck.description + ": tensor '" + p.source_name + "' is missing (needed for " + p.name + ")");
    const SafetensorsTensor& t = *src->tensor;
    const std::string where = src->file->path() + ": tensor '" + quote_name(t.name) + "': ";
    if (!t.dtype)
      throw Error(ErrorKind::unsupported, where + "dtype " + t.dtype_name + " is not supported (sqrtdk converts F32, F16 and BF16 weights)");
    if (t.shape != p.source_shape)
      throw Error(where + "shape " + t.shape_string() + ", expected " + shape_text(p.source_shape) +
                  (p.transpose ? " (GPT-2 Conv1D weights are stored [in, out])" : "") + " from config.json");
    p.source = *src;
    used[t.name] = true;
    plan.push_back(std::move(p));
  }
  // A tied head: lm_head.weight may be present, and must then equal the embedding.
  if (config.tied_embeddings) {
    if (const Checkpoint::Source* head = ck.find("lm_head.weight")) {
      const Checkpoint::Source& emb = plan.front().source;
      if (!head->tensor->dtype || !tensors_equal(*head, emb))
        throw Error(head->file->path() + ": tensor 'lm_head.weight' differs from '" + emb.tensor->name +
                    "' but config.json says tie_word_embeddings (a tied head must equal the embedding)");
      used["lm_head.weight"] = true;
      result.skipped.push_back("lm_head.weight");
    }
  }
  const std::regex ignored(family.hf.ignored_tensors);
  for (const auto& file : ck.files)
    for (const auto& t : file->tensors()) {
      if (used.count(t.name)) continue;
      if (!std::regex_match(t.name, ignored))
        throw Error(file->path() + ": tensor '" + quote_name(t.name) + "' is not used by " + arch_name(config.arch) +
                    " (a model variant sqrtdk does not support?)");
      result.skipped.push_back(t.name);
    }

  // Output dtype: asked for, else the weights' own when they share one, else f32.
  DType out_dtype = *plan.front().source.tensor->dtype;
  for (const auto& p : plan)
    if (*p.source.tensor->dtype != out_dtype) out_dtype = DType::f32;
  if (options.dtype) out_dtype = *options.dtype;
  const DType head_dtype = options.head_dtype.value_or(out_dtype);
  result.dtype = out_dtype;
  result.head_dtype = head_dtype;

  std::vector<TensorToDeclare> declared;
  uint64_t total_bytes = 0;
  for (const auto& p : plan) {
    const DType out = import_detail::output_dtype_for(p.name, p.shape, out_dtype, head_dtype);
    import_detail::check_output_dtype(p.source.file->path(), p.name, p.shape, out);
    declared.push_back({p.name, out, p.shape});
    total_bytes += tensor_bytes(out, p.shape);
  }
  // The output must not be one of the checkpoint's own files: the rename would replace data still being read.
  std::vector<std::string> inputs = {config_path};
  for (const auto& file : ck.files) inputs.push_back(file->path());
  for (const auto& input : inputs)
    if (std::filesystem::equivalent(out_path, input, ec))
      throw Error(out_path + ": is the checkpoint's own file " + input + " (write the .sqdk somewhere else)");
  WeightFileWriter writer(out_path, config, declared);
  if (has_tokenizer) writer.set_tokenizer(tokenizer);  // checked now (ids < n_vocab), before any data is read

  // Chunk buffers, reused across tensors: with `whole` (the largest transposed tensor) the only memory that grows
  // with the model.
  std::vector<unsigned char> whole, gathered, converted;
  uint64_t done_bytes = 0;
  std::vector<float> values;  // q8 output: the chunk in f32, then quantized
  for (size_t i = 0; i < plan.size(); ++i) {
    const PlannedTensor& p = plan[i];
    const SafetensorsTensor& t = *p.source.tensor;
    const SafetensorsFile& file = *p.source.file;
    const DType from = *t.dtype, out_dtype = declared[i].dtype;
    const size_t in_size = dtype_size(from);
    uint64_t overflowed = 0;
    // Each step covers whole output rows of a transposed tensor, or a run of elements of a copied one.
    const uint64_t K = p.transpose ? p.shape[1] : 1, N = p.transpose ? p.shape[0] : t.n_elements;
    const uint64_t step = p.transpose ? std::max<uint64_t>(1, kChunkElements / K) : kChunkElements;
    if (p.transpose) {
      whole.resize(t.size);
      file.read(t.offset, t.size, whole.data());
    }
    for (uint64_t r0 = 0; r0 < N; r0 += step) {
      const uint64_t r1 = std::min(N, r0 + step), n = (r1 - r0) * K;
      gathered.resize(n * in_size);
      if (p.transpose)
        transpose_rows(whole.data(), K, N, r0, r1, in_size, gathered.data());
      else
        file.read(t.offset + r0 * in_size, n * in_size, gathered.data());
      const unsigned char* chunk = gathered.data();
      const uint64_t out_bytes = import_detail::encoded_bytes(out_dtype, n);  // n: whole rows, or a multiple of 32
      if (out_dtype == DType::q8) {
        values.resize(n);
        import_detail::decode_to_f32(chunk, from, n, values.data());
        converted.resize(out_bytes);
        try {
          overflowed += import_detail::encode_f32(values.data(), n, DType::q8, converted.data());
        } catch (const Error& e) {
          throw Error(file.path() + ": tensor '" + quote_name(t.name) + "': " + e.what());
        }
        chunk = converted.data();
      } else if (from != out_dtype) {
        converted.resize(out_bytes);
        overflowed += convert_elements(chunk, from, converted.data(), out_dtype, n);
        chunk = converted.data();
      }
      writer.append(chunk, out_bytes);
      done_bytes += out_bytes;
      if (options.progress) options.progress(done_bytes, total_bytes);
    }
    if (overflowed)
      throw Error(file.path() + ": tensor '" + quote_name(t.name) + "': " + std::to_string(overflowed) +
                  " values are beyond the range of " + dtype_name(out_dtype) + " (convert with --dtype f32 or bf16)");
    result.bytes_read += t.size;
  }
  writer.commit();
  result.n_tensors = plan.size();
  result.file_size = writer.file_size();
  return result;
}

}  // namespace sqrtdk
