// The .sqdk tokenizer section (FORMAT.md "Tokenizer section", format version 2): written by the C++ writer, read
// back field for field, located and checksummed by the header, and refused with a clear error when anything about
// it is wrong. The tokenizers themselves are tested in test_tokenizer*.cpp.
#include <doctest/doctest.h>

#include <sqrtdk/error.h>
#include <sqrtdk/format.h>
#include <sqrtdk/model.h>
#include <sqrtdk/tokenizer.h>

#include "tests/engine/test_format_util.h"

#include <cstdlib>
#include <fstream>
#include <random>

namespace sqrtdk::test {
namespace {

// A small, valid byte-level spec whose ids fit the llama fixture's 258 rows: 256 byte pieces are not needed for
// the format, only consistency (merges produce pieces in the vocabulary, ids in range).
TokenizerSpec small_spec() {
  TokenizerSpec s;
  s.style = TokenizerStyle::byte_level_bpe;
  s.vocab = {"a", "b", "c", "ab", "abc", "Ġ", "Ġab"};
  s.merges = {{0, 1}, {3, 2}, {5, 3}};
  s.added = {{256, "<s>", true}, {257, "</s>", true, false, true}};
  s.split_regex = R"('s|'t| ?\p{L}+| ?\p{N}+|\s+(?!\S)|\s+)";
  s.nfc = true;
  s.ignore_merges = true;
  s.bos_id = 256;
  s.eos_id = 257;
  s.add_bos = true;
  s.chat_template = ChatTemplateKind::chatml;
  s.chat_template_jinja =
      "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + "
      "'\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
  s.end_of_turn_ids = {257};
  return s;
}

Fixture bpe_fixture() {
  Fixture fx = load_fixture("llama");
  fx.config.tokenizer = TokenizerKind::bpe;
  return fx;
}

void write_with_tokenizer(const Fixture& fx, const std::string& path, const TokenizerSpec& spec) {
  std::vector<TensorToWrite> tw;
  for (const auto& t : fx.tensors) tw.push_back({t.name, t.dtype, t.shape, t.encoded.data()});
  write_weight_file(path, fx.config, tw, &spec);
}

// Header CRC of a version-2 file: bytes [0, 104), the directory, then bytes [108, 128).
void reseal_v2(std::vector<unsigned char>& b) {
  const uint64_t dir_size = get<uint64_t>(b, 88);
  put<uint32_t>(b, 104, crc32(&b[108], 20, crc32(&b[128], dir_size, crc32(b.data(), 104))));
}

void check_same(const TokenizerSpec& a, const TokenizerSpec& b) {
  CHECK(a.style == b.style);
  CHECK(a.vocab == b.vocab);
  CHECK(a.merges == b.merges);
  REQUIRE(a.added.size() == b.added.size());
  for (size_t i = 0; i < a.added.size(); ++i) {
    CHECK(a.added[i].id == b.added[i].id);
    CHECK(a.added[i].content == b.added[i].content);
    CHECK(a.added[i].special == b.added[i].special);
    CHECK(a.added[i].lstrip == b.added[i].lstrip);
    CHECK(a.added[i].rstrip == b.added[i].rstrip);
    CHECK(a.added[i].normalized == b.added[i].normalized);
    CHECK(a.added[i].single_word == b.added[i].single_word);
  }
  CHECK(a.split_regex == b.split_regex);
  CHECK(a.nfc == b.nfc);
  CHECK(a.add_prefix_space == b.add_prefix_space);
  CHECK(a.ignore_merges == b.ignore_merges);
  CHECK(a.byte_fallback == b.byte_fallback);
  CHECK(a.unk_id == b.unk_id);
  CHECK(a.bos_id == b.bos_id);
  CHECK(a.eos_id == b.eos_id);
  CHECK(a.pad_id == b.pad_id);
  CHECK(a.add_bos == b.add_bos);
  CHECK(a.add_eos == b.add_eos);
  CHECK(a.chat_template == b.chat_template);
  CHECK(a.end_of_turn_ids == b.end_of_turn_ids);
  CHECK(a.chat_template_jinja == b.chat_template_jinja);
}

// tests/data/format_tokenizer.json (TokenizerSpec's fields, as tools/sqdk.py takes them) as a spec.
TokenizerSpec spec_from_json(const std::string& path) {
  std::ifstream f(path);
  REQUIRE(f.good());
  const nlohmann::json j = nlohmann::json::parse(f);
  TokenizerSpec s;
  s.style = j["style"] == "byte_level_bpe" ? TokenizerStyle::byte_level_bpe : TokenizerStyle::sentencepiece_bpe;
  s.vocab = j["vocab"].get<std::vector<std::string>>();
  for (const auto& m : j["merges"]) s.merges.emplace_back(m[0].get<uint32_t>(), m[1].get<uint32_t>());
  for (const auto& a : j["added"])
    s.added.push_back({a["id"].get<uint32_t>(), a["content"].get<std::string>(), a.value("special", true),
                       a.value("lstrip", false), a.value("rstrip", false), a.value("normalized", false),
                       a.value("single_word", false)});
  s.split_regex = j.value("split_regex", "");
  s.nfc = j.value("nfc", false);
  s.add_prefix_space = j.value("add_prefix_space", false);
  s.ignore_merges = j.value("ignore_merges", false);
  s.byte_fallback = j.value("byte_fallback", false);
  auto id = [&](const char* key) { return j.contains(key) ? j[key].get<uint32_t>() : kNoToken; };
  s.unk_id = id("unk_id");
  s.bos_id = id("bos_id");
  s.eos_id = id("eos_id");
  s.pad_id = id("pad_id");
  s.add_bos = j.value("add_bos", false);
  s.add_eos = j.value("add_eos", false);
  REQUIRE(j.value("chat_template", "none") == std::string("chatml"));
  s.chat_template = ChatTemplateKind::chatml;
  s.chat_template_jinja = j.value("chat_template_jinja", "");
  s.end_of_turn_ids = j.value("end_of_turn_ids", std::vector<uint32_t>{});
  return s;
}

}  // namespace

TEST_CASE("format tokenizer section: tools/sqdk.py writes it byte-identical to the C++ writer") {
  TempDir dir;
  const std::string spec_path = std::string(SQRTDK_TEST_DATA_DIR) + "/format_tokenizer.json";
  const std::string py = dir.file("py.sqdk"), cpp = dir.file("cpp.sqdk");
  const std::string command = "/usr/bin/python3 " SQRTDK_SOURCE_DIR "/tools/sqdk.py from-spec-with-tokenizer " +
                              fixture_spec_path("llama") + " " + spec_path + " " + py + " 2>" + dir.file("err.txt");
  if (std::system(command.c_str()) != 0) {
    if (std::system("/usr/bin/python3 -c 'import numpy' >/dev/null 2>&1") != 0) {
      MESSAGE("skipped: /usr/bin/python3 cannot import numpy (install python3-numpy to run this check)");
      return;
    }
    FAIL("tools/sqdk.py failed: " << std::ifstream(dir.file("err.txt")).rdbuf());
  }
  const TokenizerSpec spec = spec_from_json(spec_path);
  write_with_tokenizer(bpe_fixture(), cpp, spec);
  CHECK(read_bytes(py) == read_bytes(cpp));
  check_same(*WeightFile::open(py)->tokenizer(), spec);
}

TEST_CASE("format tokenizer section: written, read back field for field, tensors unchanged") {
  TempDir dir;
  const std::string path = dir.file("tok.sqdk");
  const TokenizerSpec spec = small_spec();
  write_with_tokenizer(bpe_fixture(), path, spec);
  const auto wf = WeightFile::open(path);
  REQUIRE(wf->tokenizer() != nullptr);
  check_same(*wf->tokenizer(), spec);
  CHECK(wf->config().tokenizer == TokenizerKind::bpe);
  const std::vector<unsigned char> b = read_bytes(path);
  CHECK(get<uint32_t>(b, 4) == 2);  // version 2
  // The tensors are laid out exactly as in the version-1 file; the section follows them.
  const std::vector<unsigned char>& v1 = fixture_bytes("llama");
  const uint64_t data_offset = get<uint64_t>(v1, 96);
  CHECK(std::equal(v1.begin() + static_cast<long>(data_offset), v1.end(), b.begin() + static_cast<long>(data_offset)));
  const uint64_t offset = get<uint64_t>(b, 112);
  CHECK(offset % 64 == 0);
  CHECK(offset >= v1.size());
  CHECK(offset + get<uint32_t>(b, 120) == b.size());
  // Files without a tokenizer are still written as version 1, byte for byte as before.
  CHECK(get<uint32_t>(v1, 4) == 1);
  const auto v1_file = dir.file("v1.sqdk");
  write_bytes(v1_file, v1);
  CHECK(WeightFile::open(v1_file)->tokenizer() == nullptr);
}

TEST_CASE("format tokenizer section: serialize and deserialize round-trip, and every truncation is an error") {
  const TokenizerSpec spec = small_spec();
  const std::vector<unsigned char> bytes = serialize_tokenizer(spec);
  check_same(deserialize_tokenizer(bytes.data(), bytes.size(), "t"), spec);
  for (size_t n = 0; n < bytes.size(); ++n) {
    INFO("truncated to " << n << " bytes");
    CHECK_THROWS_AS(deserialize_tokenizer(bytes.data(), n, "t"), Error);
  }
  std::vector<unsigned char> longer = bytes;
  longer.push_back(0);
  CHECK_THROWS_WITH_AS(deserialize_tokenizer(longer.data(), longer.size(), "t"),
                       doctest::Contains("after the last field"), Error);
}

TEST_CASE("format tokenizer section: every bit flip in the section and its header fields is refused") {
  TempDir dir;
  const std::string path = dir.file("tok.sqdk");
  write_with_tokenizer(bpe_fixture(), path, small_spec());
  const std::vector<unsigned char> good = read_bytes(path);
  const uint64_t offset = get<uint64_t>(good, 112);
  std::mt19937_64 rng(7);
  int n_errors = 0, n_tries = 0;
  // Header bytes 112..127 (offset, size, CRC: covered by the header CRC), then random bits of the section (its CRC).
  std::vector<size_t> bits;
  for (size_t bit = 112 * 8; bit < 128 * 8; ++bit) bits.push_back(bit);
  for (int i = 0; i < 200; ++i) bits.push_back(offset * 8 + rng() % ((good.size() - offset) * 8));
  for (size_t bit : bits) {
    std::vector<unsigned char> b = good;
    b[bit / 8] ^= static_cast<unsigned char>(1u << (bit % 8));
    write_bytes(path, b);
    ++n_tries;
    try {
      WeightFile::open(path);
      FAIL("bit " << bit << " loaded");
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::bad_file);
      ++n_errors;
    }
  }
  CHECK(n_errors == n_tries);
  // With checksums off, a flipped piece byte still gets a clear error or a valid spec, never a crash.
  LoadOptions no_crc;
  no_crc.verify_checksums = false;
  for (int i = 0; i < 300; ++i) {
    std::vector<unsigned char> b = good;
    b[offset + rng() % (good.size() - offset)] = static_cast<unsigned char>(rng());
    write_bytes(path, b);
    try {
      WeightFile::open(path, no_crc);
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::bad_file);
    }
  }
}

TEST_CASE("format tokenizer section: misplaced sections and mismatched configs are refused by name") {
  TempDir dir;
  const std::string path = dir.file("tok.sqdk");
  write_with_tokenizer(bpe_fixture(), path, small_spec());
  const std::vector<unsigned char> good = read_bytes(path);
  const uint64_t offset = get<uint64_t>(good, 112);
  const auto entries = parse_entries(good);
  SUBCASE("overlapping a tensor") {
    std::vector<unsigned char> b = good;
    put<uint64_t>(b, 112, get<uint64_t>(b, entries.back().offset));
    reseal_v2(b);
    write_bytes(path, b);
    expect_load_error(path, {"tokenizer section", "overlaps tensor"});
  }
  SUBCASE("misaligned") {
    std::vector<unsigned char> b = good;
    put<uint64_t>(b, 112, offset + 4);
    reseal_v2(b);
    write_bytes(path, b);
    expect_load_error(path, {"tokenizer section", "multiple of 64"});
  }
  SUBCASE("past the end") {
    std::vector<unsigned char> b = good;
    put<uint32_t>(b, 120, get<uint32_t>(b, 120) + 1);
    reseal_v2(b);
    write_bytes(path, b);
    expect_load_error(path, {"tokenizer section", "file end"});
  }
  SUBCASE("tokenizer 2 in a version-1 file") {
    std::vector<unsigned char> b = good;
    put<uint32_t>(b, 4, 1);
    put<uint64_t>(b, 112, 0);
    put<uint32_t>(b, 120, 0);
    put<uint32_t>(b, 124, 0);
    reseal(b);
    write_bytes(path, b);
    expect_load_error(path, {"config", "version 1 file"});
  }
  SUBCASE("section fields without tokenizer 2") {
    std::vector<unsigned char> b = good;
    put<uint32_t>(b, 64, 0);
    reseal_v2(b);
    write_bytes(path, b);
    expect_load_error(path, {"tokenizer section", "not zero"});
  }
  SUBCASE("version 3") {
    std::vector<unsigned char> b = good;
    put<uint32_t>(b, 4, 3);
    write_bytes(path, b);
    expect_load_error(path, {"unsupported format version 3"});
  }
}

TEST_CASE("format tokenizer section: the writer refuses a spec that does not fit the config") {
  TempDir dir;
  const std::string path = dir.file("bad.sqdk");
  SUBCASE("BOS differs from the config") {
    TokenizerSpec s = small_spec();
    s.bos_id = 0;
    CHECK_THROWS_WITH_AS(write_with_tokenizer(bpe_fixture(), path, s), doctest::Contains("BOS/EOS"), Error);
  }
  SUBCASE("an id past n_vocab") {
    TokenizerSpec s = small_spec();
    s.added.push_back({300, "<x>", true});
    CHECK_THROWS_WITH_AS(write_with_tokenizer(bpe_fixture(), path, s), doctest::Contains("n_vocab"), Error);
  }
  SUBCASE("a merge whose result is not a piece") {
    TokenizerSpec s = small_spec();
    s.merges.push_back({1, 2});
    CHECK_THROWS_WITH_AS(write_with_tokenizer(bpe_fixture(), path, s), doctest::Contains("not in the vocabulary"),
                         Error);
  }
  SUBCASE("a chat template kind that its Jinja text is not") {
    TokenizerSpec s = small_spec();
    s.chat_template = ChatTemplateKind::llama3;
    CHECK_THROWS_WITH_AS(write_with_tokenizer(bpe_fixture(), path, s), doctest::Contains("Jinja text is chatml"),
                         Error);
  }
  SUBCASE("config says bpe but no tokenizer is given") {
    CHECK_THROWS_WITH_AS(write_fixture(bpe_fixture(), path), doctest::Contains("no tokenizer was given"), Error);
  }
  SUBCASE("a tokenizer for a config that says byte_level") {
    CHECK_THROWS_WITH_AS(write_with_tokenizer(load_fixture("llama"), path, small_spec()),
                         doctest::Contains("expected 2 = bpe"), Error);
  }
  CHECK_FALSE(std::filesystem::exists(path));
}

// The kind says whose fault it is: a spec the caller built and hands to Tokenizer::create or the writer is
// bad_input; the same fault read from a file (the .sqdk section, at open or when Model::load builds it) is bad_file.
TEST_CASE("tokenizer error kinds: a caller's bad spec is bad_input, a file's is bad_file") {
  TokenizerSpec bad_merge = small_spec();
  bad_merge.merges.push_back({1, 2});  // "bc" is not a piece
  TokenizerSpec bad_regex = small_spec();
  bad_regex.split_regex = "( ?\\p{L}+";  // an unclosed group: PCRE2 refuses it
  CHECK(kind_thrown([&] { Tokenizer::create(bad_merge); }) == ErrorKind::bad_input);
  CHECK(kind_thrown([&] { Tokenizer::create(bad_regex); }) == ErrorKind::bad_input);
  TempDir dir;
  CHECK(kind_thrown([&] { write_with_tokenizer(bpe_fixture(), dir.file("w.sqdk"), bad_merge); }) ==
        ErrorKind::bad_input);
  // The section's bytes of a spec that does not validate: deserialize refuses them as a file's.
  const std::vector<unsigned char> bytes = serialize_tokenizer(bad_merge);
  CHECK(kind_thrown([&] { deserialize_tokenizer(bytes.data(), bytes.size(), "section"); }) == ErrorKind::bad_file);
  // A .sqdk whose section validates but whose regex does not compile: the file opens (the reader does not compile
  // regexes), Model::load builds the tokenizer and names the file.
  const std::string path = dir.file("regex.sqdk");
  write_with_tokenizer(bpe_fixture(), path, bad_regex);
  CHECK_NOTHROW(WeightFile::open(path));
  CHECK(kind_thrown([&] { Model::load(path); }) == ErrorKind::bad_file);
  CHECK_THROWS_WITH_AS(Model::load(path), doctest::Contains("regex.sqdk: tokenizer section"), Error);
}

TEST_CASE("tokenizer with ids between the vocabulary and the added tokens: they stand for nothing") {
  // small_spec has 7 pieces and added tokens 256 and 257: ids 7..255 are neither (the fuzz corpus's tokenizer seed
  // found Tokenizer::create reading past the vocabulary for them).
  const auto t = Tokenizer::create(small_spec());
  CHECK(t->vocab_size() == 258);
  CHECK(t->piece(100).empty());
  CHECK(t->token_bytes(100).empty());
  const std::vector<uint32_t> ids = {3, 100, 256};
  CHECK(t->decode(ids, /*skip_special=*/false) == "ab<s>");
  CHECK(t->decode(ids, /*skip_special=*/true) == "ab");
}

TEST_CASE("sentencepiece merges: ranked by the merged piece's score, ties by the pieces' ids") {
  // pieces: a b c ab bc abc; scores favour "bc" over "ab", so "b c" merges before "a b".
  const std::vector<std::string> pieces = {"a", "b", "c", "ab", "bc", "abc", "▁", "▁a"};
  const std::vector<float> scores = {0, 0, 0, -2, -1, -3, 0, -0.5f};
  const auto merges = sentencepiece_merges(pieces, scores);
  const std::vector<std::pair<uint32_t, uint32_t>> expected = {{6, 0}, {1, 2}, {0, 1}, {0, 4}, {3, 2}};
  CHECK(merges == expected);
  CHECK_THROWS_AS(sentencepiece_merges(pieces, {0.0f}), Error);
}

}  // namespace sqrtdk::test
