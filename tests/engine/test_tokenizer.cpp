// The BPE tokenizers against Hugging Face `tokenizers` (issue 16): for four real vocabularies (tests/data/tokenizers,
// written by tools/tokenizer_fixtures/make_fixtures.js), every fixture string encodes to exactly the ids HF gives,
// with and without special tokens, and decodes to exactly HF's text (skip_special both ways), including random id
// sequences that make invalid UTF-8; streaming decode concatenates to decode(); the .sqdk section round-trips.
#include <doctest/doctest.h>

#include <sqrtdk/error.h>
#include <sqrtdk/tokenizer.h>

#include "engine/src/tokenizer/tokenizer_impl.h"

#include <nlohmann/json.hpp>

#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

using namespace sqrtdk;

namespace {

const std::string kDir = std::string(SQRTDK_TEST_DATA_DIR) + "/tokenizers/";

nlohmann::json load_expected(const std::string& name) {
  std::ifstream in(kDir + name + "/expected.json");
  REQUIRE(in.good());
  return nlohmann::json::parse(in);
}

TokenizerSpec load_spec(const std::string& name) {
  const std::string d = kDir + name + "/";
  if (name == "gpt2") return tokenizer_spec_from_gpt2_files(d + "encoder.json", d + "vocab.bpe");
  // llama3's and qwen3's tokenizer.json are committed packed and unpacked by the build (tests/CMakeLists.txt).
  const std::string json = name == "llama3" || name == "qwen3"
                               ? std::string(SQRTDK_UNPACKED_DATA_DIR) + "/tokenizers/" + name + "/tokenizer.json"
                               : d + "tokenizer.json";
  return tokenizer_spec_from_json(json, d + "tokenizer_config.json");
}

// One tokenizer per vocabulary for the whole run (reading Qwen3's 11 MB tokenizer.json takes a while).
std::shared_ptr<const Tokenizer> tokenizer(const std::string& name) {
  static std::map<std::string, std::shared_ptr<const Tokenizer>> cache;
  auto& t = cache[name];
  if (!t) t = Tokenizer::create(load_spec(name), name);
  return t;
}

std::vector<uint32_t> ids_of(const nlohmann::json& j) { return j.get<std::vector<uint32_t>>(); }

std::string show_ids(const std::vector<uint32_t>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? ", " : "") + std::to_string(ids[i]);
  return s + "]";
}

bool valid_utf8(const std::string& s) {
  std::string repaired;
  append_utf8_lossy(repaired, s, false);
  return repaired == s;
}

std::string stream(const Tokenizer& t, const std::vector<uint32_t>& ids, bool skip_special, bool& whole_chars) {
  TokenStreamer streamer(t, skip_special);
  std::string out;
  for (uint32_t id : ids) {
    const std::string piece = streamer.push(id);
    whole_chars = whole_chars && valid_utf8(piece);
    out += piece;
  }
  const std::string tail = streamer.finish();
  whole_chars = whole_chars && valid_utf8(tail);
  return out + tail;
}

// Every fixture of one vocabulary; reports the first few mismatches of each kind and the counts.
void check_fixture(const std::string& name) {
  const nlohmann::json expected = load_expected(name);
  const auto t = tokenizer(name);
  size_t n_encode = 0, n_decode = 0, bad_encode = 0, bad_decode = 0, bad_stream = 0;
  for (const auto& e : expected["encode"]) {
    const std::string text = e["text"];
    const auto want = ids_of(e["ids"]), want_plain = ids_of(e["ids_no_special"]);
    const auto got = t->encode(text, true), got_plain = t->encode(text, false);
    ++n_encode;
    if (got != want || got_plain != want_plain) {
      if (++bad_encode <= 5)
        FAIL_CHECK(name << ": encode '" << text << "'\n  got  " << show_ids(got) << " / " << show_ids(got_plain)
                        << "\n  want " << show_ids(want) << " / " << show_ids(want_plain));
    }
    for (bool skip : {false, true}) {
      const std::string want_text = skip ? e["decoded_skip_special"] : e["decoded"];
      const std::string got_text = t->decode(want, skip);
      if (got_text != want_text && ++bad_decode <= 5)
        FAIL_CHECK(name << ": decode " << show_ids(want) << " skip_special " << skip << "\n  got  '" << got_text
                        << "'\n  want '" << want_text << "'");
      bool whole = true;
      if (stream(*t, want, skip, whole) != want_text || !whole) {
        if (++bad_stream <= 5) FAIL_CHECK(name << ": streaming " << show_ids(want) << " skip_special " << skip);
      }
    }
  }
  for (const auto& e : expected["decode"]) {
    const auto ids = ids_of(e["ids"]);
    ++n_decode;
    for (bool skip : {false, true}) {
      const std::string want_text = skip ? e["text_skip_special"] : e["text"];
      const std::string got_text = t->decode(ids, skip);
      if (got_text != want_text && ++bad_decode <= 10)
        FAIL_CHECK(name << ": decode " << show_ids(ids) << " skip_special " << skip << "\n  got  '" << got_text
                        << "'\n  want '" << want_text << "'");
      bool whole = true;
      if (stream(*t, ids, skip, whole) != want_text || !whole) {
        if (++bad_stream <= 10) FAIL_CHECK(name << ": streaming " << show_ids(ids) << " skip_special " << skip);
      }
    }
  }
  MESSAGE(name << ": " << n_encode << " strings, " << n_decode << " random id sequences; mismatches: encode "
               << bad_encode << ", decode " << bad_decode << ", streaming " << bad_stream);
  CHECK(n_encode >= 200);
  CHECK(bad_encode == 0);
  CHECK(bad_decode == 0);
  CHECK(bad_stream == 0);
}

}  // namespace

TEST_CASE("tokenizer llama2 (SentencePiece BPE, byte fallback) matches Hugging Face") { check_fixture("llama2"); }
TEST_CASE("tokenizer llama3 (byte-level BPE, ignore_merges) matches Hugging Face") { check_fixture("llama3"); }
TEST_CASE("tokenizer qwen3 (byte-level BPE, NFC) matches Hugging Face") { check_fixture("qwen3"); }
TEST_CASE("tokenizer gpt2 (vocab.bpe + encoder.json) matches Hugging Face") { check_fixture("gpt2"); }

TEST_CASE("tokenizer files give the special tokens, stop ids and kinds of each family") {
  const auto llama2 = tokenizer("llama2");
  CHECK(std::string(llama2->kind_name()) == "sentencepiece_bpe");
  CHECK(llama2->bos_id() == 1);
  CHECK(llama2->eos_id() == 2);
  CHECK(llama2->spec()->add_bos);
  CHECK(llama2->stop_ids() == std::vector<uint32_t>{2});
  const auto llama3 = tokenizer("llama3");
  CHECK(std::string(llama3->kind_name()) == "byte_level_bpe");
  CHECK(llama3->bos_id() == 128000);
  CHECK(llama3->eos_id() == 128001);
  CHECK(llama3->stop_ids() == std::vector<uint32_t>{128001, 128009});  // <|end_of_text|>, <|eot_id|>
  CHECK(llama3->vocab_size() == 128256);
  const auto qwen3 = tokenizer("qwen3");
  CHECK(qwen3->eos_id() == 151645);  // <|im_end|>, from tokenizer_config.json
  CHECK(qwen3->stop_ids() == std::vector<uint32_t>{151645, 151643});
  CHECK(qwen3->spec()->pad_id == 151643);
  CHECK(qwen3->spec()->nfc);
  CHECK(!qwen3->is_special(151667));  // <think> is an added token that is not special
  CHECK(qwen3->is_special(151644));
  CHECK(qwen3->piece(151644) == "<|im_start|>");
  const auto gpt2 = tokenizer("gpt2");
  CHECK(gpt2->eos_id() == 50256);
  CHECK(gpt2->vocab_size() == 50257);
  CHECK(gpt2->token_bytes(gpt2->encode(" the", false).at(0)) == " the");
  CHECK(llama2->token_bytes(13) == "\n");  // <0x0A>
}

TEST_CASE("tokenizer spec round-trips through the sqdk section with identical encodings") {
  for (const char* name : {"llama2", "qwen3"}) {
    const auto t = tokenizer(name);
    const std::vector<unsigned char> bytes = serialize_tokenizer(*t->spec());
    const auto back = Tokenizer::create(deserialize_tokenizer(bytes.data(), bytes.size(), "section"), "section");
    CHECK(serialize_tokenizer(*back->spec()) == bytes);
    const nlohmann::json expected = load_expected(name);
    for (const auto& e : expected["encode"]) {
      const std::string text = e["text"];
      CHECK(back->encode(text, true) == t->encode(text, true));
    }
  }
}

TEST_CASE("tokenizer encodes identically from 4 threads sharing one Tokenizer") {
  const auto t = tokenizer("qwen3");
  const auto t2 = tokenizer("llama2");
  const nlohmann::json expected = load_expected("qwen3");
  std::vector<std::string> texts;
  for (const auto& e : expected["encode"]) texts.push_back(e["text"]);
  std::vector<std::vector<uint32_t>> want, want2;
  for (const auto& s : texts) want.push_back(t->encode(s)), want2.push_back(t2->encode(s));
  std::vector<int> ok(4, 0);
  std::vector<std::thread> threads;
  for (int k = 0; k < 4; ++k)
    threads.emplace_back([&, k] {
      bool good = true;
      for (int rep = 0; rep < 3; ++rep)
        for (size_t i = 0; i < texts.size(); ++i) {
          const size_t j = (i * 7 + k * 13) % texts.size();  // different orders in each thread
          good = good && t->encode(texts[j]) == want[j] && t2->encode(texts[j]) == want2[j];
          good = good && t->decode(want[j]) == t->decode(want[j]);
        }
      ok[k] = good;
    });
  for (auto& th : threads) th.join();
  CHECK(ok == std::vector<int>(4, 1));
}

TEST_CASE("tokenizer encode repairs invalid UTF-8 input like from_utf8_lossy") {
  const auto t = tokenizer("qwen3");
  CHECK(t->encode("a\xFF" "b", false) == t->encode("a\xEF\xBF\xBD" "b", false));
  CHECK(t->encode("\xE2\x82", false) == t->encode("\xEF\xBF\xBD", false));
}

// Rust's from_utf8_lossy on the classic cases of its own test suite (library/alloc/tests/string.rs).
TEST_CASE("tokenizer append_utf8_lossy agrees with Rust's from_utf8_lossy") {
  const std::string r = "\xEF\xBF\xBD";
  const std::pair<std::string, std::string> cases[] = {
      {"hello", "hello"},
      {"\xE0\xB8\xA8\xE0\xB9\x84\xE0\xB8\x97\xE0\xB8\xA2\xE4\xB8\xAD\xE5\x8D\x8E Vi\xE1\xBB\x87t Nam",
       "\xE0\xB8\xA8\xE0\xB9\x84\xE0\xB8\x97\xE0\xB8\xA2\xE4\xB8\xAD\xE5\x8D\x8E Vi\xE1\xBB\x87t Nam"},
      {"Hello\xC2 There\xFF Goodbye", "Hello" + r + " There" + r + " Goodbye"},
      {"Hello\xC0\x80 There\xE6\x83 Goodbye", "Hello" + r + r + " There" + r + " Goodbye"},
      {"\xF5" "foo\xF5\x80" "bar", r + "foo" + r + r + "bar"},
      {"\xF1" "foo\xF1\x80" "foo\xF1\x80\x80" "foo", r + "foo" + r + "foo" + r + "foo"},
      {"\xF4" "foo\xF4\x80" "foo\xF4\xBF" "foo", r + "foo" + r + "foo" + r + r + "foo"},
      {"\xF0\x80\x80\x80" "foo\xF0\x90\x80\x80" "bar", r + r + r + r + "foo\xF0\x90\x80\x80" "bar"},
      {"\xED\xA0\x80" "foo\xED\xBF\xBF" "bar", r + r + r + "foo" + r + r + r + "bar"},
      {"Hello \xF0\x90\x80World", "Hello " + r + "World"},  // the example of from_utf8_lossy's documentation
  };
  for (const auto& [in, want] : cases) {
    std::string out;
    CHECK(append_utf8_lossy(out, in, false) == 0);
    CHECK(out == want);
  }
  std::string out;
  CHECK(append_utf8_lossy(out, "ab\xF0\x9F\x98", true) == 3);  // a valid prefix of 😀 waits for its last byte
  CHECK(out == "ab");
}

TEST_CASE("tokenizer streaming never splits a character and matches decode on byte pieces") {
  const auto t = tokenizer("llama2");
  // <0xE2> <0x82> <0xAC> is '€'; HF's ByteFallback turns an invalid run into one U+FFFD per byte token.
  const std::vector<uint32_t> euro = {29871, 0xE2 + 3, 0x82 + 3, 0xAC + 3, 1, 0x41 + 3, 0xFF + 3};
  TokenStreamer s(*t, false);
  std::string all;
  for (uint32_t id : euro) all += s.push(id);
  all += s.finish();
  CHECK(all == t->decode(euro, false));
  CHECK(t->decode(std::vector<uint32_t>{0xE2 + 3, 0x82 + 3}) == "\xEF\xBF\xBD\xEF\xBF\xBD");
}
