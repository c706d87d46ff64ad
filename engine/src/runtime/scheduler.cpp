// Scheduler: the continuous-batching loop (scheduler.h). One thread owns the Batch, the running generations, the
// KV reservations and the prefix cache; other threads only touch the queue and the stats snapshot, under `m_`.
#include <sqrtdk/batch.h>
#include <sqrtdk/error.h>
#include <sqrtdk/scheduler.h>

#include "engine/src/runtime/generation.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <list>
#include <mutex>
#include <optional>
#include <thread>

namespace sqrtdk {

namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

size_t histogram_bucket(size_t sequences) {
  size_t bucket = 0;
  for (size_t limit = 1; bucket < 7 && sequences > limit; limit *= 2) ++bucket;
  return bucket;  // 1 → 0, 2 → 1, 3-4 → 2, 5-8 → 3, ..., 65+ → 7
}

struct Pending {
  ScheduledRequest request;
  Scheduler::Callbacks callbacks;
  double submitted = 0;
  Scheduler::RequestId id = 0;
};

struct Running {
  Running(const Model& model, Pending&& p) : pending(std::move(p)), gen(model, generate_options(pending.request)) {}
  // A custom_step request has no built-in generation: a neutral one (never sampled from) stands in.
  static GenerateOptions generate_options(const ScheduledRequest& r) {
    if (!r.custom_step) return r.generate;
    GenerateOptions neutral;
    neutral.stop_at_eos = false;
    return neutral;
  }
  Pending pending;
  Generation gen;
  Batch::SequenceId sequence = 0;
  size_t fed = 0;              // prompt tokens in the cache
  size_t cached = 0;           // of which from the prefix cache
  size_t reserved_bytes = 0;   // KV promised to it
  uint32_t next_token = 0;     // the token to decode next step
  double started = 0, first_token = 0;
  std::vector<TokenLogprob> top;
  const std::vector<uint32_t>& prompt() const { return pending.request.prompt; }
};

struct PrefixEntry {
  std::vector<uint32_t> tokens;  // a whole number of prefill chunks
  Batch::SequenceId sequence;
  size_t bytes;
  uint64_t last_used;
};

}  // namespace

class SchedulerImpl {
 public:
  SchedulerImpl(std::shared_ptr<const Model> model, const SchedulerOptions& options)
      : model_(std::move(model)), options_(resolve(*model_, options)),
        batch_(model_, {.max_context = options_.max_context, .max_rows = options_.max_step_tokens, .kv_block = 16,
                        .n_threads = options_.n_threads}) {
    if (options_.kv_budget_bytes == 0)
      options_.kv_budget_bytes = options_.max_running * batch_.kv_bytes_for(options_.max_context);
    stats_.kv_budget_bytes = options_.kv_budget_bytes;
    thread_ = std::thread([this] { loop(); });
  }

  ~SchedulerImpl() {
    {
      std::lock_guard lk(m_);
      stopping_ = true;
      closed_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  static SchedulerOptions resolve(const Model& model, SchedulerOptions o) {
    if (o.max_context == 0) o.max_context = model.config().max_seq;
    if (o.max_running == 0) throw Error("Scheduler: max_running must be >= 1");
    if (o.prefill_chunk == 0) throw Error("Scheduler: prefill_chunk must be >= 1");
    // Room for every running generation's decode token and one whole prompt chunk, so prefills always progress.
    if (o.max_step_tokens < o.max_running - 1 + o.prefill_chunk)
      throw Error("Scheduler: max_step_tokens " + std::to_string(o.max_step_tokens) +
                  " < max_running - 1 + prefill_chunk (" + std::to_string(o.max_running - 1 + o.prefill_chunk) +
                  "): a prompt chunk could never join a full step");
    if (o.step_delay_ms < 0) throw Error("Scheduler: step_delay_ms must be >= 0");
    return o;
  }

  Scheduler::Admission submit(ScheduledRequest request, Scheduler::Callbacks callbacks, Scheduler::RequestId* id) {
    const ModelConfig& c = model_->config();
    if (request.prompt.empty()) throw Error("Scheduler::submit: the prompt is empty");
    for (size_t i = 0; i < request.prompt.size(); ++i)
      if (request.prompt[i] >= c.n_vocab)
        throw Error("Scheduler::submit: prompt token " + std::to_string(i) + " has id " +
                    std::to_string(request.prompt[i]) + ", outside the vocabulary [0, " + std::to_string(c.n_vocab) +
                    ")");
    if (request.top_logprobs > 20) throw Error("Scheduler::submit: top_logprobs must be <= 20");
    request.generate.on_token = nullptr;
    request.generate.on_text = nullptr;
    if (!request.custom_step) {
      Generation check(*model_, request.generate);  // stop strings without a tokenizer, empty stop strings
    }
    if (request.prompt.size() > options_.max_context || reservation(request) > options_.kv_budget_bytes)
      return Scheduler::Admission::too_large;
    {
      std::lock_guard lk(m_);
      if (closed_) return Scheduler::Admission::closed;
      // Running + queued, counted together: a generation that just finished has left both before its on_done, so
      // the caller's next request never finds a queue still full of what the scheduler is about to start.
      if (in_flight_ >= options_.max_running + options_.max_queue) return Scheduler::Admission::queue_full;
      ++in_flight_;
      const Scheduler::RequestId rid = ++next_request_id_;
      if (id) *id = rid;
      queue_.push_back(Pending{std::move(request), std::move(callbacks), now_seconds(), rid});
      stats_.queued = queue_.size();
    }
    cv_.notify_all();
    return Scheduler::Admission::accepted;
  }

  bool withdraw(Scheduler::RequestId id) {
    std::lock_guard lk(m_);
    const auto it = std::find_if(queue_.begin(), queue_.end(), [&](const Pending& p) { return p.id == id; });
    if (it == queue_.end()) return false;
    queue_.erase(it);
    --in_flight_;
    stats_.queued = queue_.size();
    return true;
  }

  void close() {
    {
      std::lock_guard lk(m_);
      closed_ = true;
    }
    cv_.notify_all();
  }

  SchedulerStats stats() const {
    std::lock_guard lk(m_);
    SchedulerStats out = stats_;
    out.tokens_per_second = recent_rate(now_seconds());
    return out;
  }
  const SchedulerOptions& options() const { return options_; }

 private:
  // Prompt + max_new_tokens, at most max_context (a generation stops there, context_full). The sum is taken so it
  // cannot wrap: max_new_tokens = SIZE_MAX made 5 + SIZE_MAX = 4 tokens' reservation, and the budget limit nothing.
  size_t reserve_tokens(const ScheduledRequest& r) const {
    return std::min(options_.max_context, r.prompt.size() + std::min(r.generate.max_new_tokens, options_.max_context));
  }
  size_t reservation(const ScheduledRequest& r) const { return batch_.kv_bytes_for(reserve_tokens(r)); }

  // The callbacks are the caller's code, on the scheduler thread: what they throw must not unwind through the
  // scheduler (it did: a throwing on_done ran finish() twice on one generation, use after free; a throwing on_start
  // or cancelled ended the process). on_start throwing ends its request with that error; cancelled throwing counts
  // as cancelled; on_done throwing is swallowed, since its request is over and no one is left to tell.
  static void call_on_done(Scheduler::Callbacks& callbacks, ScheduledResult&& result) noexcept {
    if (!callbacks.on_done) return;
    try {
      callbacks.on_done(std::move(result));
    } catch (...) {
    }
  }
  static bool call_cancelled(const Scheduler::Callbacks& callbacks) noexcept {
    if (!callbacks.cancelled) return false;
    try {
      return callbacks.cancelled();
    } catch (...) {
      return true;
    }
  }
  size_t committed() const { return reserved_ + prefix_bytes_; }

  // Tokens/s over the last kRateWindow seconds, from the (time, generated tokens) samples of each step. Under m_.
  static constexpr double kRateWindow = 10.0;
  double recent_rate(double now) const {
    if (rate_samples_.empty()) return 0;
    // Tokens since the window's start, over the window (or over the time since the first sample, if younger).
    const double start = now - kRateWindow;
    uint64_t base = rate_samples_.front().second;
    double from = rate_samples_.front().first;
    for (const auto& [t, tokens] : rate_samples_) {
      if (t > start) break;
      base = tokens, from = t;
    }
    const double span = now - std::max(from, start);
    return span > 0 ? static_cast<double>(rate_samples_.back().second - base) / std::max(span, 1.0) : 0.0;
  }

  void loop() {
    for (;;) {
      std::vector<Pending> ended;  // queued requests cancelled or dropped by close(): on_done outside the lock
      bool stopping = false, closed = false;
      {
        std::unique_lock lk(m_);
        cv_.wait(lk, [&] { return stopping_ || closed_ || !queue_.empty() || !running_.empty(); });
        stopping = stopping_;
        closed = closed_;
        for (auto it = queue_.begin(); it != queue_.end();) {
          if (closed || call_cancelled(it->callbacks)) {
            ended.push_back(std::move(*it));
            it = queue_.erase(it);
          } else {
            ++it;
          }
        }
        stats_.queued = queue_.size();
      }
      for (Pending& p : ended) end_unstarted(std::move(p));
      if (stopping) {
        for (auto& r : running_) r.gen.result().stop_reason = StopReason::callback;
        while (!running_.empty()) finish(running_.begin(), "");
        publish(0, 0);
        return;
      }
      admit();
      if (running_.empty()) {
        publish(0, 0);
        if (closed) {
          std::unique_lock lk(m_);
          cv_.wait(lk, [&] { return stopping_ || !queue_.empty(); });
        }
        continue;
      }
      step();
    }
  }

  void end_unstarted(Pending&& p) {
    {
      std::lock_guard lk(m_);
      --in_flight_;
    }
    ScheduledResult r;
    r.prompt_tokens = p.request.prompt.size();
    r.result.stop_reason = StopReason::callback;
    call_on_done(p.callbacks, std::move(r));
  }

  // Starts queued requests in order while a generation slot and their KV reservation are free.
  void admit() {
    while (running_.size() < options_.max_running) {
      std::optional<Pending> next;
      {
        std::lock_guard lk(m_);
        if (queue_.empty()) break;
        const size_t need = reservation(queue_.front().request);
        while (committed() + need > options_.kv_budget_bytes && !prefix_.empty()) evict_lru();
        if (committed() + need > options_.kv_budget_bytes) break;  // waits for a running one to finish
        next.emplace(std::move(queue_.front()));
        queue_.pop_front();
        reserved_ += need;
        stats_.queued = queue_.size();
      }
      start(std::move(*next));
    }
  }

  void start(Pending&& p) {
    const size_t need = reservation(p.request);
    running_.emplace_back(*model_, std::move(p));
    Running& r = running_.back();
    r.reserved_bytes = need;
    r.started = now_seconds();
    const size_t tokens = reserve_tokens(r.pending.request);
    // Prefix cache: the longest whole-chunk prefix kept, leaving at least one prompt token to prefill (its logits
    // are the first token's).
    PrefixEntry* best = nullptr;
    size_t best_n = 0;
    if (options_.prefix_cache_entries > 0) {
      const size_t chunk = options_.prefill_chunk;
      const size_t limit = (r.prompt().size() - 1) / chunk * chunk;
      for (PrefixEntry& e : prefix_) {
        const size_t n = std::min(limit, e.tokens.size());
        size_t common = std::mismatch(e.tokens.begin(), e.tokens.begin() + static_cast<ptrdiff_t>(n),
                                      r.prompt().begin()).first - e.tokens.begin();
        common = common / chunk * chunk;
        if (common > best_n) best = &e, best_n = common;
      }
    }
    try {
      if (best) {
        r.sequence = batch_.fork_sequence(best->sequence, best_n, tokens);
        best->last_used = ++clock_;
        r.fed = r.cached = best_n;
        ++stats_local_.prefix_hits;
        stats_local_.prefix_tokens_reused += best_n;
      } else {
        r.sequence = batch_.add_sequence();
        batch_.reserve(r.sequence, tokens);
        if (options_.prefix_cache_entries > 0) ++stats_local_.prefix_misses;
      }
    } catch (const Error& e) {
      finish(std::prev(running_.end()), e.what(), e.kind() == ErrorKind::out_of_memory);
      return;
    }
    // Its cache exists: from here it runs (a server sends a stream's headers now, a 503 no longer possible).
    if (r.pending.callbacks.on_start) {
      try {
        r.pending.callbacks.on_start();
      } catch (const std::exception& e) {
        finish(std::prev(running_.end()), std::string("on_start threw: ") + e.what());
      } catch (...) {
        finish(std::prev(running_.end()), "on_start threw");
      }
    }
  }

  void evict_lru() {
    auto lru = std::min_element(prefix_.begin(), prefix_.end(),
                                [](const PrefixEntry& a, const PrefixEntry& b) { return a.last_used < b.last_used; });
    batch_.remove_sequence(lru->sequence);
    prefix_bytes_ -= lru->bytes;
    prefix_.erase(lru);
  }

  // Keeps r's longest whole-chunk prompt prefix, if new and if it fits (evicting older entries, never a running
  // generation's reservation).
  void remember_prefix(const Running& r) {
    const size_t chunk = options_.prefill_chunk;
    const size_t n = r.prompt().size() / chunk * chunk;
    if (options_.prefix_cache_entries == 0 || n == 0) return;
    for (PrefixEntry& e : prefix_) {
      if (e.tokens.size() >= n && std::equal(r.prompt().begin(), r.prompt().begin() + static_cast<ptrdiff_t>(n),
                                             e.tokens.begin())) {
        e.last_used = ++clock_;  // already kept (or a longer one that covers it)
        return;
      }
    }
    const size_t bytes = batch_.kv_bytes_for(n);
    std::lock_guard lk(m_);  // committed() is read by admit() under the lock too
    while ((prefix_.size() >= options_.prefix_cache_entries || committed() + bytes > options_.kv_budget_bytes) &&
           !prefix_.empty())
      evict_lru();
    if (committed() + bytes > options_.kv_budget_bytes) return;
    try {
      const Batch::SequenceId copy = batch_.fork_sequence(r.sequence, n, n);
      prefix_.push_back(PrefixEntry{{r.prompt().begin(), r.prompt().begin() + static_cast<ptrdiff_t>(n)}, copy, bytes,
                                    ++clock_});
      prefix_bytes_ += bytes;
    } catch (const Error&) {
      // Out of memory for the copy: the cache is an optimisation, skip it.
    }
  }

  void step() {
    // Running generations that were cancelled stop before the step.
    for (auto it = running_.begin(); it != running_.end();) {
      auto next = std::next(it);
      if (call_cancelled(it->pending.callbacks)) {
        it->gen.result().stop_reason = StopReason::callback;
        finish(it, "");
      }
      it = next;
    }
    if (running_.empty()) return;
    // Decode tokens first (every stream moves each step), then whole prompt chunks in arrival order while they fit.
    work_.clear();
    who_.clear();
    size_t rows = 0;
    for (auto it = running_.begin(); it != running_.end(); ++it) {
      if (it->fed < it->prompt().size()) continue;
      work_.push_back({it->sequence, std::span<const uint32_t>(&it->next_token, 1)});
      who_.push_back(it);
      ++rows;
    }
    for (auto it = running_.begin(); it != running_.end(); ++it) {
      if (it->fed == it->prompt().size()) continue;
      const size_t n = std::min(options_.prefill_chunk, it->prompt().size() - it->fed);
      if (rows + n > options_.max_step_tokens) break;
      work_.push_back({it->sequence, std::span<const uint32_t>(it->prompt()).subspan(it->fed, n)});
      who_.push_back(it);
      rows += n;
    }
    std::span<const float> logits;
    try {
      logits = batch_.step(work_);
    } catch (const Error& e) {
      for (auto it : who_) finish(it, e.what(), e.kind() == ErrorKind::out_of_memory);
      publish(0, 0);
      return;
    } catch (const std::exception& e) {
      for (auto it : who_) finish(it, e.what());
      publish(0, 0);
      return;
    }
    const size_t n_vocab = model_->config().n_vocab;
    const double now = now_seconds();
    size_t produced = 0;
    for (size_t j = 0; j < who_.size(); ++j) {
      Running& r = *who_[j];
      if (r.fed < r.prompt().size()) {
        r.fed += work_[j].tokens.size();
        stats_local_.prompt_tokens += work_[j].tokens.size();
        if (r.fed < r.prompt().size()) continue;  // more prompt chunks to come: these logits are not needed
        remember_prefix(r);
      }
      const std::span<const float> row = logits.subspan(j * n_vocab, n_vocab);
      try {
        const bool full = batch_.n_past(r.sequence) >= options_.max_context;
        if (r.pending.request.custom_step) {
          const std::optional<uint32_t> token = r.pending.request.custom_step(row, full);
          if (token) ++produced;
          if (token && r.first_token == 0) r.first_token = now;
          if (!token) {
            finish(who_[j], "");
          } else if (*token >= model_->config().n_vocab) {
            finish(who_[j], "custom_step returned token " + std::to_string(*token) + ", outside the vocabulary");
          } else if (full) {
            finish(who_[j], "custom_step returned a token with the context full");
          } else {
            r.next_token = *token;
          }
          continue;
        }
        if (r.pending.request.generate.max_new_tokens == 0) {  // prefilled, and no token wanted: as generate()
          finish(who_[j], "");
          continue;
        }
        bool done = r.gen.next(row, full);
        ++produced;
        if (r.first_token == 0) r.first_token = now;
        TokenEvent event;
        event.token = r.gen.last_token();
        const ScheduledRequest& q = r.pending.request;
        if (q.logprobs || q.top_logprobs > 0) fill_logprobs(row, q.top_logprobs, r, event);
        event.text = r.gen.take_text(done);
        event.last = done;
        if (r.pending.callbacks.on_token && !r.pending.callbacks.on_token(event) && !done) {
          r.gen.result().stop_reason = StopReason::callback;
          done = true;
        }
        if (done) finish(who_[j], "");
        else r.next_token = r.gen.last_token();
      } catch (const std::exception& e) {
        finish(who_[j], e.what());
      } catch (...) {  // on_token or custom_step threw something else
        finish(who_[j], "a callback threw a non-standard exception");
      }
    }
    stats_local_.generated_tokens += produced;
    publish(rows, who_.size());
    if (produced > 0 && options_.step_delay_ms > 0)
      std::this_thread::sleep_for(std::chrono::milliseconds(options_.step_delay_ms));
  }

  // log-softmax in double; the chosen token's value and the top k (ties: lower id first).
  static void fill_logprobs(std::span<const float> row, size_t k, Running& r, TokenEvent& event) {
    double top = -INFINITY;
    for (float x : row) top = std::max(top, double{x});
    double sum = 0;
    for (float x : row) sum += std::exp(double{x} - top);
    const double lse = top + std::log(sum);
    event.logprob = static_cast<float>(row[event.token] - lse);
    r.top.clear();
    if (k == 0) return;
    std::vector<uint32_t> ids(row.size());
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<uint32_t>(i);
    k = std::min(k, ids.size());
    std::partial_sort(ids.begin(), ids.begin() + static_cast<ptrdiff_t>(k), ids.end(), [&](uint32_t a, uint32_t b) {
      return row[a] > row[b] || (row[a] == row[b] && a < b);
    });
    for (size_t i = 0; i < k; ++i) r.top.push_back({ids[i], static_cast<float>(row[ids[i]] - lse)});
    event.top = r.top;
  }

  void finish(std::list<Running>::iterator it, const std::string& error, bool out_of_memory = false) {
    Running& r = *it;
    ScheduledResult out;
    out.result = r.gen.finish();
    out.error = error;
    out.out_of_memory = out_of_memory;
    out.prompt_tokens = r.prompt().size();
    out.cached_prompt_tokens = r.cached;
    out.started = true;
    out.queue_seconds = r.started - r.pending.submitted;
    out.first_token_seconds = r.first_token > 0 ? r.first_token - r.pending.submitted : 0;
    if (r.sequence) batch_.remove_sequence(r.sequence);
    Scheduler::Callbacks callbacks = std::move(r.pending.callbacks);
    const size_t reserved = r.reserved_bytes;
    running_.erase(it);
    {
      // The gauges move before on_done, so a caller woken by it reads them without this generation.
      std::lock_guard lk(m_);
      reserved_ -= reserved;
      --in_flight_;
      stats_.running = running_.size();
      stats_.kv_used_bytes = batch_.kv_bytes();
      stats_.kv_reserved_bytes = committed();
    }
    call_on_done(callbacks, std::move(out));
  }

  void publish(size_t rows, size_t sequences) {
    std::lock_guard lk(m_);
    SchedulerStats& s = stats_;
    s.queued = queue_.size();
    s.running = running_.size();
    s.kv_used_bytes = batch_.kv_bytes();
    s.kv_reserved_bytes = committed();
    s.prefix_entries = prefix_.size();
    s.prefix_cache_bytes = prefix_bytes_;
    s.prefix_hits = stats_local_.prefix_hits;
    s.prefix_misses = stats_local_.prefix_misses;
    s.prefix_tokens_reused = stats_local_.prefix_tokens_reused;
    s.generated_tokens = stats_local_.generated_tokens;
    s.prompt_tokens = stats_local_.prompt_tokens;
    if (sequences > 0) {
      const double now = now_seconds();
      rate_samples_.emplace_back(now, stats_local_.generated_tokens);
      while (rate_samples_.size() > 2 && rate_samples_[1].first < now - kRateWindow) rate_samples_.pop_front();
      ++s.steps;
      s.step_rows += rows;
      s.step_sequences += sequences;
      ++s.step_sequences_histogram[histogram_bucket(sequences)];
    }
  }

  std::shared_ptr<const Model> model_;
  SchedulerOptions options_;
  Batch batch_;  // the scheduler thread's only

  // Scheduler thread only.
  std::list<Running> running_;  // arrival order (a list: iterators stay valid while others finish)
  std::vector<PrefixEntry> prefix_;
  uint64_t clock_ = 0;
  SchedulerStats stats_local_;
  std::vector<Batch::Work> work_;
  std::vector<std::list<Running>::iterator> who_;

  // Shared, under m_.
  mutable std::mutex m_;
  std::condition_variable cv_;
  std::deque<Pending> queue_;
  size_t reserved_ = 0;      // KV promised to running generations
  size_t in_flight_ = 0;     // accepted and not ended: queued + running
  size_t prefix_bytes_ = 0;  // KV held by the prefix cache
  bool closed_ = false, stopping_ = false;
  Scheduler::RequestId next_request_id_ = 0;
  SchedulerStats stats_;
  std::deque<std::pair<double, uint64_t>> rate_samples_;  // (steady seconds, generated tokens) per step, ~10 s

  std::thread thread_;  // last: starts after everything above exists
};

Scheduler::Scheduler(std::shared_ptr<const Model> model, const SchedulerOptions& options) {
  if (!model) throw Error("Scheduler: model is null");
  impl_ = std::make_unique<SchedulerImpl>(std::move(model), options);
}
Scheduler::~Scheduler() = default;
Scheduler::Admission Scheduler::submit(ScheduledRequest request, Callbacks callbacks, RequestId* id) {
  return impl_->submit(std::move(request), std::move(callbacks), id);
}
bool Scheduler::withdraw(RequestId id) { return impl_->withdraw(id); }
void Scheduler::close() { impl_->close(); }
SchedulerStats Scheduler::stats() const { return impl_->stats(); }
const SchedulerOptions& Scheduler::options() const { return impl_->options(); }

}  // namespace sqrtdk
