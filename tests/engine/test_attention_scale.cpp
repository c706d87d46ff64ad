// ModelConfig::attention_scale: the factor on q·k, a .sqdk field (flag bit 2, f32 at header offset 108;
// engine/FORMAT.md). It round-trips through the writer and the loader, is absent (1/√head_dim) in files written
// before it existed, is refused when not finite and > 0, is covered by the header CRC, and reaches both the fast
// forward and the reference forward of every family.
#include "tests/engine/test_format_util.h"

#include <sqrtdk/error.h>
#include <sqrtdk/model.h>
#include <sqrtdk/session.h>

#include "engine/src/runtime/reference.h"
#include "tests/common/isas.h"
#include "tests/common/toy_model.h"

#include <cmath>
#include <limits>

using namespace sqrtdk;
using namespace sqrtdk::test;

namespace {

constexpr size_t kScaleAt = 108;     // header offset of attention_scale (FORMAT.md)
constexpr uint32_t kScaleFlag = 4u;  // flags bit 2

// header_crc32 as FORMAT.md defines it: bytes [0, 104), the directory, then the scale's 4 bytes if flag bit 2.
void reseal_with_scale(std::vector<unsigned char>& b) {
  const uint64_t dir_size = get<uint64_t>(b, 88);
  uint32_t crc = crc32(&b[128], dir_size, crc32(b.data(), 104));
  if (get<uint32_t>(b, 60) & kScaleFlag) crc = crc32(&b[kScaleAt], 4, crc);
  put<uint32_t>(b, 104, crc);
}

std::vector<uint32_t> test_tokens(size_t n, uint32_t n_vocab) {
  std::vector<uint32_t> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = static_cast<uint32_t>((i * 29 + 5) % n_vocab);
  return t;
}

double max_abs_diff(std::span<const float> a, std::span<const float> b) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(double{a[i]} - double{b[i]}));
  return worst;
}

double max_abs(std::span<const float> v) {
  double m = 0;
  for (float x : v) m = std::max(m, std::fabs(double{x}));
  return m;
}

}  // namespace

TEST_CASE("attention_scale: round-trips through the writer and the loader, and absent means 1/sqrt(head_dim)") {
  TempDir dir;
  for (ModelConfig c : {toy_llama_config(), toy_gpt2_config()}) {
    CAPTURE(arch_name(c.arch));
    const std::string plain = dir.file(std::string(arch_name(c.arch)) + "_plain.sqdk");
    write_toy_model(plain, c, 3);
    const auto p = WeightFile::open(plain);
    CHECK_FALSE(p->config().attention_scale.has_value());
    CHECK(p->config().attention_scale_or_default() == doctest::Approx(1.0 / std::sqrt(c.head_dim)).epsilon(1e-7));
    // A file without the field has flag bit 2 clear and zeros where the field would be: the bytes every file
    // written before the field had, so old files load unchanged.
    const auto bytes = read_bytes(plain);
    CHECK((get<uint32_t>(bytes, 60) & kScaleFlag) == 0);
    CHECK(get<uint32_t>(bytes, kScaleAt) == 0);

    for (float scale : {1.0f, 0.0625f, 3.5f}) {
      CAPTURE(scale);
      c.attention_scale = scale;
      const std::string path = dir.file(std::string(arch_name(c.arch)) + "_scaled.sqdk");
      write_toy_model(path, c, 3);
      const auto f = WeightFile::open(path);
      REQUIRE(f->config().attention_scale.has_value());
      CHECK(*f->config().attention_scale == scale);
      CHECK(f->config().attention_scale_or_default() == scale);
      const auto b = read_bytes(path);
      CHECK((get<uint32_t>(b, 60) & kScaleFlag) != 0);
      CHECK(get<float>(b, kScaleAt) == scale);
    }
  }
}

TEST_CASE("attention_scale: the bundled model, written before the field existed, loads with 1/sqrt(head_dim)") {
  const std::string path = SQRTDK_SOURCE_DIR "/models/tiny-llama-bytes.sqdk";
  const auto f = WeightFile::open(path);
  CHECK_FALSE(f->config().attention_scale.has_value());
  CHECK(f->config().attention_scale_or_default() == doctest::Approx(1.0 / std::sqrt(32.0)).epsilon(1e-7));
}

TEST_CASE("attention_scale: 0, negative, NaN and infinity are refused, naming the file and the field") {
  TempDir dir;
  const std::string good = dir.file("good.sqdk");
  ModelConfig c = toy_llama_config();
  c.attention_scale = 1.0f;
  write_toy_model(good, c, 5);
  const auto original = read_bytes(good);
  const float bad_values[] = {0.0f, -0.0f, -1.0f, std::numeric_limits<float>::quiet_NaN(),
                              std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity()};
  for (float bad : bad_values) {
    CAPTURE(bad);
    // In a file (a foreign writer): the loader's config check.
    auto b = original;
    put<float>(b, kScaleAt, bad);
    reseal_with_scale(b);
    const std::string path = dir.file("bad.sqdk");
    write_bytes(path, b);
    expect_load_error(path, {"config: attention_scale", "expected finite and > 0"});
    // From C++: the writer validates before it writes anything.
    ModelConfig cb = toy_llama_config();
    cb.attention_scale = bad;
    const std::string out = dir.file("refused.sqdk");
    std::string message;
    try {
      write_toy_model(out, cb, 5);
    } catch (const Error& e) {
      message = e.what();
    }
    CHECK(message.find(out) != std::string::npos);
    CHECK(message.find("config: attention_scale") != std::string::npos);
    CHECK_FALSE(std::filesystem::exists(out));
  }
}

TEST_CASE("attention_scale: the header CRC covers the field, and without flag bit 2 its bytes must be zero") {
  TempDir dir;
  const std::string good = dir.file("good.sqdk");
  ModelConfig c = toy_llama_config();
  c.attention_scale = 1.0f;
  write_toy_model(good, c, 5);
  const auto original = read_bytes(good);

  auto flipped = original;  // 1.0f -> 1.0000001f: still a sensible scale, only the CRC can tell
  flipped[kScaleAt] ^= 1;
  const std::string path = dir.file("bad.sqdk");
  write_bytes(path, flipped);
  expect_load_error(path, {"header: checksum mismatch"});

  auto cleared = original;  // flag cleared, value left behind
  put<uint32_t>(cleared, 60, get<uint32_t>(cleared, 60) & ~kScaleFlag);
  reseal_with_scale(cleared);
  write_bytes(path, cleared);
  expect_load_error(path, {"header: reserved byte 110", "flag bit 2"});  // 1.0f is 00 00 80 3F

  auto unknown = original;  // bit 3 is still unknown
  put<uint32_t>(unknown, 60, get<uint32_t>(unknown, 60) | 8u);
  reseal_with_scale(unknown);
  write_bytes(path, unknown);
  expect_load_error(path, {"config: unknown flag bits 0x00000008"});
}

TEST_CASE("attention_scale: scale 1 changes the logits, and the fast path still matches the reference forward") {
  TempDir dir;
  for (ModelConfig c : {toy_llama_config(), toy_gpt2_config()}) {
    CAPTURE(arch_name(c.arch));
    const auto tokens = test_tokens(23, c.n_vocab);
    const std::string standard = dir.file("standard.sqdk"), unscaled = dir.file("unscaled.sqdk");
    write_toy_model(standard, c, 11);
    c.attention_scale = 1.0f;  // head_dim 16: 4x the default 1/4
    write_toy_model(unscaled, c, 11);  // same seed: the same weights, only the scale differs

    const auto want_standard = reference_forward(*WeightFile::open(standard), tokens);
    const auto want_unscaled = reference_forward(*WeightFile::open(unscaled), tokens);
    // The references themselves differ by far more than rounding: the scale reached the reference forward.
    CHECK(max_abs_diff(want_standard, want_unscaled) > 0.05 * max_abs(want_standard));

    for (Isa isa : test::f32_isas()) {
      const std::string isa_str = isa_name(isa);
      CAPTURE(isa_str);
      ModelOptions mo;
      mo.isa = static_cast<int>(isa);
      Session s_std(Model::load(standard, mo)), s_one(Model::load(unscaled, mo));
      const auto got_standard = s_std.prefill(tokens, /*all_logits=*/true);
      const auto got_unscaled = s_one.prefill(tokens, /*all_logits=*/true);
      // Same bound as tests/engine/test_session.cpp: 1e-4 of the largest logit.
      CHECK(max_abs_diff(got_unscaled, want_unscaled) <= 1e-4 * std::max(1.0, max_abs(want_unscaled)));
      CHECK(max_abs_diff(got_standard, want_standard) <= 1e-4 * std::max(1.0, max_abs(want_standard)));
      CHECK(max_abs_diff(got_unscaled, got_standard) > 0.05 * max_abs(want_standard));
    }
  }
}

TEST_CASE("attention_scale: ModelConfig::validate names the field") {
  ModelConfig c = toy_llama_config();
  c.attention_scale = -2.0f;
  std::string message;
  try {
    c.validate("where.sqdk");
  } catch (const Error& e) {
    message = e.what();
  }
  CHECK(message == "where.sqdk: config: attention_scale -2 (expected finite and > 0, or absent for the default "
                   "1/sqrt(head_dim))");
  c.attention_scale = 1e-30f;  // tiny but positive is allowed: the file says what it was trained with
  CHECK_NOTHROW(c.validate("where.sqdk"));
}

TEST_CASE("attention_scale: tools/sqdk.py reads it and writes the same bytes as the C++ writer") {
  TempDir dir;
  ModelConfig c = toy_llama_config();
  c.attention_scale = 0.3f;
  const std::string cpp = dir.file("cpp.sqdk"), py = dir.file("py.sqdk");
  write_toy_model(cpp, c, 9);
  const std::string script = "import sys; sys.path.insert(0, '" SQRTDK_SOURCE_DIR "/tools'); import sqdk; "
                             "c, t = sqdk.read_sqdk(sys.argv[1]); assert abs(c['attention_scale'] - 0.3) < 1e-7, c; "
                             "sqdk.write_sqdk(sys.argv[2], c, t)";
  const int status = std::system(("/usr/bin/python3 -c \"" + script + "\" " + cpp + " " + py + " 2>/dev/null").c_str());
  if (status != 0 && std::system("/usr/bin/python3 -c 'import numpy' >/dev/null 2>&1") != 0) {
    MESSAGE("skipped: /usr/bin/python3 cannot import numpy (install python3-numpy to run this check)");
    return;
  }
  REQUIRE(status == 0);
  CHECK(read_bytes(py) == read_bytes(cpp));
}
