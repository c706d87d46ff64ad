// .sqdk pieces shared by reader, writer and tools: enum names, tensor info helpers,
// f16/bf16 conversions, name rules, header encoding and the family tensor-set check (spec: engine/FORMAT.md).
#include <sqrtdk/error.h>
#include <sqrtdk/format.h>
#include <sqrtdk/tokenizer.h>

#include "engine/src/format/format_internal.h"
#include "ops/base/float16.h"
#include "ops/gemm/gemm.h"
#include "models/family.h"

#include <cmath>
#include <cstdio>
#include <unordered_map>

namespace sqrtdk {

using namespace format_detail;

Arch parse_arch(std::string_view name) {
  for (const ModelFamily* f : model_families())
    if (name == f->name) return f->arch;
  throw Error("unknown architecture '" + quote_name(name) + "' (expected " + family_names() + ")");
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32: return "f32";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::q8: return "q8";
  }
  return "unknown";
}

DType parse_dtype(std::string_view name) {
  if (name == "f32") return DType::f32;
  if (name == "f16") return DType::f16;
  if (name == "bf16") return DType::bf16;
  if (name == "q8") return DType::q8;
  throw Error("unknown dtype '" + quote_name(name) + "' (expected f32, f16, bf16 or q8)");
}

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::f32: return 4;
    case DType::f16:
    case DType::bf16: return 2;
    case DType::q8: break;
  }
  // A caller sizing q8 by elements would compute a wrong size silently: refuse loudly instead.
  throw Error(std::string("dtype_size: ") + dtype_name(dtype) + " has no per-element size (use tensor_bytes)");
}

std::string tensor_bytes_problem(DType dtype, const std::vector<uint64_t>& shape, uint64_t& bytes) {
  if (shape.empty()) return "no dimensions";
  uint64_t n = 1;
  for (uint64_t d : shape) {
    if (d == 0) return "a dimension is 0 (expected >= 1)";
    if (__builtin_mul_overflow(n, d, &n)) return "more than 2^64 elements";
  }
  if (dtype == DType::q8) {
    static_assert(sizeof(ops::Q8Block) == kQ8BlockBytes && ops::kQ8BlockSize == kQ8BlockElements);
    if (shape.back() % kQ8BlockElements != 0)
      return "the last dimension " + std::to_string(shape.back()) +
             " is not a multiple of 32 (q8 stores blocks of 32 along it)";
    if (__builtin_mul_overflow(n / kQ8BlockElements, kQ8BlockBytes, &bytes)) return "more than 2^64 bytes";
    return {};
  }
  if (static_cast<uint8_t>(dtype) > 3) return "unknown dtype " + std::to_string(static_cast<unsigned>(dtype));
  if (__builtin_mul_overflow(n, uint64_t{dtype_size(dtype)}, &bytes)) return "more than 2^64 bytes";
  return {};
}

uint64_t tensor_bytes(DType dtype, const std::vector<uint64_t>& shape, const std::string& where,
                      std::string_view name) {
  uint64_t bytes = 0;
  if (std::string problem = tensor_bytes_problem(dtype, shape, bytes); !problem.empty()) {
    TensorInfo t;
    t.shape = shape;
    throw Error((where.empty() ? std::string() : where + ": ") +
                (name.empty() ? std::string() : "tensor '" + quote_name(name) + "': ") + "shape " + t.shape_string() +
                " of " + dtype_name(dtype) + ": " + problem);
  }
  return bytes;
}

uint64_t TensorInfo::n_elements() const {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;  // the loader checked that this does not overflow
  return n;
}

std::string TensorInfo::shape_string() const {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

// ---- f16 / bf16: ops/base/float16.h (the kernels use them too) ----

float f16_to_f32(uint16_t h) { return ops::half_to_float(h); }
uint16_t f32_to_f16(float f) { return ops::float_to_half(f); }
float bf16_to_f32(uint16_t h) { return ops::bf16_to_float(h); }
uint16_t f32_to_bf16(float f) { return ops::float_to_bf16(f); }

namespace format_detail {

std::string quote_name(std::string_view name) {
  constexpr size_t kShown = 80;
  std::string out;
  for (size_t i = 0; i < name.size() && i < kShown; ++i) {
    const unsigned char c = static_cast<unsigned char>(name[i]);
    if (c >= 0x20 && c < 0x7F && c != '\\' && c != '\'') {
      out += static_cast<char>(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02X", c);
      out += buf;
    }
  }
  if (name.size() > kShown) out += "...(" + std::to_string(name.size()) + " bytes)";
  return out;
}

std::string name_problem(std::string_view name) {
  if (name.empty()) return "empty name (expected 1.." + std::to_string(kMaxNameLen) + " bytes)";
  if (name.size() > kMaxNameLen)
    return "name of " + std::to_string(name.size()) + " bytes is too long (expected 1.." +
           std::to_string(kMaxNameLen) + ")";
  const auto* s = reinterpret_cast<const unsigned char*>(name.data());
  const size_t n = name.size();
  for (size_t i = 0; i < n;) {
    const unsigned char c = s[i];
    if (c < 0x80) {
      if (c < 0x20 || c == 0x7F) return "name has a control character at byte " + std::to_string(i);
      ++i;
      continue;
    }
    // Strict UTF-8 (RFC 3629): no overlong forms, no surrogates, nothing above U+10FFFF.
    size_t len;
    uint32_t cp, min;
    if (c >= 0xC2 && c <= 0xDF) len = 2, cp = c & 0x1F, min = 0x80;
    else if (c >= 0xE0 && c <= 0xEF) len = 3, cp = c & 0x0F, min = 0x800;
    else if (c >= 0xF0 && c <= 0xF4) len = 4, cp = c & 0x07, min = 0x10000;
    else return "name is not valid UTF-8 (byte " + std::to_string(i) + ")";
    if (n - i < len) return "name is not valid UTF-8 (truncated sequence at byte " + std::to_string(i) + ")";
    for (size_t k = 1; k < len; ++k) {
      if ((s[i + k] & 0xC0) != 0x80) return "name is not valid UTF-8 (byte " + std::to_string(i + k) + ")";
      cp = (cp << 6) | (s[i + k] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
      return "name is not valid UTF-8 (overlong, surrogate or out-of-range sequence at byte " + std::to_string(i) +
             ")";
    i += len;
  }
  return {};
}

void encode_header(const ModelConfig& c, uint32_t n_tensors, uint64_t directory_size, uint64_t data_offset,
                   uint64_t file_size, unsigned char out[kHeaderSize]) {
  std::memset(out, 0, kHeaderSize);
  auto put32 = [&](size_t at, uint32_t v) { std::memcpy(out + at, &v, 4); };
  auto put64 = [&](size_t at, uint64_t v) { std::memcpy(out + at, &v, 8); };
  auto putf = [&](size_t at, float v) { std::memcpy(out + at, &v, 4); };
  std::memcpy(out + header_at::magic, kMagic, 4);
  put32(header_at::version, kVersion);
  put64(header_at::file_size, file_size);
  put32(header_at::arch, static_cast<uint32_t>(c.arch));
  put32(header_at::d_model, c.d_model);
  put32(header_at::n_layers, c.n_layers);
  put32(header_at::n_heads, c.n_heads);
  put32(header_at::n_kv_heads, c.n_kv_heads);
  put32(header_at::head_dim, c.head_dim);
  put32(header_at::d_ff, c.d_ff);
  put32(header_at::n_vocab, c.n_vocab);
  put32(header_at::max_seq, c.max_seq);
  putf(header_at::norm_eps, c.norm_eps);
  putf(header_at::rope_theta, c.rope_theta);
  put32(header_at::flags, (c.tied_embeddings ? kFlagTiedEmbeddings : 0u) |
                              (c.rope_interleaved ? kFlagRopeInterleaved : 0u) |
                              (c.attention_scale ? kFlagAttentionScale : 0u));
  if (c.attention_scale) putf(header_at::attention_scale, *c.attention_scale);
  put32(header_at::tokenizer, static_cast<uint32_t>(c.tokenizer));
  put32(header_at::bos_id, c.bos_id);
  put32(header_at::eos_id, c.eos_id);
  put32(header_at::n_tensors, n_tensors);
  put64(header_at::directory_offset, kHeaderSize);
  put64(header_at::directory_size, directory_size);
  put64(header_at::data_offset, data_offset);
}

uint32_t header_crc(const unsigned char header[kHeaderSize], const unsigned char* directory, uint64_t directory_size) {
  uint32_t c = crc32(directory, directory_size, crc32(header, header_at::header_crc32));
  if (load_u32(header + header_at::version) >= kVersionTokenizer)
    c = crc32(header + header_at::attention_scale, kHeaderSize - header_at::attention_scale, c);
  else if (load_u32(header + header_at::flags) & kFlagAttentionScale)
    c = crc32(header + header_at::attention_scale, 4, c);
  return c;
}

void check_tokenizer_fits(const TokenizerSpec& spec, const ModelConfig& config, const std::string& where) {
  auto fail = [&](const std::string& what) { throw Error(ErrorKind::bad_file, where + ": " + what); };
  auto id = [](uint32_t v) { return v == kNoToken ? std::string("none") : std::to_string(v); };
  if (config.tokenizer != TokenizerKind::bpe)
    fail("the config's tokenizer is " + std::to_string(static_cast<uint32_t>(config.tokenizer)) +
         " (expected 2 = bpe for a file with a tokenizer section)");
  if (spec.bos_id != config.bos_id || spec.eos_id != config.eos_id)
    fail("BOS/EOS ids " + id(spec.bos_id) + "/" + id(spec.eos_id) + " differ from the config's " + id(config.bos_id) +
         "/" + id(config.eos_id));
  uint64_t n_ids = spec.vocab.size();
  for (const AddedToken& a : spec.added) n_ids = std::max<uint64_t>(n_ids, uint64_t{a.id} + 1);
  if (n_ids > config.n_vocab)
    fail("token ids up to " + std::to_string(n_ids - 1) + " but the model has n_vocab " +
         std::to_string(config.n_vocab) + " rows (expected every id < n_vocab)");
}

void check_family_tensors(const ModelConfig& config, const std::vector<TensorInfo>& tensors,
                          const std::string& where) {
  auto shape_str = [](const std::vector<uint64_t>& shape) {
    TensorInfo t;
    t.shape = shape;
    return t.shape_string();
  };
  const std::vector<TensorSpec> specs = family_tensors(config);
  std::unordered_map<std::string_view, const TensorSpec*> by_name;
  by_name.reserve(specs.size());
  for (const auto& s : specs) by_name.emplace(s.name, &s);
  for (const auto& t : tensors) {
    const auto it = by_name.find(t.name);
    if (it == by_name.end())
      throw Error(where + ": tensor '" + quote_name(t.name) + "': not part of the " + arch_name(config.arch) +
                  (config.tied_embeddings && t.name == "lm_head.weight" ? " family with tied embeddings"
                                                                        : " family") +
                  " (expected only the tensors FORMAT.md lists for this config)");
    if (t.shape != it->second->shape)
      throw Error(where + ": tensor '" + quote_name(t.name) + "': shape " + t.shape_string() + " (expected " +
                  shape_str(it->second->shape) + " for this " + arch_name(config.arch) + " config)");
  }
  if (tensors.size() != specs.size()) {  // names are unique and each is in the family, so some are missing
    std::unordered_map<std::string_view, bool> present;
    for (const auto& t : tensors) present.emplace(t.name, true);
    for (const auto& s : specs)
      if (!present.count(s.name))
        throw Error(where + ": tensor '" + s.name + "': missing (the " + arch_name(config.arch) +
                    " family needs it with shape " + shape_str(s.shape) + ")");
  }
}

}  // namespace format_detail
}  // namespace sqrtdk
