// generate() with text: stop strings (cut OpenAI-style, found across token boundaries), streamed text in whole
// UTF-8 characters that concatenates to the result, the stop reason, and the end tokens stopping by default.
// On the bundled trained model (byte tokenizer), whose greedy continuation is known to be English-like text.
#include <doctest/doctest.h>

#include <sqrtdk/error.h>
#include <sqrtdk/generate.h>
#include <sqrtdk/tokenizer.h>

#include <string>

namespace sqrtdk {
namespace {

std::shared_ptr<const Model> bundled() {
  static const auto model = Model::load(std::string(SQRTDK_SOURCE_DIR) + "/models/tiny-llama-bytes.sqdk");
  return model;
}

GenerateOptions greedy(size_t n) {
  GenerateOptions g;
  g.sampling.temperature = 0;
  g.max_new_tokens = n;
  return g;
}

}  // namespace

TEST_CASE("generate text: the text is the tokens' text and streams in pieces that concatenate to it") {
  const auto model = bundled();
  const Tokenizer& t = model->require_tokenizer();
  const auto prompt = t.encode("And God said");
  Session s(model);
  GenerateOptions g = greedy(40);
  std::string streamed;
  size_t calls = 0;
  g.on_text = [&](std::string_view piece) {
    streamed += piece;
    ++calls;
    return true;
  };
  const GenerateResult r = generate(s, prompt, g);
  CHECK(r.stop_reason == StopReason::max_tokens);
  REQUIRE(r.tokens.size() == 40);
  CHECK(r.text == t.decode(r.tokens, /*skip_special=*/true));
  CHECK(streamed == r.text);
  CHECK(calls == 40);  // once per token
}

TEST_CASE("generate text: a stop string ends generation where it completes and is cut from the text") {
  const auto model = bundled();
  const Tokenizer& t = model->require_tokenizer();
  const auto prompt = t.encode("And God said");
  Session s(model);
  const GenerateResult full = generate(s, prompt, greedy(40));
  REQUIRE(full.text.size() >= 20);
  // A stop string taken from the middle of the greedy text: every token up to the one completing it, no further.
  const std::string stop = full.text.substr(10, 3);
  const size_t at = full.text.find(stop);
  GenerateOptions g = greedy(40);
  g.stop_strings = {"never appears \x01", stop};
  std::string streamed;
  g.on_text = [&](std::string_view piece) {
    streamed += piece;
    CHECK(streamed.find(stop) == std::string::npos);  // the stop string is never handed out, even in part at the end
    return true;
  };
  s.reset();
  const GenerateResult r = generate(s, prompt, g);
  CHECK(r.stop_reason == StopReason::stop_string);
  CHECK(r.text == full.text.substr(0, at));
  CHECK(streamed == r.text);
  CHECK(r.tokens.size() == at + stop.size());  // bytes are tokens here: the completing token is the last
  CHECK(std::equal(r.tokens.begin(), r.tokens.end(), full.tokens.begin()));

  GenerateOptions empty = greedy(4);
  empty.stop_strings = {""};
  s.reset();
  CHECK_THROWS_WITH_AS(generate(s, prompt, empty), doctest::Contains("empty stop string"), Error);
}

TEST_CASE("generate text: end tokens stop by default, stop tokens and callbacks give their reason") {
  const auto model = bundled();
  const Tokenizer& t = model->require_tokenizer();
  REQUIRE(t.stop_ids() == std::vector<uint32_t>{model->config().eos_id});
  const auto prompt = t.encode("And God said");
  Session s(model);
  const GenerateResult full = generate(s, prompt, greedy(12));
  REQUIRE(full.tokens.size() == 12);
  GenerateOptions g = greedy(12);
  g.stop_tokens = {full.tokens[5]};
  s.reset();
  const GenerateResult r = generate(s, prompt, g);
  CHECK(r.stop_reason == StopReason::stop_token);
  CHECK(r.tokens.back() == full.tokens[5]);
  g.stop_tokens.clear();
  g.on_token = [n = 0](uint32_t) mutable { return ++n < 4; };
  s.reset();
  const GenerateResult c = generate(s, prompt, g);
  CHECK(c.stop_reason == StopReason::callback);
  CHECK(c.tokens.size() == 4);
  // Context full: a session of 16 positions.
  SessionOptions so;
  so.max_context = prompt.size() + 3;
  Session small(model, so);
  const GenerateResult f = generate(small, prompt, greedy(12));
  CHECK(f.stop_reason == StopReason::context_full);
  CHECK(std::string(stop_reason_name(StopReason::stop_string)) == "stop_string");
}

TEST_CASE("token streamer: never emits half a UTF-8 character, and matches decode") {
  const auto bytes = Tokenizer::bytes(258, 256, 257);
  const std::string text = "a\xC3\xA9 \xE4\xBD\xA0\xF0\x9F\x99\x82 \xFF\xC3(\xE4\xBD \xF0\x9F";  // é 你 🙂, then invalid
  std::vector<uint32_t> ids;
  for (unsigned char c : text) ids.push_back(c);
  ids.insert(ids.begin() + 3, 256);  // a special token in the middle is skipped
  TokenStreamer st(*bytes);
  std::string out;
  for (uint32_t id : ids) {
    const std::string piece = st.push(id);
    // Each piece is valid UTF-8 on its own (replacement characters included).
    for (size_t i = 0; i < piece.size();) {
      const unsigned char b = static_cast<unsigned char>(piece[i]);
      const size_t len = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
      REQUIRE(i + len <= piece.size());
      i += len;
    }
    out += piece;
  }
  out += st.finish();
  CHECK(out == bytes->decode(ids, /*skip_special=*/true));
  // Rust's from_utf8_lossy: one U+FFFD per maximal invalid subpart: FF, C3 (cut by '('), E4 BD (cut by ' '),
  // F0 9F (cut by the end).
  CHECK(out == "a\xC3\xA9 \xE4\xBD\xA0\xF0\x9F\x99\x82 \xEF\xBF\xBD\xEF\xBF\xBD(\xEF\xBF\xBD \xEF\xBF\xBD");
}

TEST_CASE("generate text: max_new_tokens = 0 prefills and checks the prompt, and makes no token") {
  // It returned before the prefill: the session was left as it was and a bad id passed unnoticed.
  Session session(bundled());
  const std::vector<uint32_t> prompt = {256, 84, 104, 101};
  const GenerateResult r = generate(session, prompt, greedy(0));
  CHECK(r.tokens.empty());
  CHECK(r.stop_reason == StopReason::max_tokens);
  CHECK(session.n_past() == prompt.size());
  session.reset();
  const std::vector<uint32_t> bad = {1, 0xFFFFFFFFu};
  CHECK_THROWS_AS(generate(session, bad, greedy(0)), Error);
  CHECK(session.n_past() == 0);
}

}  // namespace sqrtdk
