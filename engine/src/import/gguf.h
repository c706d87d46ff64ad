// Reader for llama.cpp's GGUF files, versions 2 and 3 (little-endian), written from the public spec
// (ggml's docs/gguf.md):
//
//   "GGUF" | u32 version | u64 n_tensors | u64 n_kv
//   n_kv x   (string key, u32 value_type, value)        string = u64 length + bytes (no terminator)
//   n_tensors x (string name, u32 n_dims, u64 ne[n_dims] innermost first, u32 ggml_type, u64 offset)
//   padding to general.alignment (default 32), then the data section; offsets are relative to it
//
// Value types: 0 u8, 1 i8, 2 u16, 3 i16, 4 u32, 5 i32, 6 f32, 7 bool, 8 string, 9 array (u32 element type, u64
// count, elements; arrays of arrays are refused), 10 u64, 11 i64, 12 f64.
//
// Nothing is trusted. Every count, length and offset is checked against the bytes that are left BEFORE anything is
// allocated for it (a hostile n_kv or array length costs nothing), shape products and byte sizes are computed with
// overflow checks, every tensor lies inside the data section at a multiple of the alignment, and no two overlap.
// Values are not copied: a GgufValue points into the mapped bytes and the typed getters decode it on demand,
// with errors "<file>: key 'llama.block_count': ..." and "<file>: tensor 'blk.0.attn_q.weight': ...".
#pragma once

#include "engine/src/import/mapped_file.h"

#include <sqrtdk/config.h>
#include <sqrtdk/convert.h>
#include <sqrtdk/format.h>
#include <sqrtdk/tokenizer.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sqrtdk {

enum class GgufValueType : uint32_t {
  u8 = 0, i8 = 1, u16 = 2, i16 = 3, u32 = 4, i32 = 5, f32 = 6, boolean = 7, string = 8, array = 9, u64 = 10,
  i64 = 11, f64 = 12,
};
const char* gguf_value_type_name(GgufValueType type);  // "u32", "string", ... or "unknown"

// The ggml tensor types sqrtdk converts (others parse, so a file's layout is checked whole, but are refused by name
// when a weight has one).
enum class GgmlType : uint32_t { f32 = 0, f16 = 1, q8_0 = 8, bf16 = 30 };
const char* ggml_type_name(uint32_t type);  // "F32", "Q4_K", ... or "unknown"

inline constexpr uint32_t kGgufDefaultAlignment = 32;
inline constexpr uint64_t kGgufMaxKvs = uint64_t{1} << 16;       // real files have dozens
inline constexpr uint64_t kGgufMaxTensors = uint64_t{1} << 20;   // real files have thousands at most
inline constexpr uint64_t kGgufMaxKeyBytes = 65535;
inline constexpr uint64_t kGgufMaxNameBytes = 255;  // ggml's own limit is 63; our .sqdk names allow 255
inline constexpr uint32_t kGgufMaxDims = 4;

// A value inside the file: `data` points at its first byte (for arrays, at the first element).
struct GgufValue {
  GgufValueType type = GgufValueType::u8;
  GgufValueType element_type = GgufValueType::u8;  // arrays only
  uint64_t count = 0;                              // arrays only: number of elements
  const unsigned char* data = nullptr;
  uint64_t size = 0;  // bytes of the value (for arrays, of all elements)
};

struct GgufKv {
  std::string key;
  GgufValue value;
};

struct GgufTensor {
  std::string name;
  uint32_t type = 0;             // ggml type id
  std::vector<uint64_t> ne;      // innermost first, as in the file
  std::vector<uint64_t> shape;   // outermost first (ne reversed): [out, in] for a linear weight
  uint64_t n_elements = 0;
  uint64_t offset = 0;           // absolute offset in the file
  uint64_t size = 0;             // bytes
  uint64_t row_elements() const { return ne[0]; }
  uint64_t n_rows() const { return n_elements / ne[0]; }
  uint64_t row_bytes() const { return size / n_rows(); }
};

class GgufFile {
 public:
  // Maps `path` read-only and parses it. Throws sqrtdk::Error (kind bad_file) "<path>: ...".
  static std::unique_ptr<GgufFile> open(const std::string& path);
  // Parses `size` bytes held by the caller, which must outlive the result (fuzzing, tests). Errors start with `where`.
  static std::unique_ptr<GgufFile> parse(const unsigned char* bytes, uint64_t size, const std::string& where);
  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  const std::string& path() const { return path_; }
  uint64_t file_size() const { return size_; }
  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }
  const std::vector<GgufKv>& kvs() const { return kvs_; }
  const std::vector<GgufTensor>& tensors() const { return tensors_; }  // in file (directory) order
  const GgufKv* find_kv(std::string_view key) const;                   // nullptr if absent
  const GgufTensor* find_tensor(std::string_view name) const;          // nullptr if absent

  // Typed metadata. The optional getters return nullopt for an absent key and throw for a present key of the wrong
  // type; the require_ ones also throw for an absent key. Integers accept every integer type (negative values
  // refused); reals accept f32 and f64.
  std::optional<uint64_t> get_uint(std::string_view key) const;
  std::optional<double> get_real(std::string_view key) const;
  std::optional<bool> get_bool(std::string_view key) const;
  std::optional<std::string> get_string(std::string_view key) const;
  uint64_t require_uint(std::string_view key, const std::string& why) const;
  double require_real(std::string_view key, const std::string& why) const;
  std::string require_string(std::string_view key, const std::string& why) const;
  // Arrays: the element count without decoding; the elements decoded (strings, any integer type, f32/f64).
  std::optional<uint64_t> array_size(std::string_view key) const;
  std::optional<std::vector<std::string>> get_string_array(std::string_view key) const;
  std::optional<std::vector<int64_t>> get_int_array(std::string_view key) const;
  std::optional<std::vector<float>> get_real_array(std::string_view key) const;

  // "<file>: key '<key>': " and "<file>: tensor '<name>': " (names escaped for printing).
  std::string where_key(std::string_view key) const;
  std::string where_tensor(std::string_view name) const;

  // Copies [offset, offset + size) of the file into dst (pread for an opened file; a short read is an error).
  void read(uint64_t offset, uint64_t size, void* dst) const;

 private:
  GgufFile() = default;
  void parse_all();
  const GgufKv& require_kv(std::string_view key, const std::string& why) const;
  const GgufValue* array_of(std::string_view key) const;

  std::string path_;
  std::unique_ptr<MappedFile> file_;
  const unsigned char* bytes_ = nullptr;  // file_'s bytes and size, read by the parser throughout
  uint64_t size_ = 0;
  uint32_t version_ = 0;
  uint32_t alignment_ = kGgufDefaultAlignment;
  uint64_t data_offset_ = 0;
  std::vector<GgufKv> kvs_;
  std::vector<GgufTensor> tensors_;
  std::vector<uint32_t> kv_by_key_, tensor_by_name_;  // indices sorted by key / name
};

// ---- GGUF -> .sqdk (engine/src/import/gguf_import.cpp; the public entry is convert_gguf in <sqrtdk/convert.h>) ----

// The architectures sqrtdk converts from GGUF, for messages: "llama, gpt2".
const char* gguf_supported_architectures();

// ModelConfig from the metadata (general.architecture and the <arch>.* keys; n_vocab from <arch>.vocab_size, else
// the token list, else token_embd's shape). Throws naming the key.
ModelConfig gguf_model_config(const GgufFile& file);

// One .sqdk tensor and the GGUF tensor it comes from.
struct GgufPlannedTensor {
  std::string name;               // .sqdk name
  std::vector<uint64_t> shape;    // .sqdk shape (outermost first)
  const GgufTensor* source = nullptr;
  // llama attn_q / attn_k: undo llama.cpp's RoPE row permutation with this many heads (0: rows as stored).
  uint32_t unpermute_heads = 0;
};

// Every tensor the family needs, in canonical order, checked (present, supported type, shape from the metadata),
// and no tensor in the file left unused. Throws naming the tensor.
std::vector<GgufPlannedTensor> plan_gguf_tensors(const GgufFile& file, const ModelConfig& config);

// The GGUF row that holds row `row` of the Hugging Face (rotate-half) layout of a q or k weight with heads of
// `head_dim` rows. llama.cpp's convert_hf_to_gguf.py permutes each head's rows as
//   w.reshape(n_head, 2, head_dim // 2, in).swapaxes(1, 2).reshape(out, in)
// so HF row h*hd + j*hd/2 + i (j in {0, 1}, i < hd/2) is GGUF row h*hd + 2i + j.
inline uint64_t gguf_rope_source_row(uint64_t row, uint64_t head_dim) {
  const uint64_t head = row / head_dim, r = row % head_dim, half = head_dim / 2;
  return head * head_dim + 2 * (r % half) + r / half;
}

// Decodes `n` elements of a GGUF tensor's bytes (F32, F16, BF16, Q8_0: n a multiple of 32) to f32.
void gguf_decode_f32(uint32_t type, const unsigned char* src, uint64_t n, float* dst);

// Whether the file carries a tokenizer (tokenizer.ggml.model present and not "none").
bool gguf_has_tokenizer(const GgufFile& file);
// The tokenizer from tokenizer.ggml.* metadata (model "gpt2": byte-level BPE; "llama": SentencePiece BPE),
// validated. Throws "<where>: key '...': ..." for what it cannot represent (an unknown pre-tokenizer, say).
TokenizerSpec tokenizer_spec_from_gguf(const GgufFile& file, const std::string& where);

// convert_gguf with knobs for tests only: `unpermute_qk = false` keeps llama.cpp's row order for q/k (and then
// `interleaved_rope` says which RoPE layout the .sqdk claims): the negative control of the unpermute test.
struct GgufConvertTestKnobs {
  bool unpermute_qk = true;
  bool interleaved_rope = false;
};
ConvertResult convert_gguf_with(const std::string& gguf_path, const std::string& out_path,
                                const ConvertOptions& options, const GgufConvertTestKnobs& knobs);

}  // namespace sqrtdk
