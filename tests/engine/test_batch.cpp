// Batch (continuous batching): logits against a Session, bit-identical rows alone or beside others (any thread
// count, mixed prefill and decode in one step), prefix forks, KV memory that grows with the sequence, bad input.
#include <doctest/doctest.h>

#include <sqrtdk/batch.h>
#include <sqrtdk/error.h>
#include <sqrtdk/model.h>
#include <sqrtdk/session.h>

#include "tests/common/toy_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <vector>

using namespace sqrtdk;

namespace {

std::vector<uint32_t> tokens_for(size_t n, uint32_t n_vocab, uint32_t seed) {
  std::vector<uint32_t> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = static_cast<uint32_t>((i * 37 + seed * 11 + 5) % n_vocab);
  return t;
}

uint32_t argmax(std::span<const float> v) {
  return static_cast<uint32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

// A sequence's script: its prompt, fed in chunks of `chunk`, then greedy decode for n_decode tokens. Returns every
// logits row it saw (one per step), in order.
struct Script {
  std::vector<uint32_t> prompt;
  size_t chunk = 0;
  size_t n_decode = 0;
};

// Runs the scripts together in one Batch, starting script i at step start[i]: each step holds the next piece of
// every started, unfinished script (prefill chunks beside decode tokens).
std::vector<std::vector<float>> run_together(const std::shared_ptr<const Model>& model, const std::vector<Script>& s,
                                             const std::vector<size_t>& start, int threads) {
  Batch batch(model, {.max_context = 0, .max_rows = 64, .kv_block = 4, .n_threads = threads});
  const size_t n_vocab = model->config().n_vocab;
  std::vector<std::vector<float>> seen(s.size());
  std::vector<Batch::SequenceId> ids(s.size());
  std::vector<size_t> fed(s.size(), 0), decoded(s.size(), 0);
  std::vector<uint32_t> next(s.size(), 0);
  for (size_t i = 0; i < s.size(); ++i) ids[i] = batch.add_sequence();
  for (size_t step = 0;; ++step) {
    std::vector<Batch::Work> work;
    std::vector<size_t> who;
    for (size_t i = 0; i < s.size(); ++i) {
      if (step < start[i] || decoded[i] == s[i].n_decode) continue;
      if (fed[i] < s[i].prompt.size()) {
        const size_t n = std::min(s[i].chunk, s[i].prompt.size() - fed[i]);
        work.push_back({ids[i], std::span<const uint32_t>(s[i].prompt).subspan(fed[i], n)});
        fed[i] += n;
      } else {
        work.push_back({ids[i], std::span<const uint32_t>(&next[i], 1)});
        ++decoded[i];
      }
      who.push_back(i);
    }
    if (work.empty()) {
      if (std::all_of(decoded.begin(), decoded.end(), [&](size_t d) { return d > 0; }) ||
          step > 1000)
        break;
      continue;
    }
    const std::span<const float> logits = batch.step(work);
    REQUIRE(logits.size() == work.size() * n_vocab);
    for (size_t j = 0; j < who.size(); ++j) {
      const std::span<const float> row = logits.subspan(j * n_vocab, n_vocab);
      seen[who[j]].insert(seen[who[j]].end(), row.begin(), row.end());
      if (fed[who[j]] == s[who[j]].prompt.size()) next[who[j]] = argmax(row);
    }
  }
  return seen;
}

}  // namespace

TEST_CASE("batch: a sequence's logits are bit-identical alone or beside others, for 1 and 2 threads") {
  for (const ModelConfig& config : {test::toy_llama_config(), test::toy_gpt2_config()}) {
    CAPTURE(arch_name(config.arch));
    const auto model = test::load_toy_model(config, 11);
    const uint32_t v = config.n_vocab;
    const Script a{tokens_for(13, v, 1), 5, 8};
    const std::vector<Script> others = {{tokens_for(3, v, 2), 3, 12}, {tokens_for(20, v, 3), 7, 4},
                                        {tokens_for(1, v, 4), 1, 15}, {tokens_for(9, v, 5), 9, 6}};
    const auto alone = run_together(model, {a}, {0}, 1)[0];
    REQUIRE(alone.size() == (3 + a.n_decode) * v);  // 3 prompt chunks (5 + 5 + 3), then the decode steps
    for (int threads : {1, 2}) {
      CAPTURE(threads);
      std::vector<Script> all = others;
      all.insert(all.begin() + 2, a);  // a is item 2 of the steps it shares
      // The others start before, with and after a: a's prompt chunks share steps with their decode tokens and
      // their prompt chunks with a's decode tokens.
      const auto together = run_together(model, all, {0, 1, 2, 2, 6}, threads);
      REQUIRE(together[2].size() == alone.size());
      CHECK(std::memcmp(together[2].data(), alone.data(), alone.size() * sizeof(float)) == 0);
    }
  }
}

TEST_CASE("batch: logits agree with a Session's (another K order at M = 1, so to rounding)") {
  const ModelConfig config = test::toy_llama_config();
  const auto model = test::load_toy_model(config, 12);
  const auto prompt = tokens_for(17, config.n_vocab, 6);
  Session session(model);
  Batch batch(model);
  const auto id = batch.add_sequence();
  const auto s_logits = session.prefill(prompt);
  const std::vector<float> want(s_logits.begin(), s_logits.end());
  const Batch::Work work{id, prompt};
  const auto b_logits = batch.step({&work, 1});
  REQUIRE(b_logits.size() == want.size());
  // Same math in float with a different summation order in the M = 1 products (the Session's prefill here is
  // M = 17, so the same kernel: exact except the head, M = 1 in both). 1e-5 of the logits' scale is ~100 float
  // ulps: a wrong position, cache or row mix-up moves logits by O(0.1).
  double worst = 0, scale = 1;
  for (size_t i = 0; i < want.size(); ++i) {
    worst = std::max(worst, std::fabs(double{b_logits[i]} - want[i]));
    scale = std::max(scale, std::fabs(double{want[i]}));
  }
  CHECK(worst <= 1e-5 * scale);
  // Then decode steps: the Session decodes at M = 1 with the decode kernel.
  uint32_t next = argmax(b_logits);
  for (int i = 0; i < 6; ++i) {
    const auto s_row = session.decode(next);
    const Batch::Work w{id, {&next, 1}};
    const auto b_row = batch.step({&w, 1});
    for (size_t j = 0; j < s_row.size(); ++j) CHECK(std::fabs(double{b_row[j]} - s_row[j]) <= 1e-5 * scale);
    next = argmax(b_row);
  }
}

TEST_CASE("batch: fork_sequence continues exactly as the sequence it copies") {
  const ModelConfig config = test::toy_llama_config();
  const auto model = test::load_toy_model(config, 13);
  const auto prompt = tokens_for(16, config.n_vocab, 7);
  const auto tail = tokens_for(5, config.n_vocab, 8);
  Batch batch(model, {.max_context = 0, .max_rows = 32, .kv_block = 4, .n_threads = 1});
  const auto a = batch.add_sequence();
  const Batch::Work first{a, std::span<const uint32_t>(prompt).first(8)};
  batch.step({&first, 1});
  const Batch::Work second{a, std::span<const uint32_t>(prompt).subspan(8)};
  batch.step({&second, 1});
  // b: a's first 8 tokens copied, then the same second chunk: the same as a after its second chunk.
  const auto b = batch.fork_sequence(a, 8, 30);
  CHECK(batch.n_past(b) == 8);
  CHECK(batch.kv_bytes_for(30) == batch.kv_bytes_for(32));  // rounded up to kv_block
  const Batch::Work again{b, std::span<const uint32_t>(prompt).subspan(8)};
  const auto b_logits = batch.step({&again, 1});
  const std::vector<float> b_copy(b_logits.begin(), b_logits.end());
  const Batch::Work a_tail{a, tail}, b_tail{b, tail};
  const std::vector<Batch::Work> both = {a_tail, b_tail};
  const auto tails = batch.step(both);
  CHECK(std::memcmp(tails.data(), tails.data() + config.n_vocab, config.n_vocab * sizeof(float)) == 0);
  CHECK_THROWS_AS(batch.fork_sequence(a, batch.n_past(a) + 1), Error);
}

TEST_CASE("batch: KV memory grows with the sequences, not with max_context") {
  const ModelConfig config = test::toy_llama_config();
  const auto model = test::load_toy_model(config, 14);
  Batch batch(model, {.max_context = 48, .max_rows = 16, .kv_block = 4, .n_threads = 1});
  const size_t per_position = 2 * size_t{config.n_layers} * config.n_kv_heads * config.head_dim * sizeof(float);
  CHECK(batch.kv_bytes_for(1) == 4 * per_position);
  CHECK(batch.kv_bytes_for(48) == 48 * per_position);
  std::vector<Batch::SequenceId> ids;
  for (int i = 0; i < 10; ++i) ids.push_back(batch.add_sequence());
  CHECK(batch.kv_bytes() == 0);
  const auto t = tokens_for(3, config.n_vocab, 9);
  for (auto id : ids) {
    const Batch::Work w{id, t};
    batch.step({&w, 1});
  }
  CHECK(batch.kv_bytes() == 10 * 4 * per_position);  // 10 sequences of 3 tokens: one block each
  // Growing past a block doubles at least, keeping the contents (the logits continue as a fresh run's).
  batch.reserve(ids[0], 20);
  CHECK(batch.kv_bytes() == (9 * 4 + 20) * per_position);
  batch.remove_sequence(ids[1]);
  CHECK(batch.kv_bytes() == (8 * 4 + 20) * per_position);
  CHECK(batch.n_sequences() == 9);
}

TEST_CASE("batch: bad steps throw before any sequence changes") {
  const ModelConfig config = test::toy_llama_config();  // max_seq 48
  const auto model = test::load_toy_model(config, 15);
  Batch batch(model, {.max_context = 0, .max_rows = 8, .kv_block = 4, .n_threads = 1});
  const auto a = batch.add_sequence(), b = batch.add_sequence();
  const auto t = tokens_for(4, config.n_vocab, 10);
  const std::vector<uint32_t> bad = {1, config.n_vocab};
  const std::vector<uint32_t> nine(9, 1);
  CHECK_THROWS_AS(batch.step({}), Error);
  CHECK_THROWS_WITH_AS(batch.step(std::vector<Batch::Work>{{a, t}, {a, t}}), doctest::Contains("twice"), Error);
  CHECK_THROWS_WITH_AS(batch.step(std::vector<Batch::Work>{{a, t}, {b, bad}}), doctest::Contains("vocabulary"),
                       Error);
  CHECK_THROWS_WITH_AS(batch.step(std::vector<Batch::Work>{{a, t}, {b, {}}}), doctest::Contains("no tokens"), Error);
  CHECK_THROWS_WITH_AS(batch.step(std::vector<Batch::Work>{{a, t}, {b, t}, {b + 100, t}}),
                       doctest::Contains("no sequence"), Error);
  CHECK_THROWS_WITH_AS(batch.step(std::vector<Batch::Work>{{a, t}, {b, nine}}), doctest::Contains("max_rows"), Error);
  CHECK(batch.n_past(a) == 0);
  CHECK(batch.n_past(b) == 0);
  CHECK(batch.kv_bytes() == 0);
  // Context: 48 positions; 12 steps of 4 fill it, the 13th is refused with ErrorKind::context_full.
  for (int i = 0; i < 12; ++i) batch.step(std::vector<Batch::Work>{{a, t}});
  try {
    batch.step(std::vector<Batch::Work>{{a, t}});
    FAIL("a full context was accepted");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::context_full);
  }
  CHECK(batch.n_past(a) == 48);
  CHECK_THROWS_AS(batch.reserve(a, 49), Error);
  CHECK_THROWS_AS(batch.remove_sequence(b + 100), Error);
}

TEST_CASE("batch: huge kv_block and max_rows are handled, never a write through null") {
  const ModelConfig config = test::toy_llama_config();  // max_seq 48
  const auto model = test::load_toy_model(config, 16);
  const auto t = tokens_for(5, config.n_vocab, 11);
  // kv_block = SIZE_MAX wrapped capacity_for's rounding to a cache of 0 positions: now capped at max_context, so the
  // step runs and gives the logits a small block gives.
  Batch huge(model, {.max_context = 0, .max_rows = 8, .kv_block = SIZE_MAX, .n_threads = 1});
  Batch small(model, {.max_context = 0, .max_rows = 8, .kv_block = 4, .n_threads = 1});
  const auto h = huge.add_sequence(), s = small.add_sequence();
  const auto lh = huge.step(std::vector<Batch::Work>{{h, t}});
  const std::vector<float> from_huge(lh.begin(), lh.end());
  const auto ls = small.step(std::vector<Batch::Work>{{s, t}});
  REQUIRE(from_huge.size() == ls.size());
  CHECK(std::memcmp(from_huge.data(), ls.data(), ls.size() * sizeof(float)) == 0);
  // max_rows × width wrapped to 0 floats of scratch: now refused at construction, out of memory.
  try {
    Batch rows(model, {.max_context = 0, .max_rows = size_t{1} << 60, .kv_block = 16, .n_threads = 1});
    FAIL("max_rows = 2^60 was accepted");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::out_of_memory);
    CHECK(std::string(e.what()).find("max_rows") != std::string::npos);
  }
}

TEST_CASE("batch: a moved-from batch is a clear error, not a crash") {
  const auto model = test::load_toy_model(test::toy_llama_config(), 3);
  Batch a(model);
  const Batch::SequenceId id = a.add_sequence();
  Batch b(std::move(a));
  CHECK(b.n_sequences() == 1);
  CHECK_THROWS_WITH_AS(a.add_sequence(), doctest::Contains("moved from"), Error);  // NOLINT(bugprone-use-after-move)
  CHECK_THROWS_AS(a.n_past(id), Error);
  CHECK_THROWS_AS(a.remove_sequence(id), Error);
  CHECK_THROWS_AS(a.kv_bytes(), Error);
  CHECK_THROWS_AS(a.kv_bytes_for(4), Error);
  const uint32_t token = 1;
  const Batch::Work work{id, std::span<const uint32_t>(&token, 1)};
  CHECK_THROWS_AS(a.step(std::span<const Batch::Work>(&work, 1)), Error);
  CHECK(b.step(std::span<const Batch::Work>(&work, 1)).size() == model->config().n_vocab);
}
