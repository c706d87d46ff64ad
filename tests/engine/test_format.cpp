// The .sqdk format (engine/FORMAT.md): CRC-32 and f16/bf16 conversions, writer -> loader round trips for both
// families and every dtype, and one test per loader error, each checking that the message names the file, the
// tensor (where there is one) and what was expected.
#include "tests/engine/test_format_util.h"

#include "engine/src/format/format_internal.h"
#include "models/family.h"

#include <cmath>
#include <limits>
#include <random>

using namespace sqrtdk;
using namespace sqrtdk::test;

// ---------------------------------------------------------------- CRC-32, conversions

TEST_CASE("format: crc32 matches zlib on every path; combine joins pieces") {
  using format_detail::CrcPath;
  const char* check = "123456789";
  CHECK(crc32(check, 9) == 0xCBF43926u);  // the standard CRC-32/ISO-HDLC check value
  CHECK(crc32(nullptr, 0) == 0u);
  std::mt19937_64 rng(7);
  std::vector<unsigned char> buf(70000);
  for (auto& b : buf) b = static_cast<unsigned char>(rng());
  const auto paths = format_detail::crc32_paths();
  MESSAGE("CRC-32 paths on this CPU: " << paths.size() << " (table, pclmul, vpclmul in that order)");
  for (CrcPath path : paths) {
    INFO("path " << static_cast<int>(path));
    CHECK(format_detail::crc32_with(path, check, 9) == 0xCBF43926u);
    // Every length and start offset around the 16/64/256-byte block edges of the SIMD paths, then a long buffer;
    // the bytewise table path is the reference.
    for (size_t start = 0; start < 17; ++start)
      for (size_t n = 0; n < 600; ++n)
        REQUIRE(format_detail::crc32_with(path, &buf[start], n) ==
                format_detail::crc32_with(CrcPath::table, &buf[start], n));
    CHECK(format_detail::crc32_with(path, buf.data(), buf.size()) ==
          format_detail::crc32_with(CrcPath::table, buf.data(), buf.size()));
    CHECK(format_detail::crc32_with(path, buf.data(), buf.size(), 0x12345678u) ==
          format_detail::crc32_with(CrcPath::table, buf.data(), buf.size(), 0x12345678u));
  }
  // zlib.crc32(bytes(range(256)) * 4) computed with Python.
  std::vector<unsigned char> ramp(1024);
  for (size_t i = 0; i < ramp.size(); ++i) ramp[i] = static_cast<unsigned char>(i);
  CHECK(crc32(ramp.data(), ramp.size()) == 0xB70B4C26u);
  // Incremental: crc(a || b) == crc(b, crc(a)).
  CHECK(crc32(&buf[1000], 5000, crc32(buf.data(), 1000)) == crc32(buf.data(), 6000));
  CHECK(crc32_combine(crc32(buf.data(), 1000), crc32(&buf[1000], 5000), 5000) == crc32(buf.data(), 6000));
  CHECK(crc32_combine(0, crc32(buf.data(), 77), 77) == crc32(buf.data(), 77));
}

TEST_CASE("format: f16 and bf16 conversions") {
  // Every f16 value survives f16 -> f32 -> f16 (NaNs stay NaN).
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = f16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      REQUIRE(std::isnan(f16_to_f32(f32_to_f16(f))));
    } else {
      REQUIRE(f32_to_f16(f) == h);
    }
    const float g = bf16_to_f32(static_cast<uint16_t>(h));
    if (!std::isnan(g)) REQUIRE(f32_to_bf16(g) == h);
  }
  CHECK(f32_to_f16(1.0f) == 0x3C00);
  CHECK(f32_to_f16(-2.0f) == 0xC000);
  CHECK(f32_to_f16(65504.0f) == 0x7BFF);
  CHECK(f32_to_f16(65519.0f) == 0x7BFF);  // below the halfway point to 65536
  CHECK(f32_to_f16(65520.0f) == 0x7C00);  // halfway, ties to even = Inf
  CHECK(f32_to_f16(std::ldexp(1.0f, -24)) == 0x0001);               // smallest subnormal
  CHECK(f32_to_f16(std::ldexp(1.0f, -25)) == 0x0000);               // exactly half of it: ties to even (0)
  CHECK(f32_to_f16(std::ldexp(3.0f, -25)) == 0x0002);               // 1.5 ulp: ties to even (2)
  CHECK(f32_to_f16(1.0f + std::ldexp(1.0f, -11)) == 0x3C00);        // halfway between 1 and next: even
  CHECK(f32_to_f16(1.0f + std::ldexp(3.0f, -11)) == 0x3C02);        // halfway between odd and even: up
  CHECK(f32_to_f16(std::numeric_limits<float>::infinity()) == 0x7C00);
  CHECK(f16_to_f32(0x3555) == 0x1.554p-2f);  // 0x3555 = 1.0101010101b x 2^-2 = 0.333251953125, exact in float
  CHECK(f32_to_bf16(1.0f) == 0x3F80);
  CHECK(f32_to_bf16(1.0f + std::ldexp(1.0f, -8)) == 0x3F80);        // halfway: even
  CHECK(f32_to_bf16(1.0f + std::ldexp(3.0f, -8)) == 0x3F82);
  CHECK(std::isnan(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  CHECK(parse_dtype("bf16") == DType::bf16);
  CHECK_THROWS_WITH(parse_dtype("f8"), doctest::Contains("unknown dtype 'f8'"));
  CHECK_THROWS_WITH(parse_arch("bert"), doctest::Contains("unknown architecture 'bert'"));
}

// ---------------------------------------------------------------- round trips

namespace {

void check_round_trip(const Fixture& fx, const std::string& path) {
  write_fixture(fx, path);
  for (bool verify : {true, false}) {
    LoadOptions opts;
    opts.verify_checksums = verify;
    opts.check_finite = true;
    const auto wf = WeightFile::open(path, opts);
    CHECK(wf->checksums_verified() == verify);
    const ModelConfig& a = wf->config();
    const ModelConfig& b = fx.config;
    CHECK(a.arch == b.arch);
    CHECK(a.d_model == b.d_model);
    CHECK(a.n_layers == b.n_layers);
    CHECK(a.n_heads == b.n_heads);
    CHECK(a.n_kv_heads == b.n_kv_heads);
    CHECK(a.head_dim == b.head_dim);
    CHECK(a.d_ff == b.d_ff);
    CHECK(a.n_vocab == b.n_vocab);
    CHECK(a.max_seq == b.max_seq);
    CHECK(a.norm_eps == b.norm_eps);
    CHECK(a.rope_theta == b.rope_theta);
    CHECK(a.tied_embeddings == b.tied_embeddings);
    CHECK(a.rope_interleaved == b.rope_interleaved);
    CHECK(a.tokenizer == b.tokenizer);
    CHECK(a.bos_id == b.bos_id);
    CHECK(a.eos_id == b.eos_id);
    REQUIRE(wf->tensors().size() == fx.tensors.size());
    uint64_t n_params = 0;
    for (size_t k = 0; k < fx.tensors.size(); ++k) {
      const FixtureTensor& want = fx.tensors[k];
      const TensorInfo& got = wf->tensors()[k];
      INFO("tensor " << want.name);
      CHECK(got.name == want.name);
      CHECK(got.dtype == want.dtype);
      CHECK(got.shape == want.shape);
      CHECK(got.size == want.encoded.size());
      CHECK(reinterpret_cast<uintptr_t>(wf->data(got)) % 64 == 0);
      CHECK(std::memcmp(wf->data(got), want.encoded.data(), got.size) == 0);
      std::vector<float> f(got.n_elements());
      wf->read_f32(got, f.data());
      CHECK(f == want.values);  // the values are exact in every dtype
      CHECK(wf->find(want.name) == &got);
      CHECK(&wf->require(want.name, want.shape) == &got);
      CHECK(wf->count_nonfinite(got) == 0);
      n_params += got.n_elements();
    }
    CHECK(n_params == fx.config.n_params());
    CHECK(wf->find("no.such.tensor") == nullptr);
    CHECK_THROWS_WITH(wf->require("no.such.tensor", {1}), doctest::Contains("'no.such.tensor': missing"));
    CHECK_THROWS_WITH(wf->require("tok_emb", {1, 2}), doctest::Contains("'tok_emb': shape ["));
    // The canonical order and shapes of models/tensor_names.h are what the writer laid down.
    const auto specs = family_tensors(fx.config);
    REQUIRE(specs.size() == wf->tensors().size());
    CHECK(specs.size() == family_tensor_count(fx.config));
    for (size_t k = 0; k < specs.size(); ++k) {
      CHECK(specs[k].name == wf->tensors()[k].name);
      CHECK(specs[k].shape == wf->tensors()[k].shape);
    }
  }
}

}  // namespace

TEST_CASE("format: round trip gpt2 and llama with mixed f32/f16/bf16 tensors") {
  TempDir dir;
  for (const char* family : {"gpt2", "llama"}) {
    INFO(family);
    check_round_trip(load_fixture(family), dir.file(std::string(family) + ".sqdk"));
  }
}

TEST_CASE("format: round trip with every tensor in one dtype, tied and untied") {
  TempDir dir;
  for (const char* family : {"gpt2", "llama"})
    for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
      INFO(family << " " << dtype_name(dtype));
      Fixture fx = load_fixture(family);
      for (auto& t : fx.tensors) {
        t.dtype = dtype;
        encode(t);
      }
      check_round_trip(fx, dir.file("one_dtype.sqdk"));
    }
  // Flip tying: the llama fixture is untied; drop lm_head and set the flag.
  Fixture fx = load_fixture("llama");
  fx.config.tied_embeddings = true;
  fx.tensors.pop_back();
  check_round_trip(fx, dir.file("tied.sqdk"));
}

TEST_CASE("format: layout follows FORMAT.md (header fields, 64-byte data alignment, file_size)") {
  TempDir dir;
  const std::string path = dir.file("m.sqdk");
  write_fixture(load_fixture("llama"), path);
  const auto b = read_bytes(path);
  CHECK(std::memcmp(b.data(), "SQDK", 4) == 0);
  CHECK(get<uint32_t>(b, 4) == 1);
  CHECK(get<uint64_t>(b, 8) == b.size());
  CHECK(get<uint64_t>(b, 80) == 128);
  const uint64_t dir_end = 128 + get<uint64_t>(b, 88);
  CHECK(get<uint64_t>(b, 96) == (dir_end + 63) / 64 * 64);
  for (size_t i = 108; i < 128; ++i) CHECK(b[i] == 0);
  uint64_t expect = get<uint64_t>(b, 96);
  for (const auto& e : parse_entries(b)) {
    CHECK(get<uint64_t>(b, e.offset) == expect);
    expect = (get<uint64_t>(b, e.offset) + get<uint64_t>(b, e.size) + 63) / 64 * 64;
  }
  // No temporary file is left beside the output.
  int n_files = 0;
  for ([[maybe_unused]] const auto& f : std::filesystem::directory_iterator(dir.path())) ++n_files;
  CHECK(n_files == 1);
}

// ---------------------------------------------------------------- loader errors: file and header

namespace {

// A valid llama fixture file plus its bytes, for patch-and-load tests.
struct Patched {
  TempDir dir;
  std::string path = dir.file("bad.sqdk");
  std::vector<unsigned char> bytes;
  std::vector<EntryPos> entries;
  explicit Patched(const char* family = "llama") : bytes(fixture_bytes(family)), entries(parse_entries(bytes)) {}
  const EntryPos& e(const std::string& name) const { return entry(entries, name); }
  // Writes the patched bytes (header checksum re-sealed unless told not to) and expects an error.
  void expect(std::initializer_list<std::string> parts, bool seal = true, const LoadOptions& opts = {}) {
    if (seal) reseal(bytes);
    write_bytes(path, bytes);
    expect_load_error(path, parts, opts);
  }
};

}  // namespace

TEST_CASE("format error: missing file, a directory, a file shorter than the header") {
  TempDir dir;
  expect_load_error(dir.file("absent.sqdk"), {"cannot open"});
  expect_load_error(dir.path().string(), {"not a regular file"});
  const std::string path = dir.file("short.sqdk");
  write_bytes(path, std::vector<unsigned char>(100, 0));
  expect_load_error(path, {"header", "100 bytes, shorter than the 128-byte header"});
  write_bytes(path, {});
  expect_load_error(path, {"0 bytes, shorter than the 128-byte header"});
}

TEST_CASE("format error: bad magic") {
  Patched p;
  p.bytes[0] = 'G';
  p.expect({"bad magic 47 51 44 4B", "expected 53 51 44 4B"});
}

TEST_CASE("format error: unsupported version") {
  Patched p;
  put<uint32_t>(p.bytes, 4, 3);  // 2 is the version with a tokenizer section (test_format_tokenizer.cpp)
  p.expect({"unsupported format version 3", "reads versions 1 and 2"});
}

TEST_CASE("format error: truncated or extended file (file_size mismatch)") {
  Patched p;
  const size_t n = p.bytes.size();
  write_bytes(p.path, p.bytes, n - 1);
  expect_load_error(p.path, {"file_size says " + std::to_string(n), "has " + std::to_string(n - 1)});
  p.bytes.push_back(0);
  p.expect({"file_size says " + std::to_string(n), "has " + std::to_string(n + 1)});
}

TEST_CASE("format error: file larger than LoadOptions::max_bytes") {
  Patched p;
  LoadOptions opts;
  opts.max_bytes = 4096;
  p.expect({"over the allowed 4096 bytes", "max_bytes"}, true, opts);
  opts.max_bytes = p.bytes.size();  // exactly at the cap loads
  CHECK_NOTHROW(WeightFile::open(p.path, opts));
}

TEST_CASE("format error: directory out of bounds, bad directory_offset, bad data_offset") {
  {
    Patched p;
    put<uint64_t>(p.bytes, 88, p.bytes.size());
    p.expect({"directory [128, 128 + ", "runs past the end of the file"});
  }
  {
    Patched p;
    put<uint64_t>(p.bytes, 88, ~uint64_t{0});  // 128 + size would overflow
    p.expect({"runs past the end of the file"});
  }
  {
    Patched p;
    put<uint64_t>(p.bytes, 80, 256);
    p.expect({"directory_offset 256 (expected 128)"});
  }
  {
    Patched p;
    put<uint64_t>(p.bytes, 96, get<uint64_t>(p.bytes, 96) + 8);
    p.expect({"data_offset", "expected a multiple of 64"});
  }
  {
    Patched p;
    put<uint64_t>(p.bytes, 96, 64);  // inside the directory
    p.expect({"data_offset 64"});
  }
}

TEST_CASE("format error: non-zero reserved bytes") {
  Patched p;
  p.bytes[120] = 1;
  p.expect({"reserved byte 120 is 1 (expected 0)"});
}

TEST_CASE("format error: header checksum mismatch (a flipped config bit is never loaded silently)") {
  Patched p;
  p.bytes[53] ^= 0x01;  // a low mantissa bit of norm_eps: still a valid config, caught only by the checksum
  p.expect({"header: checksum mismatch", "stored CRC-32 0x"}, /*seal=*/false);
  LoadOptions opts;
  opts.verify_checksums = false;  // skipping checksums skips this one too
  CHECK_NOTHROW(WeightFile::open(p.path, opts));
}

TEST_CASE("format error: n_tensors that cannot fit in the directory") {
  Patched p;
  put<uint32_t>(p.bytes, 76, 0xFFFFFFFFu);
  p.expect({"4294967295 tensors cannot fit"});
}

TEST_CASE("format error: trailing bytes in the directory") {
  Patched p;
  put<uint32_t>(p.bytes, 76, get<uint32_t>(p.bytes, 76) - 1);
  p.expect({"bytes after its last entry"});
}

// ---------------------------------------------------------------- loader errors: config

namespace {
void expect_config_error(const char* family, size_t at, uint32_t value, std::initializer_list<std::string> parts) {
  Patched p(family);
  put<uint32_t>(p.bytes, at, value);
  p.expect(parts);
}
void expect_config_error_f(const char* family, size_t at, float value, std::initializer_list<std::string> parts) {
  Patched p(family);
  put<float>(p.bytes, at, value);
  p.expect(parts);
}
}  // namespace

TEST_CASE("format error: config d_model not n_heads x head_dim for gpt2") {
  expect_config_error("gpt2", 20, 12, {"config: d_model 12 is not n_heads 2 x head_dim 4"});
}

TEST_CASE("format error: config n_kv_heads not dividing n_heads") {
  expect_config_error("llama", 32, 3, {"config: n_kv_heads 3 does not divide n_heads 4"});
}

TEST_CASE("format error: config gpt2 with n_kv_heads != n_heads") {
  expect_config_error("gpt2", 32, 1, {"config: n_kv_heads 1 differs from n_heads 2"});
}

TEST_CASE("format error: config zero and absurd sizes") {
  const std::pair<size_t, const char*> fields[] = {{20, "d_model"}, {24, "n_layers"}, {28, "n_heads"},
                                                   {32, "n_kv_heads"}, {36, "head_dim"}, {40, "d_ff"},
                                                   {44, "n_vocab"}, {48, "max_seq"}};
  for (const auto& field : fields) {
    const size_t at = field.first;
    const std::string name = field.second;  // a copy: INFO captures it (clang 14 cannot capture bindings)
    INFO(name);
    expect_config_error("llama", at, 0, {std::string("config: ") + name + " is 0 (expected >= 1)"});
    expect_config_error("llama", at, 0xFFFFFFFFu, {std::string("config: ") + name, "absurd"});
  }
}

TEST_CASE("format error: config norm_eps <= 0 or not finite, rope_theta") {
  expect_config_error_f("llama", 52, 0.0f, {"config: norm_eps 0"});
  expect_config_error_f("llama", 52, -1e-5f, {"config: norm_eps -0.00001"});
  expect_config_error_f("llama", 52, std::numeric_limits<float>::quiet_NaN(), {"config: norm_eps nan"});
  expect_config_error_f("llama", 52, std::numeric_limits<float>::infinity(), {"config: norm_eps inf"});
  expect_config_error_f("llama", 56, 0.0f, {"config: rope_theta 0", "llama"});
  expect_config_error_f("gpt2", 56, std::numeric_limits<float>::infinity(), {"config: rope_theta is not finite"});
}

TEST_CASE("format error: config unknown arch, flags, tokenizer") {
  expect_config_error("llama", 16, 7, {"config: unknown arch 7"});
  expect_config_error("llama", 60, 1u << 5, {"config: unknown flag bits 0x00000020"});
  expect_config_error("llama", 64, 9, {"config: unknown tokenizer 9"});
  expect_config_error("gpt2", 60, 2, {"interleaved-RoPE flag is set but gpt2 has no RoPE"});
}

TEST_CASE("format error: config bos/eos outside the vocabulary or a byte id") {
  expect_config_error("llama", 68, 258, {"config: bos_id 258 is outside the vocabulary"});
  expect_config_error("llama", 72, 65, {"config: eos_id 65 is a byte id"});
  expect_config_error("llama", 44, 200, {"n_vocab 200 is too small for the byte-level tokenizer"});
}

// ---------------------------------------------------------------- loader errors: directory entries

TEST_CASE("format error: unknown dtype") {
  Patched p;
  p.bytes[p.e("blk.0.attn_q.weight").dtype] = 4;  // 3 is q8 (tests/engine/test_format_q8.cpp)
  p.expect({"tensor 'blk.0.attn_q.weight'", "unknown dtype 4"});
  Patched q;  // q8 on this fixture's [16, 8]: the shape cannot be q8
  q.bytes[q.e("blk.0.attn_q.weight").dtype] = 3;
  q.expect({"tensor 'blk.0.attn_q.weight'", "shape [16, 8] of q8", "not a multiple of 32"});
}

TEST_CASE("format error: n_dims 0 or > 4") {
  for (uint8_t n : {0, 5, 255}) {
    Patched p;
    p.bytes[p.e("blk.1.attn_k.weight").n_dims] = n;
    p.expect({"tensor 'blk.1.attn_k.weight'", "n_dims " + std::to_string(n) + " (expected 1..4)"});
  }
}

TEST_CASE("format error: a zero dimension") {
  Patched p;
  put<uint64_t>(p.bytes, p.e("tok_emb").shape + 8, 0);
  p.expect({"tensor 'tok_emb'", "dimension 1 is 0"});
}

TEST_CASE("format error: shape product overflows 64 bits") {
  Patched p;
  put<uint64_t>(p.bytes, p.e("tok_emb").shape, uint64_t{1} << 33);
  put<uint64_t>(p.bytes, p.e("tok_emb").shape + 8, uint64_t{1} << 33);
  p.expect({"tensor 'tok_emb'", "more than 2^64 elements"});
  put<uint64_t>(p.bytes, p.e("tok_emb").shape, uint64_t{1} << 62);  // 2^63 elements fit, x 4 bytes do not
  put<uint64_t>(p.bytes, p.e("tok_emb").shape + 8, 2);
  p.expect({"tensor 'tok_emb'", "more than 2^64 bytes"});
}

TEST_CASE("format error: shape/size mismatch") {
  Patched p;
  const auto& e = p.e("blk.0.ffn_up.weight");  // [7, 8] f32 = 224 bytes
  put<uint64_t>(p.bytes, e.size, 228);
  p.expect({"tensor 'blk.0.ffn_up.weight'", "has 56 elements but size 228 bytes (expected 112 bytes for bf16)"});
}

TEST_CASE("format error: tensor offset misaligned, before data_offset, past the end") {
  {
    Patched p;
    const auto& e = p.e("out_norm.weight");
    put<uint64_t>(p.bytes, e.offset, get<uint64_t>(p.bytes, e.offset) + 4);
    p.expect({"tensor 'out_norm.weight'", "is not a multiple of 64"});
  }
  {
    Patched p;
    put<uint64_t>(p.bytes, p.e("out_norm.weight").offset, 64);
    p.expect({"tensor 'out_norm.weight'", "is before data_offset"});
  }
  {
    Patched p;
    const auto& e = p.e("lm_head.weight");
    put<uint64_t>(p.bytes, e.offset, (p.bytes.size() + 63) / 64 * 64);
    p.expect({"tensor 'lm_head.weight'", "runs past the end of the file"});
    put<uint64_t>(p.bytes, e.offset, ~uint64_t{63});  // offset + size overflows
    p.expect({"tensor 'lm_head.weight'", "runs past the end of the file"});
  }
}

TEST_CASE("format error: overlapping tensors") {
  Patched p;
  put<uint64_t>(p.bytes, p.e("blk.0.attn_v.weight").offset, get<uint64_t>(p.bytes, p.e("blk.0.attn_k.weight").offset));
  p.expect({"overlaps tensor", "blk.0.attn_"});
}

TEST_CASE("format error: duplicate names") {
  Patched p;
  const auto& e = p.e("blk.0.attn_k.weight");
  p.bytes[e.name + 11] = 'q';  // blk.0.attn_k.weight -> blk.0.attn_q.weight
  p.expect({"tensor 'blk.0.attn_q.weight': duplicate name"});
}

TEST_CASE("format error: empty and over-long names") {
  {
    Patched p;
    put<uint16_t>(p.bytes, p.e("tok_emb").name_len, 0);
    p.expect({"tensor #0", "name_len 0 (expected 1..255)"});
  }
  {
    Patched p;
    put<uint16_t>(p.bytes, p.e("blk.0.attn_norm.weight").name_len, 256);
    p.expect({"tensor #1", "name_len 256 (expected 1..255)"});
  }
  {
    Patched p;  // a name_len that runs past the directory
    put<uint16_t>(p.bytes, p.entries.back().name_len, 255);
    p.expect({"runs past the directory end at name"});
  }
}

TEST_CASE("format error: non-UTF-8 names and control characters") {
  const std::pair<std::vector<unsigned char>, std::string> cases[] = {
      {{0xFF}, "not valid UTF-8"},        {{0xC0, 0x80}, "not valid UTF-8"},      // invalid lead, overlong NUL
      {{0xED, 0xA0, 0x80}, "surrogate"},  {{0xE2, 0x28, 0xA1}, "not valid UTF-8"},  // surrogate, bad continuation
      {{0x1B}, "control character"},      {{0x00}, "control character"}};
  for (const auto& [seq, what] : cases) {
    Patched p;
    const auto& e = p.e("blk.1.ffn_gate.weight");
    std::memcpy(&p.bytes[e.name + 6], seq.data(), seq.size());
    // The message shows the raw bytes escaped as \xNN, never the bytes themselves.
    std::string shown;
    char buf[8];
    std::snprintf(buf, sizeof buf, "\\x%02X", seq[0]);
    p.expect({"tensor 'blk.1." + std::string(buf), what});
  }
  // Valid multi-byte UTF-8 passes the name check (and then fails the family check by name).
  Patched p;
  const auto& e = p.e("blk.1.ffn_gate.weight");
  const unsigned char eacute[] = {0xC3, 0xA9};
  std::memcpy(&p.bytes[e.name + 6], eacute, 2);
  p.expect({"not part of the llama family"});
}

TEST_CASE("format error: missing tensor for the family") {
  Patched p;
  // Drop the last directory entry (lm_head.weight): one tensor fewer, directory shortened to end before it.
  put<uint32_t>(p.bytes, 76, get<uint32_t>(p.bytes, 76) - 1);
  put<uint64_t>(p.bytes, 88, p.entries.back().name_len - 128);
  p.expect({"tensor 'lm_head.weight': missing", "needs it with shape [258, 8]"});
}

TEST_CASE("format error: unexpected tensor for the family (including lm_head when tied)") {
  {
    Patched p;
    p.bytes[p.e("blk.1.attn_v.weight").name + 11] = 'x';
    p.expect({"tensor 'blk.1.attn_x.weight': not part of the llama family"});
  }
  {
    Patched p;
    put<uint32_t>(p.bytes, 60, get<uint32_t>(p.bytes, 60) | 1u);  // tied, yet lm_head.weight is present
    p.expect({"tensor 'lm_head.weight': not part of the llama family with tied embeddings"});
  }
}

TEST_CASE("format error: wrong shape for the family") {
  Patched p;
  const auto& e = p.e("tok_emb");  // [258, 8] -> [8, 258]: same size, transposed
  put<uint64_t>(p.bytes, e.shape, 8);
  put<uint64_t>(p.bytes, e.shape + 8, 258);
  p.expect({"tensor 'tok_emb': shape [8, 258] (expected [258, 8]"});
  Patched g("gpt2");
  put<uint32_t>(g.bytes, 48, 6);  // max_seq 6 but pos_emb has 5 rows
  g.expect({"tensor 'pos_emb': shape [5, 8] (expected [6, 8]"});
}

TEST_CASE("format error: tensor checksum mismatch, skippable") {
  Patched p;
  const auto& e = p.e("blk.1.ffn_down.weight");
  p.bytes[get<uint64_t>(p.bytes, e.offset) + 17] ^= 0x20;
  p.expect({"tensor 'blk.1.ffn_down.weight': checksum mismatch", "stored CRC-32 0x"});
  LoadOptions opts;
  opts.verify_checksums = false;
  const auto wf = WeightFile::open(p.path, opts);
  CHECK_FALSE(wf->checksums_verified());
}

TEST_CASE("format error: NaN/Inf weights refused with check_finite, counted by count_nonfinite") {
  TempDir dir;
  const std::string path = dir.file("nan.sqdk");
  for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    INFO(dtype_name(dtype));
    Fixture fx = load_fixture("llama");
    FixtureTensor& t = fx.tensors[3];  // blk.0.attn_k.weight
    t.dtype = dtype;
    t.values[5] = std::numeric_limits<float>::quiet_NaN();
    t.values[9] = -std::numeric_limits<float>::infinity();
    encode(t);
    write_fixture(fx, path);
    const auto wf = WeightFile::open(path);  // loads by default: finiteness is opt-in
    CHECK(wf->count_nonfinite(wf->tensors()[3]) == 2);
    CHECK(wf->count_nonfinite(wf->tensors()[2]) == 0);
    LoadOptions opts;
    opts.check_finite = true;
    expect_load_error(path, {"tensor 'blk.0.attn_k.weight': 2 of 64 values are NaN or Inf"}, opts);
  }
}

TEST_CASE("format: the writer refuses invalid content and leaves no file") {
  TempDir dir;
  const std::string path = dir.file("w.sqdk");
  Fixture fx = load_fixture("llama");
  auto to_write = [&] {
    std::vector<TensorToWrite> tw;
    for (const auto& t : fx.tensors) tw.push_back({t.name, t.dtype, t.shape, t.encoded.data()});
    return tw;
  };
  auto tw = to_write();
  tw.pop_back();
  CHECK_THROWS_WITH(write_weight_file(path, fx.config, tw), doctest::Contains("'lm_head.weight': missing"));
  tw = to_write();
  tw[2].name = tw[1].name;
  CHECK_THROWS_WITH(write_weight_file(path, fx.config, tw), doctest::Contains("duplicate name"));
  tw = to_write();
  tw[2].shape = {1, 2, 3, 4, 5};
  CHECK_THROWS_WITH(write_weight_file(path, fx.config, tw), doctest::Contains("n_dims must be 1..4"));
  ModelConfig bad = fx.config;
  bad.n_kv_heads = 3;
  CHECK_THROWS_WITH(write_weight_file(path, bad, to_write()), doctest::Contains("does not divide"));
  CHECK_THROWS_WITH(write_weight_file(dir.file("no/such/dir/w.sqdk"), fx.config, to_write()),
                    doctest::Contains("cannot create a temporary file"));
  CHECK(std::filesystem::is_empty(dir.path()));
  // Overwriting an existing file replaces it whole.
  write_bytes(path, std::vector<unsigned char>(10, 'x'));
  write_weight_file(path, fx.config, to_write());
  CHECK_NOTHROW(WeightFile::open(path));
}
