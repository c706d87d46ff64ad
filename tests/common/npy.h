// Reads NumPy .npy files holding float32 arrays, for tests that compare with PyTorch (tests/data/golden/).
//
//   NpyF32 a = read_npy_f32(path);   // a.shape = {12, 96}; a.data row-major; a.at(t, v) for 2-D arrays
//
// Accepts format versions 1.0, 2.0 and 3.0, dtype '<f4', C order, any number of dimensions (0-D is one value).
// Anything else (bad magic, other dtypes, Fortran order, a truncated file) throws std::runtime_error naming the file
// and the problem. Header-only; the functions sit in an anonymous namespace so each test TU (some are compiled
// with AVX-512 flags) gets its own copy (no ODR mixing of ISA-specific code).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

namespace sqrtdk::test {
namespace {

struct NpyF32 {
  std::vector<size_t> shape;  // outermost first
  std::vector<float> data;    // row-major, product(shape) values
  size_t size() const { return data.size(); }
  float at(size_t i, size_t j) const { return data[i * shape.at(1) + j]; }  // 2-D arrays
  const float* row(size_t i) const { return data.data() + i * shape.at(1); }
};

// The value of `key` in the header dict, e.g. "'<f4'" for 'descr' or "(12, 96)" for 'shape'.
inline std::string npy_header_value(const std::string& header, const std::string& key, const std::string& path) {
  const size_t k = header.find("'" + key + "'");
  if (k == std::string::npos) throw std::runtime_error(path + ": .npy header has no '" + key + "'");
  size_t start = header.find(':', k);
  if (start == std::string::npos) throw std::runtime_error(path + ": malformed .npy header");
  ++start;
  while (start < header.size() && header[start] == ' ') ++start;
  size_t end = start;
  if (end < header.size() && header[end] == '(') {
    end = header.find(')', end);
    if (end == std::string::npos) throw std::runtime_error(path + ": malformed shape in .npy header");
    ++end;
  } else {
    while (end < header.size() && header[end] != ',' && header[end] != '}') ++end;
  }
  return header.substr(start, end - start);
}

inline NpyF32 read_npy_f32(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot open");
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (bytes.size() < 10 || bytes.compare(0, 6, "\x93NUMPY") != 0)
    throw std::runtime_error(path + ": not a .npy file (bad magic)");
  const int major = static_cast<unsigned char>(bytes[6]);
  size_t header_len = 0, header_start = 0;
  if (major == 1) {
    header_len = static_cast<unsigned char>(bytes[8]) | (static_cast<size_t>(static_cast<unsigned char>(bytes[9])) << 8);
    header_start = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) throw std::runtime_error(path + ": truncated .npy header");
    for (int i = 0; i < 4; ++i) header_len |= static_cast<size_t>(static_cast<unsigned char>(bytes[8 + i])) << (8 * i);
    header_start = 12;
  } else {
    throw std::runtime_error(path + ": unsupported .npy version " + std::to_string(major));
  }
  if (header_start + header_len > bytes.size()) throw std::runtime_error(path + ": truncated .npy header");
  const std::string header = bytes.substr(header_start, header_len);

  const std::string descr = npy_header_value(header, "descr", path);
  if (descr != "'<f4'") throw std::runtime_error(path + ": dtype " + descr + ", expected '<f4' (float32)");
  if (npy_header_value(header, "fortran_order", path) != "False")
    throw std::runtime_error(path + ": Fortran-order arrays are not supported");

  NpyF32 array;
  const std::string shape = npy_header_value(header, "shape", path);  // "(12, 96)", "(5,)", "()"
  size_t count = 1;
  for (size_t i = 1; i + 1 < shape.size();) {
    while (i + 1 < shape.size() && (shape[i] == ' ' || shape[i] == ',')) ++i;
    if (i + 1 >= shape.size()) break;
    size_t used = 0;
    const unsigned long long dim = std::stoull(shape.substr(i), &used);
    array.shape.push_back(static_cast<size_t>(dim));
    count *= static_cast<size_t>(dim);
    i += used;
  }
  const size_t data_start = header_start + header_len;
  if (bytes.size() - data_start != count * sizeof(float))
    throw std::runtime_error(path + ": " + std::to_string(bytes.size() - data_start) + " data bytes, expected " +
                             std::to_string(count * sizeof(float)) + " for shape " + shape);
  array.data.resize(count);
  if (count > 0) std::memcpy(array.data.data(), bytes.data() + data_start, count * sizeof(float));  // x86: LE
  return array;
}

}  // namespace
}  // namespace sqrtdk::test
