// Model + Session + executor: the fast path against the reference forward (the spec), cache and chunking,
// determinism, and bad input at the API boundary.
#include <doctest/doctest.h>

#include "tests/common/isas.h"

#include <sqrtdk/error.h>
#include <sqrtdk/generate.h>
#include <sqrtdk/model.h>
#include <sqrtdk/session.h>

#include "engine/src/runtime/reference.h"
#include "tests/common/toy_model.h"

#include <cmath>
#include <cstring>
#include <vector>

using namespace sqrtdk;

namespace {

std::vector<uint32_t> test_tokens(size_t n, uint32_t n_vocab) {
  std::vector<uint32_t> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = static_cast<uint32_t>((i * 37 + 11) % n_vocab);
  return t;
}

double max_abs(std::span<const float> v) {
  double m = 0;
  for (float x : v) m = std::max(m, std::fabs(double{x}));
  return m;
}

// The fast path (f32 everywhere, different summation order in GEMM and attention, fused epilogues, float exp)
// against the double-accumulating reference: after a few layers of O(1) activations the difference is a few
// float ulps of the logits' scale; 1e-4 relative to the largest logit leaves ~100x margin over what we observe.
void check_close(std::span<const float> got, const std::vector<float>& want, double rel = 1e-4) {
  REQUIRE(got.size() == want.size());
  const double bound = rel * std::max(1.0, max_abs(want));
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::fabs(double{got[i]} - want[i]));
  CHECK(worst <= bound);
}

struct Case {
  const char* name;
  ModelConfig config;
};

std::vector<Case> cases() {
  ModelConfig gqa = test::toy_llama_config();
  ModelConfig mha = test::toy_llama_config();
  mha.n_kv_heads = mha.n_heads;
  mha.tied_embeddings = true;
  ModelConfig interleaved = test::toy_llama_config();
  interleaved.rope_interleaved = true;
  interleaved.n_kv_heads = 1;  // MQA
  return {{"llama-gqa", gqa}, {"llama-mha-tied", mha}, {"llama-mqa-interleaved", interleaved},
          {"gpt2", test::toy_gpt2_config()}};
}

}  // namespace

TEST_CASE("session: every ISA matches the reference forward, all positions") {
  test::TempDir dir;
  for (const Case& c : cases()) {
    const std::string path = dir.file(std::string(c.name) + ".sqdk");
    test::write_toy_model(path, c.config, 7);
    const auto tokens = test_tokens(19, c.config.n_vocab);
    const auto want = reference_forward(*WeightFile::open(path), tokens);
    for (Isa isa : test::f32_isas()) {
      CAPTURE(c.name);
      const std::string isa_str = isa_name(isa);
      CAPTURE(isa_str);
      ModelOptions mo;
      mo.isa = static_cast<int>(isa);
      Session s(Model::load(path, mo));
      check_close(s.prefill(tokens, /*all_logits=*/true), want);
    }
  }
}

TEST_CASE("session: decode step by step and chunked prefill equal one prefill") {
  test::TempDir dir;
  for (const Case& c : cases()) {
    CAPTURE(c.name);
    const std::string path = dir.file("m.sqdk");
    test::write_toy_model(path, c.config, 11);
    auto model = Model::load(path);
    const auto tokens = test_tokens(23, c.config.n_vocab);
    Session full(model);
    auto all = full.prefill(tokens, true);
    const std::vector<float> want(all.begin(), all.end());
    const size_t V = c.config.n_vocab;

    Session stepwise(model);
    for (size_t i = 0; i < tokens.size(); ++i) {
      auto logits = stepwise.decode(tokens[i]);
      const std::vector<float> row(want.begin() + i * V, want.begin() + (i + 1) * V);
      check_close(logits, row, 1e-5);  // same kernels, different blocking of rows: a few ulps
    }
    SessionOptions chunked;
    chunked.max_batch = 5;  // 23 tokens in chunks of 5: a partial last chunk
    Session s5(model, chunked);
    check_close(s5.prefill(tokens, true), want, 1e-5);
    CHECK(s5.n_past() == tokens.size());
  }
}

TEST_CASE("session: bit-identical for 1 and 2 threads") {
  test::TempDir dir;
  for (const Case& c : cases()) {
    CAPTURE(c.name);
    const std::string path = dir.file("m.sqdk");
    test::write_toy_model(path, c.config, 3);
    auto model = Model::load(path);
    const auto tokens = test_tokens(17, c.config.n_vocab);
    SessionOptions one, two;
    one.n_threads = 1;
    two.n_threads = 2;
    Session s1(model, one), s2(model, two);
    auto a = s1.prefill(tokens, true);
    std::vector<float> a_copy(a.begin(), a.end());
    auto b = s2.prefill(tokens, true);
    REQUIRE(a_copy.size() == b.size());
    CHECK(std::memcmp(a_copy.data(), b.data(), b.size() * sizeof(float)) == 0);
    auto da = s1.decode(5);
    std::vector<float> da_copy(da.begin(), da.end());
    auto db = s2.decode(5);
    CHECK(std::memcmp(da_copy.data(), db.data(), db.size() * sizeof(float)) == 0);
  }
}

// Without all_logits the last block runs past its KV store for each chunk's last row only
// (ForwardState::last_rows_only). The logits must still be the last position's, the cache must hold every
// position's keys and values exactly as a full prefill leaves them, and threads must not change a bit.
TEST_CASE("session: last-position prefill matches all_logits and leaves the same cache") {
  test::TempDir dir;
  for (const Case& c : cases()) {
    CAPTURE(c.name);
    const std::string path = dir.file("m.sqdk");
    test::write_toy_model(path, c.config, 5);
    auto model = Model::load(path);
    const auto tokens = test_tokens(23, c.config.n_vocab);
    const size_t V = c.config.n_vocab;
    for (size_t max_batch : {size_t{512}, size_t{5}}) {  // one chunk; chunks of 5 with a partial last one
      CAPTURE(max_batch);
      SessionOptions o;
      o.max_batch = max_batch;
      Session full(model, o), last(model, o);
      const auto all = full.prefill(tokens, true);
      const std::vector<float> want(all.end() - static_cast<std::ptrdiff_t>(V), all.end());
      const auto got = last.prefill(tokens);
      REQUIRE(got.size() == V);
      check_close(got, want, 1e-5);  // the last block's row alone takes other kernels than in a block of rows
      const std::vector<float> got_copy(got.begin(), got.end());
      // Same cache, bit for bit: the next step computes the same logits in both sessions.
      const auto next_full = full.decode(7);
      const std::vector<float> next_want(next_full.begin(), next_full.end());
      const auto next_last = last.decode(7);
      REQUIRE(next_last.size() == V);
      CHECK(std::memcmp(next_last.data(), next_want.data(), V * sizeof(float)) == 0);
      SessionOptions two = o;
      two.n_threads = 2;
      Session last2(model, two);
      const auto got2 = last2.prefill(tokens);
      CHECK(std::memcmp(got2.data(), got_copy.data(), V * sizeof(float)) == 0);
    }
  }
}

TEST_CASE("session: bad input is an error and the session stays usable") {
  test::TempDir dir;
  const ModelConfig c = test::toy_llama_config();
  const std::string path = dir.file("m.sqdk");
  test::write_toy_model(path, c, 5);
  auto model = Model::load(path);
  Session s(model);
  CHECK_THROWS_WITH_AS(s.prefill(std::vector<uint32_t>{}), doctest::Contains("empty"), Error);
  CHECK_THROWS_WITH_AS(s.prefill(std::vector<uint32_t>{1, 2, c.n_vocab}), doctest::Contains("outside the vocabulary"),
                       Error);
  CHECK(s.n_past() == 0);
  s.prefill(test_tokens(c.max_seq - 1, c.n_vocab));
  CHECK_THROWS_WITH_AS(s.prefill(std::vector<uint32_t>{1, 2}), doctest::Contains("context too long"), Error);
  CHECK(s.n_past() == c.max_seq - 1);
  auto logits = s.decode(3);  // still usable: exactly fills the context
  CHECK(logits.size() == c.n_vocab);
  CHECK_THROWS_AS(s.decode(3), Error);
  s.reset();
  CHECK(s.n_past() == 0);
  CHECK(s.decode(3).size() == c.n_vocab);
  SessionOptions too_long;
  too_long.max_context = c.max_seq + 1;
  CHECK_THROWS_WITH_AS(Session(model, too_long), doctest::Contains("max_seq"), Error);
}

TEST_CASE("generate: greedy follows the argmax, sampling is reproducible by seed") {
  test::TempDir dir;
  const ModelConfig c = test::toy_llama_config();
  const std::string path = dir.file("m.sqdk");
  test::write_toy_model(path, c, 9);
  auto model = Model::load(path);
  const auto prompt = test_tokens(4, c.n_vocab);

  GenerateOptions greedy;
  greedy.sampling.temperature = 0;
  greedy.max_new_tokens = 10;
  greedy.stop_at_eos = false;  // random weights: the toy's EOS may come first
  Session s(model);
  const GenerateResult full = generate(s, prompt, greedy);
  CHECK(full.stop_reason == StopReason::max_tokens);
  const std::vector<uint32_t>& out = full.tokens;
  REQUIRE(out.size() == 10);
  // Re-derive each greedy token from a fresh prefill of the growing sequence.
  std::vector<uint32_t> seq(prompt.begin(), prompt.end());
  for (uint32_t tok : out) {
    Session fresh(model);
    auto logits = fresh.prefill(seq);
    const size_t argmax = std::max_element(logits.begin(), logits.end()) - logits.begin();
    CHECK(tok == argmax);
    seq.push_back(tok);
  }

  GenerateOptions sampled;
  sampled.sampling = {1.0f, 0, 0.9f, 1234};
  sampled.max_new_tokens = 12;
  sampled.stop_at_eos = false;
  Session a(model), b(model);
  const auto ta = generate(a, prompt, sampled).tokens;
  const auto tb = generate(b, prompt, sampled).tokens;
  CHECK(ta == tb);
  sampled.sampling.seed = 99;
  Session other(model);
  CHECK(generate(other, prompt, sampled).tokens != ta);  // 12 draws over 67 tokens: a collision is astronomically unlikely

  // Stop tokens end generation and are included; the callback sees each token.
  GenerateOptions stop = greedy;
  stop.stop_tokens = {out[2]};
  std::vector<uint32_t> streamed;
  stop.on_token = [&](uint32_t t) {
    streamed.push_back(t);
    return true;
  };
  Session st(model);
  const GenerateResult stopped_result = generate(st, prompt, stop);
  const std::vector<uint32_t>& stopped = stopped_result.tokens;
  CHECK(stopped_result.stop_reason == StopReason::stop_token);
  const size_t first = std::find(out.begin(), out.end(), out[2]) - out.begin();
  CHECK(stopped == std::vector<uint32_t>(out.begin(), out.begin() + first + 1));
  CHECK(streamed == stopped);
}

TEST_CASE("sampler: top_k = 1 is greedy; bad options are errors") {
  std::vector<float> logits = {0.1f, 2.0f, -1.0f, 2.0f, 0.5f};
  Sampler greedy({0.0f, 0, 1.0f, 1});
  CHECK(greedy.sample(logits) == 1);  // ties go to the lowest id
  Sampler top1({1.5f, 1, 1.0f, 7});
  for (int i = 0; i < 20; ++i) CHECK(top1.sample(logits) == 1);
  CHECK_THROWS_AS(Sampler({-1.0f, 0, 1.0f, 1}), Error);
  CHECK_THROWS_AS(Sampler({1.0f, 0, 0.0f, 1}), Error);
  CHECK_THROWS_AS(greedy.sample({}), Error);
}

TEST_CASE("byte tokenizer round-trips bytes, including invalid UTF-8") {
  const std::string text = std::string("h\xc3\xa9llo \xff\xfe", 9);
  const auto ids = byte_encode(text, 256);
  REQUIRE(ids.size() == text.size() + 1);
  CHECK(ids[0] == 256);
  CHECK(byte_decode(ids) == text);
}

TEST_CASE("session: a moved-from session is a clear error, not a crash; assigning to it revives it") {
  const ModelConfig c = test::toy_llama_config();
  const auto model = test::load_toy_model(c, 5);
  Session a(model);
  a.prefill(test_tokens(3, c.n_vocab));
  Session b(std::move(a));
  CHECK(b.n_past() == 3);  // the context moved with it
  CHECK_THROWS_WITH_AS(a.decode(1), doctest::Contains("moved from"), Error);  // NOLINT(bugprone-use-after-move)
  CHECK_THROWS_WITH_AS(a.n_past(), doctest::Contains("moved from"), Error);
  CHECK_THROWS_AS(a.reset(), Error);
  CHECK_THROWS_AS(a.model(), Error);
  CHECK_THROWS_AS(a.set_n_threads(1), Error);
  CHECK_THROWS_AS(a.capture_attention(0), Error);
  CHECK_THROWS_AS(a.scratch_bytes(), Error);
  try {
    a.decode(1);
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::bad_input);
  }
  a = Session(model);  // assignment gives it a state again
  CHECK(a.n_past() == 0);
  CHECK(a.decode(1).size() == c.n_vocab);
}
