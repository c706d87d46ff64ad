// Scheduler (continuous batching): a generation's tokens and log-probabilities are bit-identical alone, beside
// others and after a prefix-cache hit; KV admission, queue limits, cancels and shutdown; the events' contract.
#include <doctest/doctest.h>

#include <sqrtdk/batch.h>
#include <sqrtdk/error.h>
#include <sqrtdk/model.h>
#include <sqrtdk/scheduler.h>

#include "tests/common/toy_model.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

using namespace sqrtdk;

namespace {

std::shared_ptr<const Model> toy_model() {
  ModelConfig c = test::toy_llama_config();
  c.max_seq = 160;
  return test::load_toy_model(c, 21);
}

std::vector<uint32_t> prompt_of(size_t n, uint32_t seed, uint32_t n_vocab = 67) {
  std::vector<uint32_t> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = static_cast<uint32_t>((i * 29 + seed * 13 + 3) % n_vocab);
  return t;
}

// What one request produced, gathered from its events.
struct Outcome {
  std::vector<uint32_t> tokens;
  std::vector<float> logprobs;
  std::string text;
  ScheduledResult result;
  bool done = false;
  int events_after_last = 0;
};

// Collects outcomes; wait() blocks until all `expected` are done.
class Collector {
 public:
  explicit Collector(size_t expected) : outcomes_(expected) {}
  Scheduler::Callbacks callbacks(size_t i) {
    Scheduler::Callbacks cb;
    cb.on_token = [this, i](const TokenEvent& e) {
      std::lock_guard lk(m_);
      Outcome& o = outcomes_[i];
      if (!o.tokens.empty() && last_seen_[i]) ++o.events_after_last;
      o.tokens.push_back(e.token);
      o.logprobs.push_back(e.logprob);
      o.text += e.text;
      last_seen_[i] = e.last;
      return true;
    };
    cb.on_done = [this, i](ScheduledResult&& r) {
      std::lock_guard lk(m_);
      outcomes_[i].result = std::move(r);
      outcomes_[i].done = true;
      cv_.notify_all();
    };
    return cb;
  }
  std::vector<Outcome> wait() {
    std::unique_lock lk(m_);
    const bool ok = cv_.wait_for(lk, std::chrono::seconds(120), [&] {
      for (const Outcome& o : outcomes_)
        if (!o.done) return false;
      return true;
    });
    REQUIRE(ok);
    return outcomes_;
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  std::vector<Outcome> outcomes_;
  std::map<size_t, bool> last_seen_;
};

// most = max(most, value), from any thread: the most generations seen running at once.
void raise_to(std::atomic<int>& most, int value) {
  int prev = most.load();
  while (value > prev && !most.compare_exchange_weak(prev, value)) {
  }
}

ScheduledRequest request(std::vector<uint32_t> prompt, size_t max_new, uint64_t seed) {
  ScheduledRequest r;
  r.prompt = std::move(prompt);
  r.generate.max_new_tokens = max_new;
  r.generate.sampling = {.temperature = 0.9f, .top_k = 0, .top_p = 1.0f, .seed = seed};
  r.generate.stop_at_eos = false;
  r.logprobs = true;
  return r;
}

}  // namespace

TEST_CASE("scheduler: a generation is bit-identical alone, beside seven others, and after a prefix-cache hit") {
  const auto model = toy_model();
  SchedulerOptions o;
  o.max_running = 8;
  o.max_step_tokens = 64;
  o.prefill_chunk = 8;
  o.n_threads = 2;
  const ScheduledRequest probe = request(prompt_of(37, 1), 20, 5);

  Outcome alone;
  {
    o.prefix_cache_entries = 0;
    Scheduler s(model, o);
    Collector c(1);
    REQUIRE(s.submit(probe, c.callbacks(0)) == Scheduler::Admission::accepted);
    alone = c.wait()[0];
    REQUIRE(alone.tokens.size() == 20);
    CHECK(alone.result.result.tokens == alone.tokens);
    CHECK(alone.result.result.stop_reason == StopReason::max_tokens);
    CHECK(alone.events_after_last == 0);
  }
  {
    o.prefix_cache_entries = 8;
    Scheduler s(model, o);
    Collector c(8);
    // Seven others of varied lengths (prefill chunks share steps with the probe's decode tokens and vice versa).
    for (size_t i = 0; i < 7; ++i)
      REQUIRE(s.submit(request(prompt_of(3 + 11 * i, 10 + i), 5 + 4 * i, 100 + i), c.callbacks(i)) ==
              Scheduler::Admission::accepted);
    REQUIRE(s.submit(probe, c.callbacks(7)) == Scheduler::Admission::accepted);
    const auto all = c.wait();
    CHECK(all[7].tokens == alone.tokens);
    CHECK(std::memcmp(all[7].logprobs.data(), alone.logprobs.data(), alone.logprobs.size() * sizeof(float)) == 0);
    // Again, now that the probe's first 32 prompt tokens (4 chunks of 8) are in the prefix cache.
    Collector again(1);
    ScheduledRequest probe2 = probe;
    REQUIRE(s.submit(probe2, again.callbacks(0)) == Scheduler::Admission::accepted);
    const Outcome hit = again.wait()[0];
    CHECK(hit.result.cached_prompt_tokens == 32);
    CHECK(hit.tokens == alone.tokens);
    CHECK(std::memcmp(hit.logprobs.data(), alone.logprobs.data(), alone.logprobs.size() * sizeof(float)) == 0);
    const SchedulerStats st = s.stats();
    CHECK(st.prefix_hits >= 1);
    CHECK(st.prefix_tokens_reused >= 32);
    CHECK(st.steps > 0);
    CHECK(st.running == 0);
    // Tokens/s over the last 10 s: tokens were generated within it (the whole test takes well under 10 s on a
    // release build; under sanitizers too, it is a lower bound of 1 token over the window).
    CHECK(st.tokens_per_second > 0);
    CHECK(st.generated_tokens > 0);
    size_t multi = 0;
    for (size_t b = 1; b < st.step_sequences_histogram.size(); ++b) multi += st.step_sequences_histogram[b];
    CHECK(multi > 0);  // some steps ran several generations together
  }
}

TEST_CASE("scheduler: KV admission queues what does not fit, refuses what never can, and bounds the queue") {
  const auto model = toy_model();
  SchedulerOptions o;
  o.max_running = 4;
  o.max_step_tokens = 32;
  o.prefill_chunk = 8;
  o.prefix_cache_entries = 0;
  o.max_queue = 3;
  o.step_delay_ms = 2;
  {
    Scheduler probe_sizes(model, o);
    (void)probe_sizes;
  }
  // A budget for two requests of 16 + 16 tokens at a time.
  Batch sizing(model, {.max_context = 0, .max_rows = 8, .kv_block = 16, .n_threads = 1});
  o.kv_budget_bytes = 2 * sizing.kv_bytes_for(32);
  Scheduler s(model, o);
  std::atomic<int> running{0}, most{0};
  std::mutex m;
  std::condition_variable cv;
  int done = 0;
  auto callbacks = [&] {
    Scheduler::Callbacks cb;
    auto seen = std::make_shared<bool>(false);
    cb.on_token = [&, seen](const TokenEvent&) {
      if (!*seen) {
        *seen = true;
        raise_to(most, ++running);
      }
      return true;
    };
    cb.on_done = [&, seen](ScheduledResult&& r) {
      CHECK(r.error.empty());
      if (*seen) --running;
      std::lock_guard lk(m);
      ++done;
      cv.notify_all();
    };
    return cb;
  };
  int accepted = 0, full = 0;
  for (int i = 0; i < 9; ++i) {
    const auto a = s.submit(request(prompt_of(16, i), 16, i), callbacks());
    accepted += a == Scheduler::Admission::accepted;
    full += a == Scheduler::Admission::queue_full;
  }
  // Running + queued at most max_running + max_queue = 7 (each takes >= 16 steps of 2 ms: none ends meanwhile).
  CHECK(accepted == 7);
  CHECK(full == 2);
  // Prompt 200 > max_context 160, and one whose KV alone exceeds the budget: refused at once.
  CHECK(s.submit(request(prompt_of(200, 1), 4, 1), callbacks()) == Scheduler::Admission::too_large);
  CHECK(s.submit(request(prompt_of(100, 1), 50, 1), callbacks()) == Scheduler::Admission::too_large);
  std::unique_lock lk(m);
  REQUIRE(cv.wait_for(lk, std::chrono::seconds(120), [&] { return done == accepted; }));
  CHECK(most.load() <= 2);  // never more running than the budget holds
  CHECK(most.load() >= 1);
  CHECK_THROWS_AS(s.submit(request({}, 4, 1), callbacks()), Error);
  CHECK_THROWS_AS(s.submit(request({1, 67}, 4, 1), callbacks()), Error);
}

TEST_CASE("scheduler: cancel stops queued and running generations; close and destruction end the rest") {
  const auto model = toy_model();
  SchedulerOptions o;
  o.max_running = 1;
  o.max_step_tokens = 16;
  o.prefill_chunk = 8;
  o.step_delay_ms = 5;
  auto s = std::make_unique<Scheduler>(model, o);
  std::atomic<bool> cancel_first{false};
  Collector c(3);
  Scheduler::Callbacks first = c.callbacks(0);
  first.cancelled = [&] { return cancel_first.load(); };
  std::atomic<int> starts{0};
  first.on_start = [&] { ++starts; };
  REQUIRE(s->submit(request(prompt_of(5, 1), 140, 1), first) == Scheduler::Admission::accepted);
  Scheduler::Callbacks second = c.callbacks(1);
  second.cancelled = [] { return true; };  // cancelled while it waits behind the first
  second.on_start = [&] { ++starts; };
  REQUIRE(s->submit(request(prompt_of(5, 2), 4, 2), second) == Scheduler::Admission::accepted);
  REQUIRE(s->submit(request(prompt_of(5, 3), 140, 3), c.callbacks(2)) == Scheduler::Admission::accepted);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  cancel_first = true;
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  s.reset();  // the third is running or queued: destruction ends it
  const auto all = c.wait();
  CHECK(all[0].result.started);
  CHECK(all[0].result.result.stop_reason == StopReason::callback);
  CHECK(all[0].tokens.size() < 140);
  CHECK_FALSE(all[1].result.started);
  CHECK(starts.load() == 1);  // the first started, the second never did
  CHECK(all[1].tokens.empty());
  CHECK(all[2].result.result.stop_reason == StopReason::callback);
}

TEST_CASE("scheduler: log-probabilities are a distribution, top ones sorted, the chosen one among them when greedy") {
  const auto model = toy_model();
  Scheduler s(model, {.max_running = 2, .max_step_tokens = 16, .prefill_chunk = 8});
  ScheduledRequest r = request(prompt_of(9, 4), 6, 3);
  r.generate.sampling.temperature = 0;  // greedy: the chosen token is the most likely
  r.top_logprobs = 5;
  std::vector<std::vector<TokenLogprob>> tops;
  std::vector<TokenEvent> events;
  std::mutex m;
  std::condition_variable cv;
  bool done = false;
  Scheduler::Callbacks cb;
  cb.on_token = [&](const TokenEvent& e) {
    std::lock_guard lk(m);
    tops.emplace_back(e.top.begin(), e.top.end());
    events.push_back(e);
    return true;
  };
  cb.on_done = [&](ScheduledResult&&) {
    std::lock_guard lk(m);
    done = true;
    cv.notify_all();
  };
  REQUIRE(s.submit(r, cb) == Scheduler::Admission::accepted);
  std::unique_lock lk(m);
  REQUIRE(cv.wait_for(lk, std::chrono::seconds(60), [&] { return done; }));
  REQUIRE(tops.size() == 6);
  for (size_t i = 0; i < tops.size(); ++i) {
    REQUIRE(tops[i].size() == 5);
    CHECK(tops[i][0].token == events[i].token);
    CHECK(tops[i][0].logprob == events[i].logprob);
    double mass = 0;
    for (size_t j = 0; j < 5; ++j) {
      CHECK(tops[i][j].logprob <= 0.0f);
      if (j) CHECK(tops[i][j].logprob <= tops[i][j - 1].logprob);
      mass += std::exp(double{tops[i][j].logprob});
    }
    CHECK(mass <= 1.0 + 1e-6);
    CHECK(mass > 0.0);
  }
}

TEST_CASE("scheduler: custom_step drives a generation with its own rules; withdraw takes a queued request back") {
  const auto model = toy_model();
  Scheduler s(model, {.max_running = 1, .max_step_tokens = 16, .prefill_chunk = 8, .step_delay_ms = 1});
  // Greedy through the built-in generation...
  ScheduledRequest greedy = request(prompt_of(11, 6), 5, 1);
  greedy.generate.sampling.temperature = 0;
  Collector builtin(1);
  REQUIRE(s.submit(greedy, builtin.callbacks(0)) == Scheduler::Admission::accepted);
  const Outcome want = builtin.wait()[0];
  REQUIRE(want.tokens.size() == 5);
  // ... and the same rule written as a custom step: argmax, five tokens, then stop.
  std::vector<uint32_t> got;
  ScheduledRequest custom;
  custom.prompt = greedy.prompt;
  custom.custom_step = [&got](std::span<const float> logits, bool full) -> std::optional<uint32_t> {
    if (got.size() == 5 || full) return std::nullopt;
    got.push_back(static_cast<uint32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin()));
    return got.back();
  };
  Collector c(1);
  REQUIRE(s.submit(custom, c.callbacks(0)) == Scheduler::Admission::accepted);
  const Outcome o = c.wait()[0];
  CHECK(o.tokens.empty());  // on_token is not called for a custom step
  CHECK(o.result.error.empty());
  CHECK(got == want.tokens);

  // withdraw: the second request waits behind a long first one and is taken back; its on_done never runs.
  Collector long_one(1);
  Scheduler::RequestId first_id = 0, second_id = 0;
  REQUIRE(s.submit(request(prompt_of(5, 7), 100, 1), long_one.callbacks(0), &first_id) ==
          Scheduler::Admission::accepted);
  std::atomic<bool> second_done{false};
  Scheduler::Callbacks cb;
  cb.on_done = [&](ScheduledResult&&) { second_done = true; };
  REQUIRE(s.submit(request(prompt_of(5, 8), 4, 1), cb, &second_id) == Scheduler::Admission::accepted);
  CHECK(second_id != first_id);
  CHECK(s.withdraw(second_id));
  CHECK_FALSE(s.withdraw(second_id));
  long_one.wait();
  CHECK_FALSE(s.withdraw(first_id));  // it ran
  CHECK_FALSE(second_done.load());
  // A custom step that throws ends its generation with the error.
  ScheduledRequest failing;
  failing.prompt = prompt_of(3, 9);
  failing.custom_step = [](std::span<const float>, bool) -> std::optional<uint32_t> {
    throw std::runtime_error("boom");
  };
  Collector f(1);
  REQUIRE(s.submit(failing, f.callbacks(0)) == Scheduler::Admission::accepted);
  CHECK(f.wait()[0].result.error == "boom");
}

TEST_CASE("scheduler: a callback that throws ends its own request, never the scheduler") {
  const auto model = toy_model();
  SchedulerOptions o;
  o.max_running = 1;  // one at a time: each request below meets a scheduler the previous one may have broken
  o.max_step_tokens = 16;
  o.prefill_chunk = 8;
  Scheduler s(model, o);
  std::mutex m;
  std::condition_variable cv;
  std::vector<std::string> errors(4);
  std::vector<int> done(4, 0);
  std::vector<StopReason> reasons(4);
  auto callbacks = [&](size_t i) {
    Scheduler::Callbacks cb;
    cb.on_done = [&, i](ScheduledResult&& r) {
      std::lock_guard lk(m);
      errors[i] = r.error;
      reasons[i] = r.result.stop_reason;
      ++done[i];
      cv.notify_all();
      if (i == 1) throw std::runtime_error("client went away");  // was: finish() twice, a use after free
    };
    return cb;
  };
  Scheduler::Callbacks start_throws = callbacks(0);
  start_throws.on_start = [] { throw std::runtime_error("no stream to write to"); };  // was: std::terminate
  Scheduler::Callbacks cancelled_throws = callbacks(2);
  cancelled_throws.cancelled = [] () -> bool { throw std::runtime_error("flag gone"); };  // was: std::terminate
  REQUIRE(s.submit(request(prompt_of(5, 1), 8, 1), start_throws) == Scheduler::Admission::accepted);
  REQUIRE(s.submit(request(prompt_of(5, 2), 8, 2), callbacks(1)) == Scheduler::Admission::accepted);
  REQUIRE(s.submit(request(prompt_of(5, 3), 8, 3), cancelled_throws) == Scheduler::Admission::accepted);
  REQUIRE(s.submit(request(prompt_of(5, 4), 8, 4), callbacks(3)) == Scheduler::Admission::accepted);
  std::unique_lock lk(m);
  REQUIRE(cv.wait_for(lk, std::chrono::seconds(120), [&] { return std::count(done.begin(), done.end(), 1) == 4; }));
  CHECK(errors[0].find("on_start threw: no stream to write to") != std::string::npos);
  CHECK(errors[1].empty());
  CHECK(reasons[1] == StopReason::max_tokens);
  CHECK(reasons[2] == StopReason::callback);  // a throwing cancelled() counts as cancelled
  CHECK(errors[3].empty());                   // and the scheduler still serves the next request
  CHECK(reasons[3] == StopReason::max_tokens);
  CHECK(done == std::vector<int>{1, 1, 1, 1});  // exactly once each
  lk.unlock();
  // max_new_tokens = 0: prefilled, no token, as generate() (it made one).
  Collector c(1);
  REQUIRE(s.submit(request(prompt_of(5, 5), 0, 5), c.callbacks(0)) == Scheduler::Admission::accepted);
  const auto zero = c.wait();
  CHECK(zero[0].tokens.empty());
  CHECK(zero[0].result.error.empty());
  CHECK(zero[0].result.result.stop_reason == StopReason::max_tokens);
}

TEST_CASE("scheduler: a huge max_new_tokens reserves a whole context, not a wrapped sum") {
  const auto model = toy_model();  // max_seq 160
  SchedulerOptions o;
  o.max_running = 4;
  o.max_step_tokens = 32;
  o.prefill_chunk = 8;
  o.prefix_cache_entries = 0;
  o.step_delay_ms = 1;
  Batch sizing(model, {.max_context = 0, .max_rows = 8, .kv_block = 16, .n_threads = 1});
  o.kv_budget_bytes = sizing.kv_bytes_for(160);  // one full context
  Scheduler s(model, o);
  std::atomic<int> running{0}, most{0}, done{0};
  std::mutex m;
  std::condition_variable cv;
  auto callbacks = [&] {
    Scheduler::Callbacks cb;
    cb.on_start = [&] {
      raise_to(most, ++running);
    };
    cb.on_done = [&](ScheduledResult&& r) {
      CHECK(r.result.stop_reason == StopReason::context_full);  // it runs until the context is full
      --running;
      std::lock_guard lk(m);
      ++done;
      cv.notify_all();
    };
    return cb;
  };
  // 5 + SIZE_MAX wrapped to 4 tokens' reservation: all three ran at once in a budget of one context.
  for (uint32_t i = 0; i < 3; ++i)
    REQUIRE(s.submit(request(prompt_of(5, i), SIZE_MAX, i), callbacks()) == Scheduler::Admission::accepted);
  std::unique_lock lk(m);
  REQUIRE(cv.wait_for(lk, std::chrono::seconds(120), [&] { return done.load() == 3; }));
  CHECK(most.load() == 1);
}
