// Helpers for the .sqdk format tests: temporary folders, the synthetic fixture models (tests/data/format_*.json,
// the same content tools/sqdk.py writes), raw byte patching with the header checksum re-sealed, and error checks.
#pragma once

#include <doctest/doctest.h>

#include <sqrtdk/error.h>
#include <sqrtdk/format.h>

#include "tests/common/temp_dir.h"
#include "ops/gemm/gemm.h"

#include <nlohmann/json.hpp>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include <unistd.h>

namespace sqrtdk::test {

// The kind of the Error fn throws; fails the test if it throws nothing or something else.
template <class Fn>
ErrorKind kind_thrown(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    INFO("message: " << e.what());
    return e.kind();
  }
  FAIL("no sqrtdk::Error thrown");
  return ErrorKind::internal;
}

inline std::vector<unsigned char> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// name -> f32 values of every tensor of a .sqdk file, in file order.
inline std::vector<std::pair<std::string, std::vector<float>>> read_all_f32(const std::string& path) {
  const auto file = WeightFile::open(path);
  std::vector<std::pair<std::string, std::vector<float>>> out;
  for (const auto& t : file->tensors()) {
    std::vector<float> v(t.n_elements());
    file->read_f32(t, v.data());
    out.emplace_back(t.name, std::move(v));
  }
  return out;
}

// Replaces the file by a new one (remove, then create): truncating a file in place makes ext4 flush it on close
// (auto_da_alloc), about 3 ms per write here, which the hostile tests would pay thousands of times.
inline void write_bytes(const std::string& path, const std::vector<unsigned char>& bytes, size_t n = SIZE_MAX) {
  std::error_code ec;
  std::filesystem::remove(path, ec);
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(std::min(n, bytes.size())));
}

// A fixture model: config and tensors with synthetic values ((7 i + 3 k) mod 17 - 8) / 16, exact in every dtype.
struct FixtureTensor {
  std::string name;
  DType dtype;
  std::vector<uint64_t> shape;
  std::vector<float> values;           // the exact values
  std::vector<unsigned char> encoded;  // values in dtype, little-endian
};
struct Fixture {
  ModelConfig config;
  std::vector<FixtureTensor> tensors;
};

inline void encode(FixtureTensor& t) {
  const size_t n = t.values.size();
  if (t.dtype == DType::q8) {  // blocks of 32 run on across rows: one call over the whole tensor
    t.encoded.resize(n / ops::kQ8BlockSize * sizeof(ops::Q8Block));
    ops::quantize_row_q8(t.values.data(), n, reinterpret_cast<ops::Q8Block*>(t.encoded.data()));
    return;
  }
  t.encoded.resize(n * dtype_size(t.dtype));
  for (size_t i = 0; i < n; ++i) {
    if (t.dtype == DType::f32) {
      std::memcpy(&t.encoded[4 * i], &t.values[i], 4);
    } else {
      const uint16_t h = t.dtype == DType::f16 ? f32_to_f16(t.values[i]) : f32_to_bf16(t.values[i]);
      std::memcpy(&t.encoded[2 * i], &h, 2);
    }
  }
}

inline std::string fixture_spec_path(const std::string& family) {
  return std::string(SQRTDK_TEST_DATA_DIR) + "/format_" + family + ".json";
}

inline Fixture load_fixture(const std::string& family) {
  std::ifstream f(fixture_spec_path(family));
  REQUIRE(f.good());
  const nlohmann::json spec = nlohmann::json::parse(f);
  const auto& c = spec["config"];
  Fixture fx;
  ModelConfig& m = fx.config;
  m.arch = parse_arch(c["arch"].get<std::string>());
  m.d_model = c["d_model"];
  m.n_layers = c["n_layers"];
  m.n_heads = c["n_heads"];
  m.n_kv_heads = c["n_kv_heads"];
  m.head_dim = c["head_dim"];
  m.d_ff = c["d_ff"];
  m.n_vocab = c["n_vocab"];
  m.max_seq = c["max_seq"];
  m.norm_eps = static_cast<float>(c["norm_eps"].get<double>());
  m.rope_theta = static_cast<float>(c["rope_theta"].get<double>());
  m.tied_embeddings = c["tied_embeddings"];
  m.rope_interleaved = c["rope_interleaved"];
  m.tokenizer = c["tokenizer"] == "byte_level" ? TokenizerKind::byte_level : TokenizerKind::none;
  m.bos_id = c["bos_id"].is_null() ? kNoToken : c["bos_id"].get<uint32_t>();
  m.eos_id = c["eos_id"].is_null() ? kNoToken : c["eos_id"].get<uint32_t>();
  int k = 0;
  for (const auto& t : spec["tensors"]) {
    FixtureTensor ft;
    ft.name = t["name"];
    ft.dtype = parse_dtype(t["dtype"].get<std::string>());
    ft.shape = t["shape"].get<std::vector<uint64_t>>();
    uint64_t n = 1;
    for (auto d : ft.shape) n *= d;
    ft.values.resize(n);
    for (uint64_t i = 0; i < n; ++i)
      ft.values[i] = static_cast<float>(static_cast<int>((i * 7 + uint64_t(k) * 3) % 17) - 8) / 16.0f;
    encode(ft);
    fx.tensors.push_back(std::move(ft));
    ++k;
  }
  return fx;
}

inline void write_fixture(const Fixture& fx, const std::string& path) {
  std::vector<TensorToWrite> tw;
  for (const auto& t : fx.tensors) tw.push_back({t.name, t.dtype, t.shape, t.encoded.data()});
  write_weight_file(path, fx.config, tw);
}

// The bytes of the fixture written by write_weight_file, computed once per family (the writer fsyncs: slow).
inline const std::vector<unsigned char>& fixture_bytes(const std::string& family) {
  auto make = [](const std::string& f) {
    TempDir dir;
    write_fixture(load_fixture(f), dir.file("fixture.sqdk"));
    return read_bytes(dir.file("fixture.sqdk"));
  };
  static const std::vector<unsigned char> gpt2 = make("gpt2"), llama = make("llama");
  return family == "gpt2" ? gpt2 : llama;
}

// ---- raw access to a (valid) file's bytes ----
template <typename T>
T get(const std::vector<unsigned char>& b, size_t at) {
  T v;
  std::memcpy(&v, &b[at], sizeof(T));
  return v;
}
template <typename T>
void put(std::vector<unsigned char>& b, size_t at, T v) {
  std::memcpy(&b[at], &v, sizeof(T));
}

// Byte positions of one directory entry's fields.
struct EntryPos {
  size_t name_len, name, dtype, n_dims, shape, offset, size, crc, end;
  std::string name_str;
};
inline std::vector<EntryPos> parse_entries(const std::vector<unsigned char>& b) {
  std::vector<EntryPos> out;
  size_t at = 128;
  const uint32_t n = get<uint32_t>(b, 76);
  for (uint32_t i = 0; i < n; ++i) {
    EntryPos e;
    e.name_len = at;
    const uint16_t len = get<uint16_t>(b, at);
    e.name = at + 2;
    e.name_str.assign(reinterpret_cast<const char*>(&b[e.name]), len);
    e.dtype = e.name + len;
    e.n_dims = e.dtype + 1;
    e.shape = e.n_dims + 1;
    e.offset = e.shape + 8 * b[e.n_dims];
    e.size = e.offset + 8;
    e.crc = e.size + 8;
    e.end = e.crc + 4;
    at = e.end;
    out.push_back(e);
  }
  return out;
}
inline const EntryPos& entry(const std::vector<EntryPos>& entries, const std::string& name) {
  for (const auto& e : entries)
    if (e.name_str == name) return e;
  FAIL("no entry " << name);
  return entries.front();
}

// Recomputes header_crc32 (bytes [0, 104) + the directory) so a patched field reaches its own check.
inline void reseal(std::vector<unsigned char>& b) {
  const uint64_t dir_size = get<uint64_t>(b, 88);
  if (dir_size > b.size() - 128) return;
  put<uint32_t>(b, 104, crc32(&b[128], dir_size, crc32(b.data(), 104)));
}

// Loads `path` and checks that it throws sqrtdk::Error of kind bad_file whose message names the file and contains
// every part.
inline void expect_load_error(const std::string& path, std::initializer_list<std::string> parts,
                              const LoadOptions& options = {}) {
  std::string message;
  ErrorKind kind = ErrorKind::internal;
  try {
    WeightFile::open(path, options);
  } catch (const Error& e) {
    message = e.what();
    kind = e.kind();
  }
  INFO("message: " << message);
  REQUIRE_MESSAGE(!message.empty(), "loading " << path << " did not throw");
  CHECK_MESSAGE(kind == ErrorKind::bad_file, "kind " << error_kind_name(kind));
  CHECK(message.find(path) != std::string::npos);
  CHECK(message.find('\n') == std::string::npos);  // one line
  for (const auto& p : parts) CHECK_MESSAGE(message.find(p) != std::string::npos, "missing '" << p << "'");
}

}  // namespace sqrtdk::test
