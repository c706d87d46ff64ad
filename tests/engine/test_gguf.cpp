// GGUF import (engine/src/import/gguf.h, <sqrtdk/convert.h> convert_gguf): the committed fixtures in tests/data/gguf/
// (written by tools/gguf_writer.py from the golden Hugging Face checkpoints) converted and compared with the same
// weights converted from safetensors: F32 bit-identical, F16 within f16 rounding, Q8_0 within the Q8_0 rounding bound;
// the llama q/k unpermute (golden and negative control); hostile files; the tokenizer metadata; the CLI dispatch.
#include <doctest/doctest.h>

#include <sqrtdk/error.h>
#include <sqrtdk/format.h>
#include <sqrtdk/model.h>
#include <sqrtdk/session.h>
#include <sqrtdk/tokenizer.h>

#include <sqrtdk/convert.h>
#include "engine/src/import/gguf.h"
#include "tests/common/files.h"
#include "tests/common/golden.h"
#include "tests/common/npy.h"
#include "tests/engine/test_format_util.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <sys/wait.h>

namespace sqrtdk::test {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string gguf_fixture(const std::string& name) { return std::string(SQRTDK_TEST_DATA_DIR) + "/gguf/" + name; }

std::vector<float> prefill_all(const std::string& model_path, const std::vector<uint32_t>& tokens) {
  Session session(Model::load(model_path));
  const auto logits = session.prefill(tokens, true);
  return {logits.begin(), logits.end()};
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(double{a[i]} - double{b[i]}));
  return m;
}

double max_abs(const std::vector<float>& a) {
  double m = 0;
  for (float x : a) m = std::max(m, std::fabs(double{x}));
  return m;
}

struct Golden {
  std::vector<uint32_t> prompt;
  NpyF32 logits;
  double tolerance = 0;  // the fixture's bound: 1e-4 x max |logit| (fixture.json "tolerance.why")
};

Golden load_golden(const std::string& name) {
  const json fixture = read_json(golden_dir(name) + "/fixture.json");
  return {fixture["prompt"].get<std::vector<uint32_t>>(),
          read_npy_f32(golden_dir(name) + "/" + fixture["files"]["logits"].get<std::string>()),
          fixture["tolerance"]["logits_max_abs"].get<double>()};
}

void expect_error(const std::function<void()>& fn, std::initializer_list<const char*> parts) {
  try {
    fn();
    FAIL("no error; expected one containing: " << *parts.begin());
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const char* part : parts) CHECK_MESSAGE(msg.find(part) != std::string::npos, msg << "  (wanted: " << part << ")");
  }
}

// ---- a GGUF file builder, for hostile and tokenizer cases ----

void put_u32(std::vector<unsigned char>& b, uint32_t v) { b.insert(b.end(), (unsigned char*)&v, (unsigned char*)&v + 4); }
void put_u64(std::vector<unsigned char>& b, uint64_t v) { b.insert(b.end(), (unsigned char*)&v, (unsigned char*)&v + 8); }
void put_str(std::vector<unsigned char>& b, const std::string& s) {
  put_u64(b, s.size());
  b.insert(b.end(), s.begin(), s.end());
}

struct Builder {
  struct Kv {
    std::string key;
    uint32_t type;
    std::vector<unsigned char> value;  // encoded value (for arrays: element type, count, elements)
  };
  struct Tensor {
    std::string name;
    std::vector<uint64_t> ne;
    uint32_t type;
    std::vector<unsigned char> data;
    std::optional<uint64_t> offset;  // relative; default: packed, aligned
  };
  uint32_t version = 3;
  std::vector<Kv> kvs;
  std::vector<Tensor> tensors;
  // Where each section ends in the last build(): header, each KV, each tensor info, the data section start.
  std::vector<size_t> boundaries;

  static Builder from(const GgufFile& f) {
    Builder b;
    for (const auto& kv : f.kvs()) {
      std::vector<unsigned char> v;
      if (kv.value.type == GgufValueType::array) {
        put_u32(v, static_cast<uint32_t>(kv.value.element_type));
        put_u64(v, kv.value.count);
      } else if (kv.value.type == GgufValueType::string) {
        put_u64(v, kv.value.size);
      }
      v.insert(v.end(), kv.value.data, kv.value.data + kv.value.size);
      b.kvs.push_back({kv.key, static_cast<uint32_t>(kv.value.type), v});
    }
    for (const auto& t : f.tensors()) {
      std::vector<unsigned char> data(t.size);
      f.read(t.offset, t.size, data.data());
      b.tensors.push_back({t.name, t.ne, t.type, data, std::nullopt});
    }
    return b;
  }
  Kv* kv(const std::string& key) {
    for (auto& k : kvs)
      if (k.key == key) return &k;
    return nullptr;
  }
  Tensor* tensor(const std::string& name) {
    for (auto& t : tensors)
      if (t.name == name) return &t;
    return nullptr;
  }
  void erase_kv(const std::string& key) {
    kvs.erase(std::remove_if(kvs.begin(), kvs.end(), [&](const Kv& k) { return k.key == key; }), kvs.end());
  }
  void set_u32(const std::string& key, uint32_t v) { set(key, 4, [&](auto& b) { put_u32(b, v); }); }
  void set_f32(const std::string& key, float v) {
    set(key, 6, [&](auto& b) { b.insert(b.end(), (unsigned char*)&v, (unsigned char*)&v + 4); });
  }
  void set_bool(const std::string& key, bool v) { set(key, 7, [&](auto& b) { b.push_back(v ? 1 : 0); }); }
  void set_str(const std::string& key, const std::string& v) { set(key, 8, [&](auto& b) { put_str(b, v); }); }
  void set_strs(const std::string& key, const std::vector<std::string>& v) {
    set(key, 9, [&](auto& b) {
      put_u32(b, 8);
      put_u64(b, v.size());
      for (const auto& s : v) put_str(b, s);
    });
  }
  void set_i32s(const std::string& key, const std::vector<int32_t>& v) {
    set(key, 9, [&](auto& b) {
      put_u32(b, 5);
      put_u64(b, v.size());
      for (int32_t x : v) put_u32(b, static_cast<uint32_t>(x));
    });
  }
  void set_f32s(const std::string& key, const std::vector<float>& v) {
    set(key, 9, [&](auto& b) {
      put_u32(b, 6);
      put_u64(b, v.size());
      for (float x : v) b.insert(b.end(), (unsigned char*)&x, (unsigned char*)&x + 4);
    });
  }
  void set(const std::string& key, uint32_t type, const std::function<void(std::vector<unsigned char>&)>& fill) {
    erase_kv(key);
    kvs.push_back({key, type, {}});
    fill(kvs.back().value);
  }

  std::vector<unsigned char> build(uint32_t alignment = 32) {
    std::vector<unsigned char> b = {'G', 'G', 'U', 'F'};
    boundaries.clear();
    put_u32(b, version);
    put_u64(b, tensors.size());
    put_u64(b, kvs.size());
    boundaries.push_back(b.size());
    for (const auto& kv : kvs) {
      put_str(b, kv.key);
      put_u32(b, kv.type);
      b.insert(b.end(), kv.value.begin(), kv.value.end());
      boundaries.push_back(b.size());
    }
    uint64_t offset = 0;
    std::vector<uint64_t> offsets;
    for (const auto& t : tensors) {
      put_str(b, t.name);
      put_u32(b, static_cast<uint32_t>(t.ne.size()));
      for (uint64_t d : t.ne) put_u64(b, d);
      put_u32(b, t.type);
      // A tensor with its own offset (a hostile one) gets no data and moves no other tensor.
      put_u64(b, t.offset.value_or(offset));
      offsets.push_back(t.offset ? UINT64_MAX : offset);
      if (!t.offset) offset = (offset + t.data.size() + alignment - 1) / alignment * alignment;
      boundaries.push_back(b.size());
    }
    b.resize((b.size() + alignment - 1) / alignment * alignment, 0);
    const size_t data_start = b.size();
    boundaries.push_back(data_start);
    for (size_t i = 0; i < tensors.size(); ++i) {
      const auto& d = tensors[i].data;
      if (offsets[i] == UINT64_MAX) continue;
      if (b.size() < data_start + offsets[i] + d.size()) b.resize(data_start + offsets[i] + d.size(), 0);
      std::copy(d.begin(), d.end(), b.begin() + static_cast<std::ptrdiff_t>(data_start + offsets[i]));
      boundaries.push_back(data_start + offsets[i] + d.size());
    }
    return b;
  }
};

// Parses and plans (config, tensors, tokenizer) the bytes: everything convert_gguf checks before writing.
void parse_and_plan(const std::vector<unsigned char>& bytes) {
  const auto f = GgufFile::parse(bytes.data(), bytes.size(), "t.gguf");
  const ModelConfig c = gguf_model_config(*f);
  plan_gguf_tensors(*f, c);
  if (gguf_has_tokenizer(*f)) tokenizer_spec_from_gguf(*f, "t.gguf");
}

void expect_plan_error(const std::vector<unsigned char>& bytes, std::initializer_list<const char*> parts) {
  expect_error([&] { parse_and_plan(bytes); }, parts);
  try {
    parse_and_plan(bytes);
  } catch (const Error& e) {
    CHECK_MESSAGE(std::string(e.what()).rfind("t.gguf: ", 0) == 0, e.what());
  }
}

Builder fixture_builder(const std::string& name) {
  const auto f = GgufFile::open(gguf_fixture(name));
  return Builder::from(*f);
}

}  // namespace

TEST_CASE("gguf: F32 fixtures convert to the same .sqdk bytes as the safetensors, so the same logits") {
  // llama_gqa (GQA: k is permuted with 2 heads, q with 8; tied), llama_mha (untied: output.weight), gpt2 (Conv1D
  // weights stored transposed, biases, position_embd). llama_mha's HF weights are f16, so its F16 GGUF is lossless too.
  for (const auto& pair : std::vector<std::pair<std::string, std::string>>{
           {"llama_gqa-f32.gguf", "llama_gqa"}, {"gpt2-f32.gguf", "gpt2"}, {"llama_mha-f16.gguf", "llama_mha"}}) {
    const std::string& gguf = pair.first;  // (not a structured binding: clang 14 cannot capture those in CAPTURE)
    const std::string& golden = pair.second;
    CAPTURE(gguf);
    TempDir dir;
    ConvertOptions f32;
    f32.dtype = DType::f32;
    const ConvertResult r = convert_gguf(gguf_fixture(gguf), dir.file("g.sqdk"));
    CHECK(r.dtype == DType::f32);  // F32 everywhere, or F16 weights with F32 norms: mixed -> f32
    convert_hf_checkpoint(golden_dir(golden) + "/hf", dir.file("h.sqdk"), f32);
    CHECK(read_bytes(dir.file("g.sqdk")) == read_bytes(dir.file("h.sqdk")));
    const Golden g = load_golden(golden);
    const double err = max_abs_diff(prefill_all(dir.file("g.sqdk"), g.prompt), g.logits.data);
    CHECK_MESSAGE(err <= g.tolerance, "max abs error vs PyTorch " << err << " > " << g.tolerance);
  }
}

TEST_CASE("gguf: llama q/k unpermute - the golden logits, and the negative control without it") {
  const Golden g = load_golden("llama_gqa");
  TempDir dir;
  convert_gguf(gguf_fixture("llama_gqa-f32.gguf"), dir.file("ok.sqdk"));
  const double ok = max_abs_diff(prefill_all(dir.file("ok.sqdk"), g.prompt), g.logits.data);
  CHECK(ok <= g.tolerance);
  // Rows left in llama.cpp's order but run as rotate-half: a different model.
  convert_gguf_with(gguf_fixture("llama_gqa-f32.gguf"), dir.file("raw.sqdk"), {}, {.unpermute_qk = false});
  const double raw = max_abs_diff(prefill_all(dir.file("raw.sqdk"), g.prompt), g.logits.data);
  MESSAGE("unpermuted: " << ok << ", rows left permuted: " << raw << " (bound " << g.tolerance << ")");
  CHECK(raw > 100 * g.tolerance);
  // llama.cpp's order is Meta's interleaved-pairs layout: flagged as such, the permuted rows compute the same model.
  convert_gguf_with(gguf_fixture("llama_gqa-f32.gguf"), dir.file("inter.sqdk"), {},
                    {.unpermute_qk = false, .interleaved_rope = true});
  CHECK(WeightFile::open(dir.file("inter.sqdk"))->config().rope_interleaved);
  CHECK(max_abs_diff(prefill_all(dir.file("inter.sqdk"), g.prompt), g.logits.data) <= g.tolerance);
  // The row map itself, for one head of 8 rows: GGUF rows are (0, 4, 1, 5, 2, 6, 3, 7) of the HF head.
  const uint64_t expected[] = {0, 2, 4, 6, 1, 3, 5, 7};  // HF row r lives at GGUF row expected[r]
  for (uint64_t r = 0; r < 8; ++r) CHECK(gguf_rope_source_row(r, 8) == expected[r]);
  CHECK(gguf_rope_source_row(8 + 5, 8) == 8 + 3);
}

TEST_CASE("gguf: F16 fixture from bf16 weights is within f16 rounding of the safetensors") {
  TempDir dir;
  convert_gguf(gguf_fixture("llama_gqa-f16.gguf"), dir.file("g.sqdk"));
  ConvertOptions f32;
  f32.dtype = DType::f32;
  convert_hf_checkpoint(golden_dir("llama_gqa") + "/hf", dir.file("h.sqdk"), f32);
  const auto got = read_all_f32(dir.file("g.sqdk")), want = read_all_f32(dir.file("h.sqdk"));
  REQUIRE(got.size() == want.size());
  size_t changed = 0;
  for (size_t t = 0; t < got.size(); ++t) {
    CAPTURE(got[t].first);
    REQUIRE(got[t].first == want[t].first);
    for (size_t i = 0; i < got[t].second.size(); ++i) {
      const double w = want[t].second[i], d = std::fabs(double{got[t].second[i]} - w);
      // Round to nearest f16: half an ulp, 2^-11 relative for normals, 2^-25 absolute in the subnormal range.
      CHECK(d <= std::max(std::ldexp(std::fabs(w), -11), std::ldexp(1.0, -25)));
      changed += d != 0;
    }
  }
  MESSAGE(changed << " weights moved by the f16 rounding");
  // Logits: bf16 weights have 8 significant bits, f16 has 11, so only weights below f16's normal range (2^-14) can
  // move, by at most 2^-25 each: far below the fixture's bound (1e-4 x max |logit|).
  const Golden g = load_golden("llama_gqa");
  CHECK(max_abs_diff(prefill_all(dir.file("g.sqdk"), g.prompt), g.logits.data) <= g.tolerance);
}

TEST_CASE("gguf: Q8_0 fixture is within the Q8_0 rounding bound, weight by weight and in the logits") {
  TempDir dir;
  ConvertOptions f32;
  f32.dtype = DType::f32;  // dequantized (the default, q8, copies the blocks: tests/engine/test_format_q8.cpp)
  const ConvertResult r = convert_gguf(gguf_fixture("llama_gqa-q8_0.gguf"), dir.file("g.sqdk"), f32);
  CHECK(r.dtype == DType::f32);
  convert_hf_checkpoint(golden_dir("llama_gqa") + "/hf", dir.file("h.sqdk"), f32);
  const auto got = read_all_f32(dir.file("g.sqdk")), want = read_all_f32(dir.file("h.sqdk"));
  const auto file = WeightFile::open(dir.file("h.sqdk"));
  for (size_t t = 0; t < got.size(); ++t) {
    CAPTURE(got[t].first);
    const auto& shape = file->tensors()[t].shape;
    if (shape.size() == 1) {  // norms stay F32 in GGUF: exact
      CHECK(got[t].second == want[t].second);
      continue;
    }
    // Per block of 32 along a row: d = amax / 127, q = round(x / d), stored d16 = f16(d); the value d16 * q is off
    // by at most d/2 (rounding q) + 127 |d - d16| (rounding d: 2^-11 d for a normal f16, 2^-25 below 2^-14), plus
    // f32 rounding (2^-23 relative, slack factor 1e-6).
    const auto& w = want[t].second;
    for (size_t b0 = 0; b0 < w.size(); b0 += 32) {
      double amax = 0;
      for (size_t i = b0; i < b0 + 32; ++i) amax = std::max(amax, std::fabs(double{w[i]}));
      const double d = amax / 127;
      const double bound = (d / 2 + 127 * std::max(std::ldexp(d, -11), std::ldexp(1.0, -25))) * (1 + 1e-6);
      for (size_t i = b0; i < b0 + 32; ++i) CHECK(std::fabs(double{got[t].second[i]} - w[i]) <= bound);
    }
  }
  // Logits: each quantized weight moves by at most (0.5/127 + 2^-11) = 0.44% of its block's max |w|. To first order
  // every quantized matmul on the path (2 blocks x q, k, v, out, gate, up, down, and the tied head: 15) adds at most
  // that relative error to what it feeds forward, so the logits move by at most 15 x 0.44% = 6.6% of max |logit|.
  // (A worst case: the errors are independent roundings and mostly cancel; measured below.)
  const Golden g = load_golden("llama_gqa");
  const std::vector<float> logits = prefill_all(dir.file("g.sqdk"), g.prompt);
  const double err = max_abs_diff(logits, g.logits.data), bound = 15 * (0.5 / 127 + std::ldexp(1.0, -11)) * max_abs(g.logits.data);
  MESSAGE("Q8_0 logits: max abs error " << err << ", bound " << bound);
  CHECK(err <= bound);
  // --dtype: the dequantized values narrowed once more.
  ConvertOptions bf16;
  bf16.dtype = DType::bf16;
  CHECK(convert_gguf(gguf_fixture("llama_gqa-q8_0.gguf"), dir.file("b.sqdk"), bf16).dtype == DType::bf16);
  CHECK(WeightFile::open(dir.file("b.sqdk"))->tensors()[0].dtype == DType::bf16);
}

TEST_CASE("gguf: hostile headers, metadata and tensor infos are errors naming the key or tensor") {
  Builder base = fixture_builder("llama_gqa-q8_0.gguf");
  CHECK_NOTHROW(parse_and_plan(base.build()));
  auto with = [&](const std::function<void(Builder&)>& edit) {
    Builder b = base;
    edit(b);
    return b.build();
  };
  auto raw = [&](const std::function<void(std::vector<unsigned char>&)>& edit) {
    std::vector<unsigned char> bytes = base.build();
    edit(bytes);
    return bytes;
  };
  // Header.
  expect_plan_error({}, {"not a GGUF file"});
  expect_plan_error(raw([](auto& b) { b[0] = 'X'; }), {"not a GGUF file"});
  expect_plan_error(with([](Builder& b) { b.version = 1; }), {"version 1 (expected 2 or 3"});
  expect_plan_error(with([](Builder& b) { b.version = 4; }), {"version 4"});
  expect_plan_error(with([](Builder& b) { b.version = 0x03000000; }), {"big-endian"});
  CHECK_NOTHROW(parse_and_plan(with([](Builder& b) { b.version = 2; })));
  const uint64_t huge[] = {UINT64_MAX, uint64_t{1} << 40, 100000};
  for (uint64_t n : huge) {
    CAPTURE(n);
    expect_plan_error(raw([&](auto& b) { std::memcpy(b.data() + 8, &n, 8); }), {"header: n_tensors", "cannot fit"});
    expect_plan_error(raw([&](auto& b) { std::memcpy(b.data() + 16, &n, 8); }), {"header: n_kv", "cannot fit"});
  }
  // Strings and arrays whose length runs past the end.
  expect_plan_error(raw([](auto& b) { const uint64_t n = UINT64_MAX - 3; std::memcpy(b.data() + 24, &n, 8); }),
                    {"key #0", "length"});
  expect_plan_error(with([](Builder& b) { b.set("general.name", 8, [](auto& v) { put_u64(v, uint64_t{1} << 50); }); }),
                    {"key 'general.name': string", "the file ends"});
  expect_plan_error(with([](Builder& b) {
                      b.set("x.strings", 9, [](auto& v) { put_u32(v, 8); put_u64(v, UINT64_MAX); });
                    }),
                    {"key 'x.strings': array of 18446744073709551615 strings cannot fit"});
  expect_plan_error(with([](Builder& b) {
                      b.set("x.ints", 9, [](auto& v) { put_u32(v, 4); put_u64(v, uint64_t{1} << 62); });
                    }),
                    {"key 'x.ints': array of 4611686018427387904 u32 cannot fit"});
  expect_plan_error(with([](Builder& b) { b.set("x.nested", 9, [](auto& v) { put_u32(v, 9); put_u64(v, 1); }); }),
                    {"key 'x.nested'", "arrays of arrays"});
  expect_plan_error(with([](Builder& b) { b.set("x.bad", 13, [](auto& v) { put_u32(v, 0); }); }),
                    {"key 'x.bad': unknown value type 13"});
  expect_plan_error(with([](Builder& b) { b.set_u32("general.name", 1); b.kvs.push_back(b.kvs.back()); }),
                    {"key 'general.name' appears twice"});
  // Metadata: missing, wrong type, wrong value.
  expect_plan_error(with([](Builder& b) { b.erase_kv("llama.block_count"); }),
                    {"key 'llama.block_count' is missing"});
  expect_plan_error(with([](Builder& b) { b.erase_kv("general.architecture"); }),
                    {"key 'general.architecture' is missing"});
  expect_plan_error(with([](Builder& b) { b.set_str("llama.block_count", "2"); }),
                    {"key 'llama.block_count': type string (expected an integer)"});
  expect_plan_error(with([](Builder& b) { b.set_u32("llama.attention.layer_norm_rms_epsilon", 1); }),
                    {"key 'llama.attention.layer_norm_rms_epsilon': type u32 (expected f32 or f64)"});
  expect_plan_error(with([](Builder& b) { b.set_u32("llama.embedding_length", 0); }),
                    {"key 'llama.embedding_length': 0"});
  expect_plan_error(with([](Builder& b) { b.set_u32("llama.rope.dimension_count", 4); }),
                    {"key 'llama.rope.dimension_count': 4 differs from head_dim 8"});
  expect_plan_error(with([](Builder& b) { b.set_u32("llama.attention.head_count_kv", 3); }),
                    {"n_kv_heads 3 does not divide n_heads 8"});
  expect_plan_error(with([](Builder& b) { b.set_f32("llama.rope.freq_base", INFINITY); }),
                    {"key 'llama.rope.freq_base'", "finite"});
  expect_plan_error(with([](Builder& b) { b.set_u32("general.alignment", 24); }),
                    {"key 'general.alignment': 24 is not a power of two"});
  expect_plan_error(with([](Builder& b) { b.set_str("general.alignment", "32"); }),
                    {"key 'general.alignment': type string (expected u32)"});
  expect_plan_error(with([](Builder& b) { b.set_u32("llama.feed_forward_length", 96); }),
                    {"tensor 'blk.0.ffn_gate.weight': ne [64, 128], expected [64, 96]"});
  // Tensor infos.
  expect_plan_error(with([](Builder& b) { b.tensor("blk.1.attn_v.weight")->type = 77; }),
                    {"tensor 'blk.1.attn_v.weight': unknown ggml type 77"});
  expect_plan_error(with([](Builder& b) { b.tensor("output_norm.weight")->ne = {0}; }),
                    {"tensor 'output_norm.weight': dimensions [0] include 0"});
  expect_plan_error(with([](Builder& b) { b.tensor("output_norm.weight")->ne = {1, 2, 3, 4, 5}; }),
                    {"tensor 'output_norm.weight': n_dims 5"});
  expect_plan_error(with([](Builder& b) { b.tensor("output_norm.weight")->ne = {uint64_t{1} << 32, uint64_t{1} << 32, 2}; }),
                    {"tensor 'output_norm.weight'", "element count overflows"});
  expect_plan_error(with([](Builder& b) { b.tensor("output_norm.weight")->ne = {uint64_t{1} << 62, 2}; }),
                    {"tensor 'output_norm.weight'", "byte size overflows"});
  expect_plan_error(with([](Builder& b) { b.tensor("blk.0.attn_q.weight")->ne = {48, 64}; }),
                    {"tensor 'blk.0.attn_q.weight': row of 48 elements is not a whole number of Q8_0 blocks"});
  expect_plan_error(with([](Builder& b) { b.tensor("blk.0.attn_q.weight")->offset = 1u << 30; }),
                    {"tensor 'blk.0.attn_q.weight': data", "runs past the data section"});
  expect_plan_error(with([](Builder& b) { b.tensor("blk.0.attn_q.weight")->offset = UINT64_MAX - 31; }),
                    {"tensor 'blk.0.attn_q.weight'", "runs past"});
  expect_plan_error(with([](Builder& b) { b.tensor("blk.0.attn_q.weight")->offset = 8; }),
                    {"tensor 'blk.0.attn_q.weight': offset 8 is not a multiple of the alignment 32"});
  expect_plan_error(with([](Builder& b) { b.tensor("blk.0.attn_k.weight")->offset = 0; }), {"overlap"});
  expect_plan_error(with([](Builder& b) { b.tensors.push_back(b.tensors[0]); }),
                    {"tensor 'token_embd.weight' appears twice"});
  expect_plan_error(with([](Builder& b) { b.tensor("output_norm.weight")->name = ""; }), {"empty name"});
  // The tensor set.
  expect_plan_error(with([](Builder& b) { b.tensors.pop_back(); }), {"tensor 'output_norm.weight' is missing"});
  expect_plan_error(with([](Builder& b) {
                      b.tensors.push_back({"blk.0.attn_q.bias", {64}, 0, std::vector<unsigned char>(256), std::nullopt});
                    }),
                    {"tensor 'blk.0.attn_q.bias': is not used by llama"});
}

TEST_CASE("gguf: unsupported architectures, tensor types and features are refused by name") {
  Builder base = fixture_builder("llama_gqa-f32.gguf");
  auto with = [&](const std::function<void(Builder&)>& edit) {
    Builder b = base;
    edit(b);
    return b.build();
  };
  for (const char* arch : {"qwen2", "falcon", "mamba"}) {
    CAPTURE(arch);
    expect_plan_error(with([&](Builder& b) { b.set_str("general.architecture", arch); }),
                      {"key 'general.architecture': architecture", "is not supported", "llama, gpt2"});
  }
  expect_plan_error(with([&](Builder& b) { b.set_str("general.architecture", "qwen2"); }), {"q/k/v biases"});
  expect_plan_error(with([](Builder& b) {  // a Q4_K tensor of the right size: laid out fine, refused by name
                      auto* t = b.tensor("blk.0.ffn_down.weight");  // ne [128, 64]: 64 rows of 128 -> pad to 256
                      t->type = 12;
                      t->ne = {256, 32};
                      t->data.assign(32 * 144, 0);
                    }),
                    {"tensor 'blk.0.ffn_down.weight': type Q4_K (12) is not supported"});
  expect_plan_error(with([](Builder& b) { b.set_str("llama.rope.scaling.type", "yarn"); }),
                    {"key 'llama.rope.scaling.type'", "'yarn' RoPE scaling is not supported"});
  expect_plan_error(with([](Builder& b) { b.set_u32("llama.expert_count", 8); }), {"mixture-of-experts"});
  expect_plan_error(with([](Builder& b) {
                      b.tensors.push_back({"rope_freqs.weight", {4}, 0, std::vector<unsigned char>(16), std::nullopt});
                    }),
                    {"tensor 'rope_freqs.weight'", "not supported"});
  // A BF16 tensor is converted (all 2-D tensors BF16 here; norms F32: output f32 by default).
  CHECK_NOTHROW(parse_and_plan(with([](Builder& b) {
    auto* t = b.tensor("blk.0.ffn_up.weight");
    std::vector<unsigned char> bf(t->data.size() / 2);
    for (size_t i = 0; i < bf.size() / 2; ++i) std::memcpy(&bf[2 * i], &t->data[4 * i + 2], 2);
    t->data = bf;
    t->type = 30;
  })));
}

TEST_CASE("gguf: every truncation at and around each section boundary is an error, never a crash") {
  Builder b = fixture_builder("gpt2-f32.gguf");
  const std::vector<unsigned char> bytes = b.build();
  CHECK_NOTHROW(parse_and_plan(bytes));
  std::vector<size_t> cuts;
  for (size_t at : b.boundaries)
    for (size_t n = at > 9 ? at - 9 : 0; n <= at + 9 && n < bytes.size(); ++n) cuts.push_back(n);
  for (size_t n = 0; n < b.boundaries.front() + 64; ++n) cuts.push_back(n);
  for (size_t n : cuts) {
    CAPTURE(n);
    std::vector<unsigned char> cut(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(n));
    CHECK_THROWS_AS(parse_and_plan(cut), Error);
  }
  // Random byte damage in the metadata and tensor infos: each is an Error or a valid parse, never anything else.
  uint64_t state = 20261130;
  int errors = 0;
  const size_t meta_end = b.boundaries[b.boundaries.size() - b.tensors.size() - 1];
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<unsigned char> damaged = bytes;
    for (int k = 0; k < 3; ++k) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      damaged[(state >> 33) % meta_end] = static_cast<unsigned char>(state >> 20);
    }
    try {
      parse_and_plan(damaged);
    } catch (const Error&) {
      ++errors;
    }
  }
  CHECK(errors > 200);
  // Through the file API: an empty file, a missing one, a folder.
  TempDir dir;
  write_bytes(dir.file("empty.gguf"), {});
  CHECK_THROWS_WITH_AS(GgufFile::open(dir.file("empty.gguf")), doctest::Contains("not a GGUF file"), Error);
  CHECK_THROWS_WITH_AS(GgufFile::open(dir.file("none.gguf")), doctest::Contains("cannot open"), Error);
  CHECK_THROWS_WITH_AS(GgufFile::open(dir.path().string()), doctest::Contains("not a regular file"), Error);
}

TEST_CASE("gguf: tokenizer metadata becomes a TokenizerSpec") {
  Builder base = fixture_builder("llama_gqa-f32.gguf");  // n_vocab 96: the token lists below have 96 entries
  SUBCASE("gpt2: byte-level BPE with merges, added tokens and the pre-tokenizer regex") {
    std::vector<std::string> tokens;
    std::vector<int32_t> types(96, 1);
    for (int i = 0; i < 90; ++i) tokens.push_back(std::string(1, static_cast<char>('!' + i)));
    tokens.push_back("ab");
    tokens.push_back("abc");
    tokens.push_back("<|endoftext|>");
    tokens.push_back("<|im_start|>");
    tokens.push_back("<|im_end|>");
    tokens.push_back("\n\n");
    types[92] = types[93] = types[94] = 3;
    types[95] = 4;
    Builder b = base;
    b.set_str("tokenizer.ggml.model", "gpt2");
    b.set_str("tokenizer.ggml.pre", "qwen2");
    b.set_strs("tokenizer.ggml.tokens", tokens);
    b.set_i32s("tokenizer.ggml.token_type", types);
    b.set_strs("tokenizer.ggml.merges", {"a b", "ab c"});
    b.set_u32("tokenizer.ggml.eos_token_id", 92);
    b.set_u32("tokenizer.ggml.eot_token_id", 94);
    b.set_bool("tokenizer.ggml.add_bos_token", false);
    const auto bytes = b.build();
    const auto f = GgufFile::parse(bytes.data(), bytes.size(), "t.gguf");
    const TokenizerSpec s = tokenizer_spec_from_gguf(*f, "t.gguf");
    CHECK(s.style == TokenizerStyle::byte_level_bpe);
    CHECK(s.nfc);
    CHECK_FALSE(s.ignore_merges);
    CHECK(s.split_regex.find(R"(\p{N}|)") != std::string::npos);
    REQUIRE(s.merges.size() == 2);
    CHECK(s.merges[0] == std::pair<uint32_t, uint32_t>('a' - '!', 'b' - '!'));
    CHECK(s.merges[1] == std::pair<uint32_t, uint32_t>(90, 'c' - '!'));
    REQUIRE(s.added.size() == 4);
    CHECK(s.added[0].id == 92);
    CHECK(s.added[0].content == "<|endoftext|>");
    CHECK(s.added[0].special);
    CHECK_FALSE(s.added[3].special);  // user-defined
    CHECK(s.vocab[92].empty());
    CHECK(s.eos_id == 92);
    CHECK(s.end_of_turn_ids == std::vector<uint32_t>{94});
    CHECK_FALSE(s.add_bos);
    CHECK(gguf_model_config(*f).eos_id == 92);

    // Converted: the tokenizer section holds the spec, and the config says bpe with the same EOS. The chat template
    // is recognised (tests/data/chat/templates/chatml.jinja) and its <|im_end|> stops generation.
    {
      Builder chat = b;
      std::ifstream jinja(std::string(SQRTDK_TEST_DATA_DIR) + "/chat/templates/chatml.jinja");
      chat.set_str("tokenizer.chat_template", std::string(std::istreambuf_iterator<char>(jinja), {}));
      chat.erase_kv("tokenizer.ggml.eot_token_id");
      TempDir dir;
      write_bytes(dir.file("tok.gguf"), chat.build());
      convert_gguf(dir.file("tok.gguf"), dir.file("tok.sqdk"));
      const auto file = WeightFile::open(dir.file("tok.sqdk"));
      CHECK(file->config().tokenizer == TokenizerKind::bpe);
      CHECK(file->config().eos_id == 92);
      REQUIRE(file->tokenizer() != nullptr);
      CHECK(file->tokenizer()->merges == s.merges);
      CHECK(file->tokenizer()->added.size() == 4);
      CHECK(file->tokenizer()->chat_template == ChatTemplateKind::chatml);
      CHECK(file->tokenizer()->end_of_turn_ids == std::vector<uint32_t>{94});
    }

    Builder bad = b;
    bad.set_str("tokenizer.ggml.pre", "deepseek-coder");
    expect_plan_error(bad.build(), {"key 'tokenizer.ggml.pre': pre-tokenizer 'deepseek-coder' is not supported"});
    bad = b;
    bad.set_strs("tokenizer.ggml.merges", {"a b", "abc"});
    expect_plan_error(bad.build(), {"key 'tokenizer.ggml.merges': merge #1 'abc'"});
    bad = b;
    bad.set_i32s("tokenizer.ggml.token_type", std::vector<int32_t>(95, 1));
    expect_plan_error(bad.build(), {"key 'tokenizer.ggml.token_type': 95 types for 96 tokens"});
    bad = b;
    bad.set_u32("tokenizer.ggml.eos_token_id", 96);
    expect_plan_error(bad.build(), {"key 'tokenizer.ggml.eos_token_id': 96 is not a token id"});
    bad = b;
    bad.set_str("tokenizer.ggml.model", "bert");
    expect_plan_error(bad.build(), {"key 'tokenizer.ggml.model': 'bert' is not supported"});
    bad = b;
    bad.set_strs("tokenizer.ggml.tokens", std::vector<std::string>(97, "x"));
    expect_plan_error(bad.build(), {"key 'llama.vocab_size': 96 is less than the 97 tokens"});
  }
  SUBCASE("llama: SentencePiece with scores, byte pieces and control tokens") {
    std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
    std::vector<int32_t> types = {2, 3, 3};
    for (int i = 0; i < 64; ++i) {
      char piece[8];
      std::snprintf(piece, sizeof piece, "<0x%02X>", i);
      tokens.push_back(piece);
      types.push_back(6);
    }
    for (const char* p : {"\xe2\x96\x81", "a", "b", "c", "\xe2\x96\x81" "a", "ab", "\xe2\x96\x81" "ab"}) {
      tokens.push_back(p);
      types.push_back(1);
    }
    while (tokens.size() < 96) {
      tokens.push_back("x" + std::to_string(tokens.size()));
      types.push_back(1);
    }
    std::vector<float> scores(96, -1000.0f);
    scores[71] = -1;  // ▁a
    scores[72] = -2;  // ab
    scores[73] = -3;  // ▁ab (= ▁a + b, or ▁ + ab)
    Builder b = base;
    b.set_str("tokenizer.ggml.model", "llama");
    b.set_strs("tokenizer.ggml.tokens", tokens);
    b.set_i32s("tokenizer.ggml.token_type", types);
    b.set_f32s("tokenizer.ggml.scores", scores);
    b.set_u32("tokenizer.ggml.bos_token_id", 1);
    b.set_u32("tokenizer.ggml.eos_token_id", 2);
    const auto bytes = b.build();
    const auto f = GgufFile::parse(bytes.data(), bytes.size(), "t.gguf");
    const TokenizerSpec s = tokenizer_spec_from_gguf(*f, "t.gguf");
    CHECK(s.style == TokenizerStyle::sentencepiece_bpe);
    CHECK(s.byte_fallback);
    CHECK(s.add_prefix_space);
    CHECK(s.add_bos);  // llama.cpp's default for SentencePiece
    CHECK(s.unk_id == 0);
    CHECK(s.bos_id == 1);
    CHECK(s.vocab[1] == "<s>");
    REQUIRE(s.added.size() == 3);  // <unk>, <s>, </s>: added tokens, as in Hugging Face's tokenizer.json
    CHECK(s.added[1].id == 1);
    CHECK(s.merges == sentencepiece_merges(tokens, scores));
    REQUIRE(s.merges.size() >= 3);
    CHECK(s.merges[0] == std::pair<uint32_t, uint32_t>(67, 68));  // ▁ + a: the best-scored piece first
    TempDir dir;
    write_bytes(dir.file("spm.gguf"), bytes);
    convert_gguf(dir.file("spm.gguf"), dir.file("spm.sqdk"));
    const auto file = WeightFile::open(dir.file("spm.sqdk"));
    REQUIRE(file->tokenizer() != nullptr);
    CHECK(file->tokenizer()->style == TokenizerStyle::sentencepiece_bpe);
    CHECK(file->tokenizer()->vocab == tokens);
    CHECK(file->config().bos_id == 1);

    Builder bad = b;
    bad.erase_kv("tokenizer.ggml.scores");
    expect_plan_error(bad.build(), {"key 'tokenizer.ggml.scores' is missing"});
    bad = b;
    bad.set_strs("tokenizer.ggml.scores", {"x"});
    expect_plan_error(bad.build(), {"key 'tokenizer.ggml.scores': array of string (expected f32 or f64)"});
  }
}

TEST_CASE("cli: sqrtdk convert takes a GGUF file by its magic, whatever its name") {
  TempDir dir;
  const std::string bin = std::string(SQRTDK_BIN_DIR) + "/sqrtdk";
  fs::copy_file(gguf_fixture("gpt2-f32.gguf"), dir.file("weights.bin"));
  auto run = [&](const std::string& input, const std::string& out) {
    const std::string cmd = "'" + bin + "' convert '" + input + "' -o '" + out + "' --quiet >'" + dir.file("out.txt") +
                            "' 2>'" + dir.file("err.txt") + "'";
    const int status = std::system(cmd.c_str());
    REQUIRE(WIFEXITED(status));
    return WEXITSTATUS(status);
  };
  CHECK(run(dir.file("weights.bin"), dir.file("m.sqdk")) == 0);
  CHECK(WeightFile::open(dir.file("m.sqdk"))->config().arch == Arch::gpt2);
  // A .gguf name on something else is not taken for GGUF.
  write_bytes(dir.file("fake.gguf"), {'G', 'G', 'M', 'L', 0, 0, 0, 0});
  CHECK(run(dir.file("fake.gguf"), dir.file("f.sqdk")) == 2);
  std::ifstream err(dir.file("err.txt"));
  const std::string text((std::istreambuf_iterator<char>(err)), std::istreambuf_iterator<char>());
  CHECK(text.find("not a .sqdk file (magic SQDK), a GGUF file (magic GGUF)") != std::string::npos);
  // A hostile GGUF: exit 2, one line naming the tensor.
  Builder b = fixture_builder("gpt2-f32.gguf");
  b.tensor("blk.1.ffn_up.weight")->type = 12;
  b.tensor("blk.1.ffn_up.weight")->ne = {256, 256};
  b.tensor("blk.1.ffn_up.weight")->data.assign(256 * 144, 0);
  write_bytes(dir.file("q4k.gguf"), b.build());
  CHECK(run(dir.file("q4k.gguf"), dir.file("q.sqdk")) == 2);
  std::ifstream err2(dir.file("err.txt"));
  const std::string text2((std::istreambuf_iterator<char>(err2)), std::istreambuf_iterator<char>());
  CHECK(std::count(text2.begin(), text2.end(), '\n') == 1);
  CHECK(text2.find("tensor 'blk.1.ffn_up.weight': type Q4_K (12) is not supported") != std::string::npos);
  CHECK_FALSE(fs::exists(dir.file("q.sqdk")));
}


TEST_CASE("gguf: Q8_0 imports as q8 block for block (no requantization), q/k rows unpermuted whole, and runs") {
  TempDir dir;
  // The fixture's blocks are llama.cpp's quantization, which requantizing would reproduce (max |q| = 127 in every
  // block): so that the comparison can tell a copy from a requantization, one block of attn_v gets q values no
  // quantizer of ours makes (all 1..32, scale kept): a valid Q8_0 block that requantizing would change.
  const std::string gguf = dir.file("patched.gguf");
  {
    auto bytes = read_bytes(gguf_fixture("llama_gqa-q8_0.gguf"));
    const auto orig = GgufFile::open(gguf_fixture("llama_gqa-q8_0.gguf"));
    const GgufTensor* v = orig->find_tensor("blk.0.attn_v.weight");
    REQUIRE(v != nullptr);
    REQUIRE(v->type == uint32_t(GgmlType::q8_0));
    for (int i = 0; i < 32; ++i) bytes[v->offset + 34 + 2 + i] = static_cast<unsigned char>(i + 1);  // block 1
    write_bytes(gguf, bytes);
  }
  const ConvertResult r = convert_gguf(gguf, dir.file("q.sqdk"));  // default: every linear weight is Q8_0 -> q8
  CHECK(r.dtype == DType::q8);
  const auto f = GgufFile::open(gguf);
  const auto out = WeightFile::open(dir.file("q.sqdk"));
  const std::vector<GgufPlannedTensor> plan = plan_gguf_tensors(*f, out->config());
  size_t n_blocks_compared = 0;
  for (const GgufPlannedTensor& p : plan) {
    CAPTURE(p.name);
    const TensorInfo& t = *out->find(p.name);
    if (p.source->type != uint32_t(GgmlType::q8_0)) {  // norms: F32 in the GGUF, f32 here
      CHECK(t.dtype == DType::f32);
      continue;
    }
    REQUIRE(t.dtype == DType::q8);
    REQUIRE(t.size == p.source->size);
    const uint64_t rows = p.source->n_rows(), row_bytes = p.source->row_bytes();
    const uint64_t head_dim = p.unpermute_heads ? rows / p.unpermute_heads : 0;
    std::vector<unsigned char> row(row_bytes);
    for (uint64_t i = 0; i < rows; ++i) {
      const uint64_t src_row = head_dim ? gguf_rope_source_row(i, head_dim) : i;
      f->read(p.source->offset + src_row * row_bytes, row_bytes, row.data());
      REQUIRE(std::memcmp(static_cast<const unsigned char*>(out->data(t)) + i * row_bytes, row.data(), row_bytes) == 0);
    }
    n_blocks_compared += t.size / 34;
  }
  MESSAGE(n_blocks_compared << " Q8_0 blocks equal byte for byte");
  CHECK(n_blocks_compared > 0);
  CHECK(out->find("tok_emb")->dtype == DType::q8);  // Q8_0 in the fixture (d_model is a multiple of 32)
  // The model runs its q8 layers natively. Bound: the dequantized import's (above: 15 x (0.5/127 + 2^-11) of max
  // |logit|) plus the q8 GEMM's rounding of each activation row to int8 (at most 0.5/127 of the row's max |a|, the
  // same first-order argument over the same 15 matmuls).
  // (The unpatched fixture: the patched block is another model.)
  const Golden g = load_golden("llama_gqa");
  convert_gguf(gguf_fixture("llama_gqa-q8_0.gguf"), dir.file("orig.sqdk"));
  const double err = max_abs_diff(prefill_all(dir.file("orig.sqdk"), g.prompt), g.logits.data);
  const double bound = 15 * (1.0 / 127 + std::ldexp(1.0, -11)) * max_abs(g.logits.data);
  MESSAGE("q8 (native) logits: max abs error " << err << ", bound " << bound);
  CHECK(err <= bound);
  // The embeddings and head in another type on request; the linear layers' blocks are still copied.
  ConvertOptions head_f32;
  head_f32.head_dtype = DType::f32;
  const ConvertResult r2 = convert_gguf(gguf, dir.file("h.sqdk"), head_f32);
  CHECK(r2.dtype == DType::q8);
  CHECK(r2.head_dtype == DType::f32);
  const auto h = WeightFile::open(dir.file("h.sqdk"));
  CHECK(h->find("tok_emb")->dtype == DType::f32);
  CHECK(h->find("blk.0.attn_v.weight")->dtype == DType::q8);
}

TEST_CASE("convert HF --dtype q8: linears and embeddings q8 from the f32 weights, norms f32, logits within bound") {
  TempDir dir;
  ConvertOptions f32, q8;
  f32.dtype = DType::f32;
  q8.dtype = DType::q8;
  const std::string hf = golden_dir("llama_gqa") + "/hf";
  convert_hf_checkpoint(hf, dir.file("f.sqdk"), f32);
  const ConvertResult r = convert_hf_checkpoint(hf, dir.file("q.sqdk"), q8);
  CHECK(r.dtype == DType::q8);
  CHECK(r.head_dtype == DType::q8);
  const auto f = WeightFile::open(dir.file("f.sqdk")), q = WeightFile::open(dir.file("q.sqdk"));
  REQUIRE(f->tensors().size() == q->tensors().size());
  for (size_t i = 0; i < f->tensors().size(); ++i) {
    const TensorInfo &a = f->tensors()[i], &b = q->tensors()[i];
    CAPTURE(a.name);
    if (a.shape.size() == 1) {
      CHECK(b.dtype == DType::f32);
      CHECK(std::memcmp(f->data(a), q->data(b), a.size) == 0);
      continue;
    }
    REQUIRE(b.dtype == DType::q8);
    std::vector<float> x(a.n_elements());
    f->read_f32(a, x.data());
    std::vector<ops::Q8Block> want(x.size() / 32);
    ops::quantize_row_q8(x.data(), x.size(), want.data());
    CHECK(std::memcmp(q->data(b), want.data(), b.size) == 0);  // chunked conversion = one quantization of the rows
  }
  // Bound as for the native Q8_0 import (same model, same 15 matmuls, same roundings).
  const Golden g = load_golden("llama_gqa");
  const double err = max_abs_diff(prefill_all(dir.file("q.sqdk"), g.prompt), g.logits.data);
  const double bound = 15 * (1.0 / 127 + std::ldexp(1.0, -11)) * max_abs(g.logits.data);
  MESSAGE("HF -> q8 logits: max abs error " << err << ", bound " << bound);
  CHECK(err <= bound);
}

}  // namespace sqrtdk::test
