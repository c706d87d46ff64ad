// sqrtdk::Scheduler: continuous batching for servers. Many generations share one Batch (batch.h), stepped together
// by one scheduler thread:
//
//   sqrtdk::Scheduler scheduler(model, {.max_running = 16});
//   scheduler.submit(request, {.on_token = [](const sqrtdk::TokenEvent& e) { send(e.text); return true; },
//                              .on_done = [](const sqrtdk::ScheduledResult& r) { finish(r); }});
//
// Each step holds one decode token of every running generation (so streams keep flowing) plus prompt chunks of the
// ones still prefilling, up to max_step_tokens rows: each linear layer is one GEMM over all of them. New requests
// join at the next step. A prompt is fed in chunks of exactly prefill_chunk tokens (the last one shorter), so
// with the Batch's row invariance a generation's tokens are bit-identical alone or beside any others, and with or
// without a prefix-cache hit.
//
// Memory: admission reserves a generation's KV (prompt + max_new_tokens, Batch::kv_bytes_for) from kv_budget_bytes;
// what does not fit waits in the queue (max_queue; past it submit() refuses), never fails mid-generation.
//
// Prefix cache: after a prompt is prefilled, its longest whole-chunk prefix is kept (a copy of its KV rows) while
// budget allows, least recently used evicted first. A prompt that starts with a kept prefix forks from it and
// prefills only the rest.
//
// Callbacks run on the scheduler thread: keep them short (hand the data to your I/O thread). on_done runs exactly
// once per accepted request, also when it ends by an error, a cancel or the scheduler's destruction. What a callback
// throws never unwinds through the scheduler: on_token or on_start throwing ends that request with the exception's
// message as its error, cancelled throwing counts as true, and on_done throwing is ignored (its request is over).
#pragma once

#include <sqrtdk/generate.h>
#include <sqrtdk/model.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace sqrtdk {

struct SchedulerOptions {
  size_t max_context = 0;        // prompt + new tokens per request at most (a generation that reaches it stops,
                                 // context_full, as generate()); 0: the model's max_seq
  size_t max_running = 16;       // generations stepped together at most
  size_t max_queue = 64;         // requests waiting to start: submit() says queue_full once running + queued
                                 // requests reach max_running + max_queue
  size_t max_step_tokens = 256;  // rows per step (decode tokens + prompt chunks); at least max_running
  size_t prefill_chunk = 64;     // prompt tokens per generation per step (fixed: determinism, prefix alignment)
  size_t kv_budget_bytes = 0;    // KV of running generations + the prefix cache; 0: max_running full contexts
  size_t prefix_cache_entries = 32;  // prompts' prefixes kept at most; 0: no prefix cache
  int n_threads = 0;             // threads per step; 0: the default (OMP_NUM_THREADS, else the CPUs we may use)
  int step_delay_ms = 0;         // sleep after each step that produced tokens: a slower model (tests, demos)
};

struct ScheduledRequest {
  std::vector<uint32_t> prompt;  // at least one token
  // sampling, max_new_tokens, stop_at_eos, stop_tokens, stop_strings as generate(); on_token/on_text are ignored
  // (see Scheduler::Callbacks).
  GenerateOptions generate;
  size_t top_logprobs = 0;  // > 0: each TokenEvent carries the top this-many tokens' log-probabilities (at most 20)
  bool logprobs = false;    // each TokenEvent carries the chosen token's log-probability
  // Advanced: your own per-token rules instead of the built-in generation (then `generate`, the logprobs fields and
  // Callbacks::on_token are unused, and ScheduledResult::result stays empty). Called on the scheduler thread with
  // the logits after the prompt, then after each token it returned; returns the next token to feed, or nullopt
  // when the generation is over. context_full: the context has no room for another token. May throw (the
  // generation then ends with ScheduledResult::error).
  std::function<std::optional<uint32_t>(std::span<const float> logits, bool context_full)> custom_step;
};

struct TokenLogprob {
  uint32_t token;
  float logprob;  // natural log of the probability under softmax(logits) (temperature 1, before top-k/top-p)
};

struct TokenEvent {
  uint32_t token;                      // the generated id (an end token too: its text is empty)
  std::string_view text;               // text made final by this token (may be empty; never part of a stop string)
  float logprob = 0;                   // of `token` (when logprobs or top_logprobs was asked)
  std::span<const TokenLogprob> top;   // the top_logprobs most likely, most likely first
  bool last = false;                   // no more events follow
};

struct ScheduledResult {
  GenerateResult result;             // tokens, text, stop_reason (callback: cancelled or on_token said stop)
  std::string error;                 // non-empty: the generation failed (e.g. NaN logits); result is partial
  bool out_of_memory = false;        // error is an allocation failure (its KV cache): retry later, not a bug
  size_t prompt_tokens = 0;
  size_t cached_prompt_tokens = 0;   // prompt tokens taken from the prefix cache (not prefilled)
  bool started = false;              // false: it ended in the queue (cancel, shutdown); nothing was computed
  double queue_seconds = 0;          // from submit to its first step
  double first_token_seconds = 0;    // from submit to its first token (0 if none)
};

// Counters and gauges for /metrics (a consistent snapshot).
struct SchedulerStats {
  size_t queued = 0, running = 0;
  size_t kv_used_bytes = 0, kv_reserved_bytes = 0, kv_budget_bytes = 0;  // allocated; promised to running + cache
  size_t prefix_entries = 0, prefix_cache_bytes = 0;
  uint64_t prefix_hits = 0, prefix_misses = 0, prefix_tokens_reused = 0;
  uint64_t steps = 0, step_rows = 0, step_sequences = 0, generated_tokens = 0, prompt_tokens = 0;
  // Steps by running generations in them: [1], [2], [3-4], [5-8], [9-16], [17-32], [33-64], [65+].
  std::array<uint64_t, 8> step_sequences_histogram{};
  double tokens_per_second = 0;  // generated over the last 10 s (0 when nothing ran in them)
};

class SchedulerImpl;

class Scheduler {
 public:
  struct Callbacks {
    std::function<void()> on_start;                        // it left the queue, its KV cache exists: it runs
    std::function<bool(const TokenEvent&)> on_token;      // false: stop this generation (StopReason::callback)
    std::function<void(ScheduledResult&&)> on_done;        // exactly once per accepted request
    // Polled each step, queued or running: true stops it. For queued requests it runs under the scheduler's lock:
    // keep it to reading flags (no calls into the Scheduler).
    std::function<bool()> cancelled;
  };
  using RequestId = uint64_t;
  enum class Admission {
    accepted,
    queue_full,  // max_queue requests wait already
    too_large,   // the prompt alone exceeds max_context, or its KV reservation exceeds the whole budget
    closed,      // the scheduler is shutting down
  };

  // Starts the scheduler thread. Throws sqrtdk::Error on bad options or when the Batch cannot be created.
  Scheduler(std::shared_ptr<const Model> model, const SchedulerOptions& options);
  // Cancels what is queued and running (each gets on_done) and joins the thread.
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Validates the request (throws sqrtdk::Error naming the field: empty prompt, ids out of range, bad sampling
  // options, stop strings without a tokenizer) and queues it. Thread-safe.
  // `id` (optional) receives the request's id, for withdraw().
  Admission submit(ScheduledRequest request, Callbacks callbacks, RequestId* id = nullptr);
  // Takes a request out of the queue if it has not started: true if it was there (its on_done is then never
  // called: the caller answers for it), false if it started or ended already. Thread-safe.
  bool withdraw(RequestId id);
  // Stop accepting; queued requests end with started = false; running ones finish. Thread-safe.
  void close();
  SchedulerStats stats() const;
  const SchedulerOptions& options() const;  // as resolved (defaults filled in)

 private:
  std::unique_ptr<SchedulerImpl> impl_;
};

}  // namespace sqrtdk
