// Tokenizer inputs that are wrong: the .sqdk section's bytes truncated at every length and with counts and bytes
// flipped (a clear sqrtdk::Error, never a crash), and Hugging Face files this build cannot represent exactly (an
// error naming the file and the JSON field, never a tokenizer that is silently different).
#include <doctest/doctest.h>

#include <sqrtdk/error.h>
#include <sqrtdk/tokenizer.h>

#include "tests/common/temp_dir.h"

#include <nlohmann/json.hpp>

#include <cstring>
#include <fstream>
#include <string>
#include <vector>

using namespace sqrtdk;
using sqrtdk::test::TempDir;

namespace {

// A small byte-level spec: the pieces a, b, c, ab, abc, Ġ, two merges, one added token.
TokenizerSpec small_spec() {
  TokenizerSpec s;
  s.style = TokenizerStyle::byte_level_bpe;
  s.vocab = {"a", "b", "c", "ab", "abc", "\xC4\xA0", ""};
  s.merges = {{0, 1}, {3, 2}};
  AddedToken eot;
  eot.id = 6;
  eot.content = "<|end|>";
  s.added = {eot};
  s.split_regex = R"( ?\p{L}+|\s+)";
  s.eos_id = 6;
  s.end_of_turn_ids = {6};
  return s;
}

void write(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

// The error of reading `tokenizer_json` (a minimal sentencepiece-free byte-level file edited by the caller).
std::string error_of(const nlohmann::json& tokenizer_json) {
  TempDir dir;
  write(dir.file("tokenizer.json"), tokenizer_json.dump());
  try {
    tokenizer_spec_from_json(dir.file("tokenizer.json"), "");
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

nlohmann::json minimal_byte_level() {
  return {
      {"added_tokens", nlohmann::json::array()},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model",
       {{"type", "BPE"}, {"vocab", {{"a", 0}, {"b", 1}, {"ab", 2}}}, {"merges", nlohmann::json::array({"a b"})}}},
  };
}

}  // namespace

TEST_CASE("tokenizer small spec encodes, decodes and round-trips") {
  const auto t = Tokenizer::create(small_spec(), "small");
  CHECK(t->encode("abc ab<|end|>", false) == std::vector<uint32_t>{4, 5, 3, 6});
  CHECK(t->decode(std::vector<uint32_t>{4, 5, 3, 6}) == "abc ab<|end|>");
  CHECK(t->decode(std::vector<uint32_t>{4, 5, 3, 6}, true) == "abc ab");
  const auto bytes = serialize_tokenizer(small_spec());
  const TokenizerSpec back = deserialize_tokenizer(bytes.data(), bytes.size(), "small");
  CHECK(serialize_tokenizer(back) == bytes);
}

TEST_CASE("tokenizer section truncated at every length gives a clear error") {
  const auto bytes = serialize_tokenizer(small_spec());
  for (size_t n = 0; n < bytes.size(); ++n) {
    try {
      deserialize_tokenizer(bytes.data(), n, "truncated");
      FAIL_CHECK("a section of " << n << " of " << bytes.size() << " bytes was accepted");
    } catch (const Error& e) {
      CHECK(std::string(e.what()).rfind("truncated: ", 0) == 0);
    }
  }
}

TEST_CASE("tokenizer section with flipped counts and bytes gives an error or a valid spec") {
  const auto bytes = serialize_tokenizer(small_spec());
  // Every byte replaced by 0xFF, 0x00 and with its low bit flipped: counts become huge or small, ids go out of
  // range, strings lose their ends. Each must give sqrtdk::Error or a spec that validates and builds a tokenizer.
  for (size_t i = 0; i < bytes.size(); ++i) {
    for (int mode = 0; mode < 3; ++mode) {
      auto b = bytes;
      b[i] = mode == 0 ? 0xFF : mode == 1 ? 0x00 : static_cast<unsigned char>(b[i] ^ 1);
      if (b == bytes) continue;
      try {
        const TokenizerSpec s = deserialize_tokenizer(b.data(), b.size(), "flipped");
        const auto t = Tokenizer::create(s, "flipped");
        (void)t->encode("abc ab<|end|> xyz", true);
      } catch (const Error&) {
      }
    }
  }
  // The vocabulary count (after magic, version, style, flags, unk, bos, eos, pad, template and the regex) set huge.
  auto b = bytes;
  const size_t at = 4 + 4 * 9 + 4 + small_spec().split_regex.size();
  const uint32_t huge = 0x7FFFFFFF;
  std::memcpy(b.data() + at, &huge, 4);
  CHECK_THROWS_AS(deserialize_tokenizer(b.data(), b.size(), "flipped"), Error);
}

TEST_CASE("tokenizer json files name the field they cannot represent") {
  CHECK(error_of(minimal_byte_level()) == "(no error)");
  {
    auto j = minimal_byte_level();
    j["normalizer"] = {{"type", "Lowercase"}};
    const std::string e = error_of(j);
    CHECK(e.find("tokenizer.json: normalizer.type") != std::string::npos);
    CHECK(e.find("Lowercase") != std::string::npos);
  }
  {
    auto j = minimal_byte_level();
    j["model"].erase("merges");
    CHECK(error_of(j).find("model.merges") != std::string::npos);
  }
  {
    auto j = minimal_byte_level();
    j["model"]["merges"] = {"a c"};
    const std::string e = error_of(j);
    CHECK(e.find("model.merges[0]") != std::string::npos);
    CHECK(e.find("'c' is not in the vocabulary") != std::string::npos);
  }
  {
    auto j = minimal_byte_level();
    j["model"]["type"] = "Unigram";
    CHECK(error_of(j).find("model.type") != std::string::npos);
  }
  {
    auto j = minimal_byte_level();
    j["pre_tokenizer"] = {{"type", "Whitespace"}};
    CHECK(error_of(j).find("pre_tokenizer.type") != std::string::npos);
  }
  {
    auto j = minimal_byte_level();
    j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "\xE2\x96\x81"}, {"prepend_scheme", "first"}};
    CHECK(error_of(j).find("pre_tokenizer.type") != std::string::npos);
  }
  {
    auto j = minimal_byte_level();
    j["decoder"] = nullptr;
    CHECK(error_of(j).find("decoder") != std::string::npos);
  }
  {
    auto j = minimal_byte_level();
    j["model"]["dropout"] = 0.1;
    CHECK(error_of(j).find("model.dropout") != std::string::npos);
  }
  {
    auto j = minimal_byte_level();
    j["post_processor"] = {{"type", "Lowercase"}};
    CHECK(error_of(j).find("post_processor.type") != std::string::npos);
  }
  {
    auto j = minimal_byte_level();
    j["pre_tokenizer"] = {
        {"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}, {"invert", false}},
          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
    const std::string e = error_of(j);
    CHECK(e.find("regex") != std::string::npos);
  }
  {
    TempDir dir;
    write(dir.file("tokenizer.json"), "{ not json");
    CHECK_THROWS_WITH_AS(tokenizer_spec_from_json(dir.file("tokenizer.json"), ""),
                         doctest::Contains("not valid JSON"), Error);
    TokenizerSpec spec;
    TempDir empty;
    CHECK(!tokenizer_spec_from_dir(empty.path().string(), spec));
  }
}

TEST_CASE("tokenizer sentencepiece model reader refuses what it cannot read") {
  TempDir dir;
  write(dir.file("tokenizer.model"), "not a protobuf");
  CHECK_THROWS_AS(tokenizer_spec_from_sentencepiece(dir.file("tokenizer.model"), ""), Error);
}
