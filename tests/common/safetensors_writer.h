// A small safetensors writer for tests: u64 LE header length, the JSON header {name: {dtype, shape, data_offsets}}
// (plus "__metadata__": {"format": "pt"}) padded with spaces to a multiple of 8, then the tensors' bytes packed in
// order, as tools/make_golden.py's write_safetensors lays a file out.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace sqrtdk::test {
namespace {

// One tensor of a safetensors file under construction.
struct StTensor {
  std::string name, dtype;  // dtype: "F32", "F16", "BF16", ...
  std::vector<uint64_t> shape;
  std::vector<unsigned char> data;  // little-endian
};

// A safetensors file from a raw header text and `data_bytes` zero bytes of data.
inline std::vector<unsigned char> raw_safetensors(const std::string& header, size_t data_bytes) {
  std::vector<unsigned char> out(8 + header.size() + data_bytes, 0);
  const uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  std::memcpy(out.data() + 8, header.data(), header.size());
  return out;
}

// A safetensors file with these tensors packed in order (offsets computed), as the Python writer lays it out.
inline std::vector<unsigned char> make_safetensors(const std::vector<StTensor>& tensors) {
  nlohmann::json header = nlohmann::json::object();
  header["__metadata__"] = {{"format", "pt"}};
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.data.size()}}};
    offset += t.data.size();
  }
  std::string text = header.dump();
  while (text.size() % 8) text += ' ';
  std::vector<unsigned char> out = raw_safetensors(text, 0);
  for (const auto& t : tensors) out.insert(out.end(), t.data.begin(), t.data.end());
  return out;
}

}  // namespace
}  // namespace sqrtdk::test
