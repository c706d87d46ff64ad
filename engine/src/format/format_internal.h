// Internals shared by the .sqdk reader and writer (engine/FORMAT.md is the spec): header layout, name rules,
// the family tensor-set check, CRC combining. Not a public header.
#pragma once

#include <sqrtdk/format.h>

#include <bit>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace sqrtdk::format_detail {

static_assert(std::endian::native == std::endian::little, "the .sqdk reader maps little-endian data in place");

inline constexpr unsigned char kMagic[4] = {'S', 'Q', 'D', 'K'};
inline constexpr uint32_t kVersion = 1;           // files without a tokenizer section (written as before)
inline constexpr uint32_t kVersionTokenizer = 2;  // files with one: bytes 112..127 locate it
inline constexpr uint64_t kHeaderSize = 128;
inline constexpr uint64_t kAlignment = 64;

// The 128-byte header (FORMAT.md "Header"): the byte offset of each little-endian field. The one statement of the
// layout: encode_header writes through these names and WeightFile::open reads through them.
namespace header_at {
inline constexpr uint64_t magic = 0;               // 4 bytes "SQDK"
inline constexpr uint64_t version = 4;             // u32
inline constexpr uint64_t file_size = 8;           // u64
inline constexpr uint64_t arch = 16;               // u32: 0 = gpt2, 1 = llama
inline constexpr uint64_t d_model = 20;            // u32
inline constexpr uint64_t n_layers = 24;           // u32
inline constexpr uint64_t n_heads = 28;            // u32
inline constexpr uint64_t n_kv_heads = 32;         // u32
inline constexpr uint64_t head_dim = 36;           // u32
inline constexpr uint64_t d_ff = 40;               // u32
inline constexpr uint64_t n_vocab = 44;            // u32
inline constexpr uint64_t max_seq = 48;            // u32
inline constexpr uint64_t norm_eps = 52;           // f32
inline constexpr uint64_t rope_theta = 56;         // f32
inline constexpr uint64_t flags = 60;              // u32: bit 0 tied embeddings, bit 1 interleaved RoPE,
                                                   // bit 2 attention_scale present
inline constexpr uint64_t tokenizer = 64;          // u32: 0 = none, 1 = byte_level, 2 = bpe (the section)
inline constexpr uint64_t bos_id = 68;             // u32
inline constexpr uint64_t eos_id = 72;             // u32
inline constexpr uint64_t n_tensors = 76;          // u32
inline constexpr uint64_t directory_offset = 80;   // u64, always kHeaderSize
inline constexpr uint64_t directory_size = 88;     // u64
inline constexpr uint64_t data_offset = 96;        // u64
inline constexpr uint64_t header_crc32 = 104;      // u32 over bytes [0, 104), the directory, then (flag bit 2)
                                                   // the 4 attention_scale bytes: header_crc()
inline constexpr uint64_t attention_scale = 108;   // f32 if flag bit 2, else zero
inline constexpr uint64_t reserved = 112;          // version 1: zero bytes up to kHeaderSize
inline constexpr uint64_t tokenizer_offset = 112;  // version 2, tokenizer 2: u64 file offset of the section
inline constexpr uint64_t tokenizer_size = 120;    // u32 its size in bytes
inline constexpr uint64_t tokenizer_crc32 = 124;   // u32 its CRC-32
static_assert(eos_id + 4 == n_tensors && data_offset + 8 == header_crc32 && header_crc32 + 4 == attention_scale &&
              attention_scale + 4 == reserved && reserved < kHeaderSize);
}  // namespace header_at
inline constexpr uint32_t kFlagTiedEmbeddings = 1u, kFlagRopeInterleaved = 2u, kFlagAttentionScale = 4u;
inline constexpr uint32_t kKnownFlags = kFlagTiedEmbeddings | kFlagRopeInterleaved | kFlagAttentionScale;
inline constexpr size_t kMaxNameLen = 255;
inline constexpr unsigned kMaxDims = 4;
// Smallest directory entry: name_len(2) + 1-byte name + dtype(1) + n_dims(1) + one dim(8) + offset(8) + size(8)
// + crc32(4). Bounds n_tensors before anything is allocated.
inline constexpr uint64_t kMinEntrySize = 2 + 1 + 1 + 1 + 8 + 8 + 8 + 4;

inline uint16_t load_u16(const unsigned char* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
inline uint32_t load_u32(const unsigned char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
inline uint64_t load_u64(const unsigned char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
inline float load_f32(const unsigned char* p) {
  float v;
  std::memcpy(&v, p, 4);
  return v;
}

// The name as printable text for messages: bytes outside printable ASCII become \xNN, and long names are cut, so an
// error stays on one line and a hostile name cannot send terminal escapes.
std::string quote_name(std::string_view name);
// Empty if `name` is a valid tensor name (1..255 bytes of strict UTF-8, no control characters), else the reason.
std::string name_problem(std::string_view name);
// Size in bytes of the 64-aligned value at or above v; false on overflow.
inline bool align_up(uint64_t v, uint64_t& out) {
  if (v > UINT64_MAX - (kAlignment - 1)) return false;
  out = (v + kAlignment - 1) / kAlignment * kAlignment;
  return true;
}

// Encodes the 128-byte header (header_crc32 left 0: the caller computes it over header + directory).
void encode_header(const ModelConfig& config, uint32_t n_tensors, uint64_t directory_size, uint64_t data_offset,
                   uint64_t file_size, unsigned char out[kHeaderSize]);

// The header CRC-32: header bytes [0, 104), then the directory, then, in version 1 only when flag bit 2 is set, the
// 4 attention_scale bytes (so files without the field keep the CRC they always had, and the field is covered when
// set); in version 2 header bytes [108, 128) (attention_scale and the tokenizer section's place) always.
uint32_t header_crc(const unsigned char header[kHeaderSize], const unsigned char* directory, uint64_t directory_size);

// Checks that `tensors` is exactly the tensor set of config's family with the shapes it implies; throws
// sqrtdk::Error "<where>: tensor '<name>': ..." naming the first missing, unexpected or misshapen tensor.
void check_family_tensors(const ModelConfig& config, const std::vector<TensorInfo>& tensors, const std::string& where);

// A tokenizer section's spec against the config: tokenizer bpe, the same BOS/EOS ids, every id a row of tok_emb
// (ids < n_vocab; models often have more rows than tokens). Throws a bad_file sqrtdk::Error "<where>: ...".
void check_tokenizer_fits(const TokenizerSpec& spec, const ModelConfig& config, const std::string& where);

// The CRC-32 implementations, for tests and benchmarks: crc32() uses the last of crc32_paths() (the fastest this
// CPU runs); every path gives the same value.
enum class CrcPath { table, pclmul, vpclmul };
std::vector<CrcPath> crc32_paths();  // table first
uint32_t crc32_with(CrcPath path, const void* data, size_t size, uint32_t crc = 0);

// CRC of the concatenation A||B from crc(A), crc(B) and len(B) (zlib's crc32_combine).
uint32_t crc32_combine(uint32_t crc1, uint32_t crc2, uint64_t len2);


// Drops the pages of a read-only file mapping that lie wholly inside [p, p + bytes) from the resident set (a
// later touch re-reads them from the page cache). The one place the loader and Model::load release file pages.
void drop_mapped_pages(const void* p, uint64_t bytes);

}  // namespace sqrtdk::format_detail

namespace sqrtdk {
using format_detail::crc32_combine;
}
