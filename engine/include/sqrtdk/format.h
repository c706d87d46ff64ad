// The .sqdk weight file (spec: engine/FORMAT.md): model configuration, tensor directory, memory-mapped data.
//
// WeightFile::open maps the file read-only and validates everything before returning: header, config, directory,
// bounds, alignment, overlap, sizes and (unless disabled) each tensor's CRC-32. Nothing is trusted; every failure is
// a sqrtdk::Error naming the file, the tensor and what was expected. After open() the object is immutable.
#pragma once

#include <sqrtdk/config.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace sqrtdk {

struct TokenizerSpec;  // <sqrtdk/tokenizer.h>

// q8: GGUF's block_q8_0 (ops::Q8Block: an f16 scale and 32 int8, 34 bytes per 32 elements along the last
// dimension, which must be a multiple of 32); a row of K elements is K/32 blocks (engine/FORMAT.md "q8").
enum class DType : uint8_t { f32 = 0, f16 = 1, bf16 = 2, q8 = 3 };

// The family whose name is `name` (models/families.cpp); throws sqrtdk::Error listing the known ones otherwise.
Arch parse_arch(std::string_view name);
const char* dtype_name(DType dtype);     // "f32", "f16", "bf16", "q8"
DType parse_dtype(std::string_view name);
size_t dtype_size(DType dtype);  // bytes per element (f32, f16, bf16); q8 has no per-element size: tensor_bytes
inline constexpr uint64_t kQ8BlockElements = 32, kQ8BlockBytes = 34;
// The bytes a tensor of `dtype` and `shape` stores (q8: product(shape)/32 blocks of 34 bytes). Empty string on
// success; else why not, one phrase for an error message: a q8 shape whose last dimension is not a multiple of 32,
// an empty shape or a zero dimension, or a size past 2^64 bytes.
std::string tensor_bytes_problem(DType dtype, const std::vector<uint64_t>& shape, uint64_t& bytes);
// The same, throwing sqrtdk::Error "<where>: tensor '<name>': shape [..] of <dtype>: <problem>" (kind bad_input).
uint64_t tensor_bytes(DType dtype, const std::vector<uint64_t>& shape, const std::string& where = {},
                      std::string_view name = {});

struct TensorInfo {
  std::string name;
  DType dtype = DType::f32;
  std::vector<uint64_t> shape;  // outermost first
  uint64_t offset = 0;          // absolute file offset
  uint64_t size = 0;            // bytes
  uint32_t crc32 = 0;
  uint64_t n_elements() const;
  std::string shape_string() const;  // "[768, 2304]"
};

struct LoadOptions {
  bool verify_checksums = true;  // header and per-tensor CRC-32; false skips them (faster load of trusted files)
  bool check_finite = false;     // refuse tensors holding NaN or Inf (the error names the tensor)
  uint64_t max_bytes = 0;        // refuse files larger than this many bytes; 0 = no cap
  int n_threads = 0;             // threads for checksum/finite scans; 0 = resolve_threads() default
};

class WeightFile {
 public:
  // Maps and validates `path`. Throws sqrtdk::Error on any problem.
  static std::shared_ptr<const WeightFile> open(const std::string& path, const LoadOptions& options = {});
  ~WeightFile();
  WeightFile(const WeightFile&) = delete;
  WeightFile& operator=(const WeightFile&) = delete;

  const std::string& path() const { return path_; }
  const ModelConfig& config() const { return config_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  uint64_t file_size() const { return file_size_; }
  bool checksums_verified() const { return checksums_verified_; }

  // nullptr if absent.
  const TensorInfo* find(std::string_view name) const;
  // Throws sqrtdk::Error naming the file and tensor if absent, or if its shape differs from `expected_shape`.
  const TensorInfo& require(std::string_view name, const std::vector<uint64_t>& expected_shape) const;
  // The tensor's bytes inside the mapping (read-only, 64-byte aligned).
  const void* data(const TensorInfo& tensor) const;
  // Converts the tensor to f32 into dst (n_elements() floats); f16 and bf16 are widened, q8 dequantized
  // (scale·q per block).
  void read_f32(const TensorInfo& tensor, float* dst) const;
  // Elements of the tensor that are NaN or +-Inf (for `sqrtdk inspect --check`; q8: the 32 elements of each block
  // whose scale is).
  uint64_t count_nonfinite(const TensorInfo& tensor) const;
  // The tokenizer section (version-2 files whose config says tokenizer bpe), checked; nullptr if the file has none.
  const TokenizerSpec* tokenizer() const { return tokenizer_.get(); }

 private:
  WeightFile() = default;
  std::string path_;
  ModelConfig config_;
  std::vector<TensorInfo> tensors_;
  uint64_t file_size_ = 0;
  bool checksums_verified_ = false;
  std::vector<uint32_t> by_name_;  // indices into tensors_ sorted by name (for find)
  std::shared_ptr<const TokenizerSpec> tokenizer_;
  const unsigned char* map_ = nullptr;  // PROT_READ mapping of file_size_ bytes; never written
};

// Writes a .sqdk file (the C++ reference writer; byte-identical to tools/sqdk.py for the same content).
// Tensors are stored in the given order. The content is validated first with the loader's rules (config, names,
// shapes, the family's tensor set), so the writer never produces a file the loader refuses.
// Writes to a temporary file beside `path`, fsyncs, then renames, so a killed writer never leaves a partial file
// under the final name. Throws sqrtdk::Error (naming the path) on invalid content or an I/O failure.
struct TensorToWrite {
  std::string name;
  DType dtype = DType::f32;
  std::vector<uint64_t> shape;
  const void* data = nullptr;  // tensor_bytes(dtype, shape) bytes: elements of dtype (q8: blocks), little-endian
};
// `tokenizer` (may be null): stored as the tokenizer section (the file is then version 2; config.tokenizer must be
// bpe, with the spec's BOS/EOS ids).
void write_weight_file(const std::string& path, const ModelConfig& config, const std::vector<TensorToWrite>& tensors,
                       const TokenizerSpec* tokenizer = nullptr);

// The streaming form of write_weight_file (same bytes, same checks), for writers that produce tensors one by one
// and should not hold the model in memory (`sqrtdk convert`):
//
//   WeightFileWriter w(path, config, specs);   // names, dtypes, shapes in file order: validated, layout fixed
//   for each tensor, in order: w.append(bytes, n) one or more times until its byte size is reached
//   w.commit();                                 // header + directory (with CRCs) written, fsync, rename
//
// Data goes to the temporary file as it is appended; the header and directory are written last. Destroying the
// writer without commit() removes the temporary file. Throws sqrtdk::Error naming the path (and the tensor).
struct TensorToDeclare {
  std::string name;
  DType dtype = DType::f32;
  std::vector<uint64_t> shape;
};
class WeightFileWriter {
 public:
  WeightFileWriter(const std::string& path, const ModelConfig& config, const std::vector<TensorToDeclare>& tensors);
  ~WeightFileWriter();
  WeightFileWriter(const WeightFileWriter&) = delete;
  WeightFileWriter& operator=(const WeightFileWriter&) = delete;

  // Appends the next `size` bytes of data: they continue the current tensor, and may not run past its end.
  void append(const void* data, uint64_t size);
  // Index of the tensor the next append() continues (= number of tensors when all data is in).
  size_t current_tensor() const;
  uint64_t file_size() const;  // the size the finished file will have
  // Stores `spec` as the tokenizer section after the tensor data (any time before commit). Required when the
  // config's tokenizer is bpe, refused otherwise; checked like the loader checks it (ids fit n_vocab, same BOS/EOS).
  void set_tokenizer(const TokenizerSpec& spec);
  void commit();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// CRC-32 (ISO-HDLC; the same value as Python's zlib.crc32(data, crc)). Uses VPCLMULQDQ or PCLMULQDQ folding when
// the CPU has it, else slicing-by-8 tables (engine/src/format/format_crc32.cpp).
uint32_t crc32(const void* data, size_t size, uint32_t crc = 0);

// f16/bf16 <-> f32 conversions (round to nearest even when narrowing).
float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);
float bf16_to_f32(uint16_t h);
uint16_t f32_to_bf16(float f);

}  // namespace sqrtdk
