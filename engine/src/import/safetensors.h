// Reader for Hugging Face safetensors files (https://github.com/huggingface/safetensors, "Format").
//
//   [u64 LE header_len][header_len bytes of JSON][data section]
//   JSON: {"__metadata__": {...}, "<name>": {"dtype": "F32", "shape": [d0, d1], "data_offsets": [begin, end]}, ...}
//   offsets are relative to the start of the data section.
//
// Nothing is trusted: parse_safetensors() checks the header length (<= kMaxHeaderBytes and inside the file), parses
// the JSON with nlohmann-json (nesting depth capped, duplicate names refused), and for every entry: a known dtype,
// a shape of non-negative integers whose element count and byte size do not overflow, data_offsets with
// begin <= end <= data section size and end - begin = bytes, and no two tensors overlapping. `__metadata__` is
// ignored. Every failure is a sqrtdk::Error of kind bad_file, "<where>: ..." naming the tensor. The dtypes sqrtdk
// computes with are F32, F16 and BF16; the other dtypes of the safetensors spec (I64, BOOL, F8_*, ...) are accepted
// by the parser so a checkpoint's integer buffers can be skipped, and the importer refuses them by name if a weight
// has one.
#pragma once

#include "engine/src/import/mapped_file.h"

#include <sqrtdk/format.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sqrtdk {

inline constexpr uint64_t kMaxSafetensorsHeaderBytes = uint64_t{100} << 20;  // 100 MiB, as the Python reader

struct SafetensorsTensor {
  std::string name;
  std::string dtype_name;       // as in the file: "F32", "BF16", "I64", ...
  std::optional<DType> dtype;   // set for F32, F16, BF16 (the dtypes sqrtdk reads)
  std::vector<uint64_t> shape;  // outermost first; may be empty (a scalar) or hold zeros
  uint64_t n_elements = 0;
  uint64_t offset = 0;  // absolute offset in the file
  uint64_t size = 0;    // bytes
  std::string shape_string() const;  // "[64, 192]"
};

// Parses and validates the header of a safetensors file held in `bytes` (the whole file, `size` bytes; the data
// section is not read). Tensors are returned in file-offset order. Throws sqrtdk::Error prefixed with `where`.
std::vector<SafetensorsTensor> parse_safetensors(const unsigned char* bytes, uint64_t size, const std::string& where);

// A safetensors file mapped read-only and validated with parse_safetensors(); the descriptor stays open for read().
class SafetensorsFile {
 public:
  static std::unique_ptr<SafetensorsFile> open(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return file_->path(); }
  uint64_t file_size() const { return file_->size(); }
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
  const SafetensorsTensor* find(std::string_view name) const;  // nullptr if absent
  const unsigned char* data(const SafetensorsTensor& tensor) const { return file_->bytes() + tensor.offset; }
  // Copies [offset, offset + size) of the file into dst with pread (a short read, e.g. a file truncated after open,
  // is a sqrtdk::Error). The converter streams data this way rather than through the mapping: on this VM a first
  // touch of a mapped page costs microseconds (engine/src/import/hf_import.cpp has the figures).
  void read(uint64_t offset, uint64_t size, void* dst) const;

 private:
  SafetensorsFile() = default;
  std::unique_ptr<MappedFile> file_;
  std::vector<SafetensorsTensor> tensors_;
  std::vector<uint32_t> by_name_;  // indices sorted by name
};

}  // namespace sqrtdk
