// sqrtdk-serve's HTTP service (see server.h): the session pool, the completion loop, metrics, and the connections.
//
// Why Boost.Beast (on Boost.Asio, Debian's libboost-dev 1.74) and not cpp-httplib 0.11, as issue 13 observed it:
// httplib serves each connection on a thread of a fixed pool with only per-read timeouts, so slow-header clients
// hold threads for ever and stall everyone; a client that half-closes after its request gets no response; of
// pipelined requests only the first is answered; a chunked body is buffered whole before its size is checked (and
// answered 400, not 413); conflicting Content-Length headers pass; a non-streaming handler cannot learn that its
// client left; stop() cannot drain with a deadline. Debian ships httplib compiled: none of it is patchable from
// outside. Beast gives an incremental HTTP parser with head and body limits (chunked bytes counted as they arrive,
// conflicting Content-Length refused), asynchronous connections (a slow client costs a socket, not a thread), and
// timeouts that cover a whole operation; we own every read and write, so pipelining, half-close, cancellation and
// the drain are ours to define.
// (libmicrohttpd 0.9.75 was the other candidate; but a handler that waits for the engine must suspend its connection,
// and MHD neither reads nor times out a suspended one, so a client leaving mid-completion goes unnoticed there too.)
#include "tools/serve/server.h"

#include "tools/serve/http_framing.h"
#include "tools/serve/openai.h"
#include "tools/serve/request.h"

#include <sqrtdk/error.h>
#include <sqrtdk/generate.h>
#include <sqrtdk/scheduler.h>
#include <sqrtdk/tokenizer.h>

#include <utility>  // before Asio: 1.74's headers use std::exchange without including it

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <exception>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <sys/resource.h>
#include <system_error>
#include <thread>
#include <unistd.h>
#include <vector>

namespace sqrtdk::serve {

// A named namespace, not an anonymous one: ServerImpl's coroutines (external linkage) keep these types in their
// frames, and GCC 12 warns (-Wsubobject-linkage) about a frame whose field types have internal linkage.
namespace server_internal {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using asio::awaitable;
using asio::use_awaitable;
using nlohmann::json;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

int64_t unix_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

size_t resident_bytes() {
  long pages_total = 0, pages_resident = 0;
  if (FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld %ld", &pages_total, &pages_resident) != 2) pages_resident = 0;
    std::fclose(f);
  }
  return static_cast<size_t>(pages_resident) * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

// A thread, or an Error saying which one could not start and why (e.g. an address-space limit: each thread
// reserves its stack).
template <class F>
std::thread start_thread(const std::string& what, F&& f) {
  try {
    return std::thread(std::forward<F>(f));
  } catch (const std::system_error& e) {
    throw Error("a new " + what + " thread: " + e.what() +
                " (too little address space or too many threads? see ulimit -v and -u)");
  }
}

// ---- the completion loop ----

// Called with each token (its text, its logprobs) once it is certain not to be part of a stop string.
using EmitFn = std::function<void(const TokenEvent& event)>;
// One completion's per-token rules, driven step by step by the scheduler: sampling, end and stop tokens, stop
// strings, logprobs, and what a stream may show (never part of a stop string). next() takes each step's logits and
// says which token to feed next, or that the completion is over.
class CompletionRun {
 public:
  CompletionRun(const Model& model, const CompletionRequest& r, EmitFn emit)
      : r_(r), emit_(std::move(emit)), sampler_(sampling(r)), eos_id_(model.config().eos_id),
        tokenizer_(model.tokenizer()) {
    if (tokenizer_) streamer_.emplace(*tokenizer_, /*skip_special=*/true);
    c_.finish_reason = finish_reason(StopReason::max_tokens);
  }

  // The logits after the prompt or the last token; context_full: no room for another token.
  std::optional<uint32_t> next(std::span<const float> logits, bool context_full) {
    std::vector<size_t>& ends = c_.text_ends;
    const uint32_t token = sampler_.sample(logits);
    const bool end_token = tokenizer_ ? std::find(tokenizer_->stop_ids().begin(), tokenizer_->stop_ids().end(),
                                                  token) != tokenizer_->stop_ids().end()
                                      : token == eos_id_;
    if (end_token) {
      c_.finish_reason = finish_reason(StopReason::eos);
      return std::nullopt;
    }
    if (std::find(r_.stop_tokens.begin(), r_.stop_tokens.end(), token) != r_.stop_tokens.end()) {
      c_.finish_reason = finish_reason(StopReason::stop_token);
      return std::nullopt;
    }
    c_.tokens.push_back(token);
    if (r_.logprobs) c_.logprobs.push_back(token_logprobs(logits, token, r_.top_logprobs));
    if (streamer_) c_.text += streamer_->push(token);
    ends.push_back(c_.text.size());

    for (const std::string& stop : r_.stop_texts) {
      if (c_.text.size() >= stop.size() && c_.text.compare(c_.text.size() - stop.size(), stop.size(), stop) == 0) {
        // Drop the stop string and the tokens that end inside it (a BPE token may straddle its start: its text
        // before the stop string stays).
        const size_t cut = c_.text.size() - stop.size();
        size_t keep = 0;
        while (keep < ends.size() && ends[keep] <= cut) ++keep;
        c_.tokens.resize(keep);
        ends.resize(keep);
        if (r_.logprobs) c_.logprobs.resize(keep);
        c_.text.resize(cut);
        c_.finish_reason = finish_reason(StopReason::stop_string);
        cut_by_stop_ = true;
        return std::nullopt;
      }
    }
    // Hold back the tokens that might begin a stop string, so a stream never shows part of one.
    size_t hold = 0;
    for (const std::string& stop : r_.stop_texts) {
      for (size_t len = std::min(stop.size() - 1, c_.text.size()); len > hold; --len) {
        if (c_.text.compare(c_.text.size() - len, len, stop, 0, len) == 0) {
          hold = len;
          break;
        }
      }
    }
    size_t safe = c_.tokens.size();
    while (safe > 0 && ends[safe - 1] > c_.text.size() - hold) --safe;
    // A last token with no text yet may hold part of a character: if generation ends there, its U+FFFD (below)
    // must reach the stream too.
    if (streamer_ && safe == c_.tokens.size() && ends.back() == (safe > 1 ? ends[safe - 2] : 0)) --safe;
    flush(safe);
    if (c_.tokens.size() == r_.max_tokens) return std::nullopt;
    if (context_full) {
      c_.finish_reason = finish_reason(StopReason::context_full);
      return std::nullopt;
    }
    return token;
  }

  // Stopped from outside ("cancelled", "time_limit").
  void interrupt(const char* why) { c_.finish_reason = why; }

  // Emits what was held back and returns the result; call once, after the last next().
  CompletionResult finish() {
    if (streamer_ && !cut_by_stop_ && !c_.tokens.empty()) {  // an incomplete character at the end becomes U+FFFD
      c_.text += streamer_->finish();
      c_.text_ends.back() = c_.text.size();
    }
    flush(c_.tokens.size());
    return std::move(c_);
  }

 private:
  static SamplingOptions sampling(const CompletionRequest& r) {
    SamplingOptions so;
    so.temperature = r.temperature;
    so.top_k = r.top_k;
    so.top_p = r.top_p;
    so.seed = r.seed;
    return so;
  }
  void flush(size_t n_tokens) {
    for (; emitted_ < n_tokens; ++emitted_) {
      const size_t begin = emitted_ ? c_.text_ends[emitted_ - 1] : 0;
      if (emit_)
        emit_({c_.tokens[emitted_], std::string_view(c_.text).substr(begin, c_.text_ends[emitted_] - begin),
               r_.logprobs ? &c_.logprobs[emitted_] : nullptr});
    }
  }

  const CompletionRequest& r_;  // the Job's, which outlives the run
  EmitFn emit_;
  Sampler sampler_;
  uint32_t eos_id_;
  const Tokenizer* tokenizer_;
  std::optional<TokenStreamer> streamer_;  // the text of each token as it becomes whole UTF-8
  CompletionResult c_;
  size_t emitted_ = 0;
  bool cut_by_stop_ = false;
};

// ---- the scheduler pool: completions stepped together by one sqrtdk::Scheduler (continuous batching) ----

// One completion on its way through the scheduler, shared by the connection that made it and the scheduler thread.
struct Job {
  Job(CompletionRequest r, Clock::time_point d, std::function<void()> n)
      : request(std::move(r)), deadline(d), notify(std::move(n)) {}
  const CompletionRequest request;
  const Clock::time_point deadline;    // the per-request time limit
  const std::function<void()> notify;  // wakes the connection; called from the scheduler thread
  std::atomic<bool> cancelled{false};  // the client left or the drain cut it: stop at the next step
  std::atomic<bool> started{false};    // it left the queue (the time limit then stops it; queued, it is withdrawn)
  Scheduler::RequestId id = 0;         // for withdraw()

  enum class State { queued, running, done, dropped };  // dropped: refused by the drain before it ran
  std::mutex m;  // guards what follows
  State state = State::queued;
  std::string events;  // Server-Sent Events produced and not yet sent (streaming)
  std::optional<StreamEncoder> stream;  // streaming: its chunks (the scheduler's until done, then the connection's)
  CompletionResult result;
  std::string error;  // what the engine threw, if it did
  bool out_of_memory = false;  // error is an allocation failure (a 503: retry later), not a bug (a 500)
};

class SchedulerPool {
 public:
  enum class Admission { accepted, full, closed, too_large };  // too_large: its KV exceeds the whole budget
  using DoneFn = std::function<void(const CompletionResult&)>;  // metrics; runs on the scheduler thread

  SchedulerPool(const std::shared_ptr<const Model>& model, const SchedulerOptions& options, DoneFn on_done)
      : model_(model), on_done_(std::move(on_done)), scheduler_(model, options) {}

  Admission submit(const std::shared_ptr<Job>& job) {
    EmitFn emit;
    if (job->stream)
      emit = [raw = job.get()](const TokenEvent& event) {
        std::string chunk = raw->stream->token(event);  // the encoder is the scheduler's until the job is done
        {
          std::lock_guard lk(raw->m);
          raw->events += chunk;
        }
        raw->notify();
      };
    auto run = std::make_shared<CompletionRun>(*model_, job->request, std::move(emit));
    ScheduledRequest request;
    request.prompt = job->request.prompt;
    request.generate.max_new_tokens = job->request.max_tokens;  // the KV reservation: prompt + max_tokens
    request.custom_step = [run](std::span<const float> logits, bool full) { return run->next(logits, full); };
    Scheduler::Callbacks cb;
    cb.on_start = [job] {
      job->started = true;
      {
        std::lock_guard lk(job->m);
        job->state = Job::State::running;
      }
      job->notify();
    };
    // Reads atomics only (it runs under the scheduler's lock while queued).
    cb.cancelled = [job] { return job->cancelled.load() || (job->started.load() && Clock::now() >= job->deadline); };
    cb.on_done = [this, job, run](ScheduledResult&& r) {
      if (!r.started) {  // the drain dropped it from the queue, or its client left while it waited
        {
          std::lock_guard lk(job->m);
          job->state = Job::State::dropped;
        }
        job->notify();
        return;
      }
      if (r.result.stop_reason == StopReason::callback) run->interrupt(job->cancelled ? "cancelled" : "time_limit");
      CompletionResult result = run->finish();
      if (on_done_) on_done_(result);
      {
        std::lock_guard lk(job->m);
        job->result = std::move(result);
        job->error = std::move(r.error);
        job->out_of_memory = r.out_of_memory;
        job->state = Job::State::done;
      }
      job->notify();
    };
    try {
      switch (scheduler_.submit(std::move(request), std::move(cb), &job->id)) {
        case Scheduler::Admission::accepted: return Admission::accepted;
        case Scheduler::Admission::closed: return Admission::closed;
        case Scheduler::Admission::queue_full: return Admission::full;
        case Scheduler::Admission::too_large: return Admission::too_large;
      }
    } catch (const std::exception&) {
      // The parser checked the request against the model already; an engine refusal here is a full server.
    }
    return Admission::full;
  }
  // Takes a job out of the queue; false if it started already.
  bool withdraw(const std::shared_ptr<Job>& job) { return scheduler_.withdraw(job->id); }
  // The drain: refuse new jobs and drop the queued ones (their connections answer 503); running jobs go on.
  void close() { scheduler_.close(); }

  size_t size() const { return scheduler_.options().max_running; }
  size_t in_use() const { return scheduler_.stats().running; }
  size_t waiting() const { return scheduler_.stats().queued; }
  size_t queue_capacity() const { return scheduler_.options().max_queue; }
  SchedulerStats stats() const { return scheduler_.stats(); }
  const SchedulerOptions& options() const { return scheduler_.options(); }

 private:
  std::shared_ptr<const Model> model_;
  DoneFn on_done_;
  Scheduler scheduler_;  // last: its thread calls on_done_ and the jobs; destroyed (joined) first
};

// ---- metrics ----

std::string fixed6(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6f", v);
  return buf;
}

class Metrics {
 public:
  // Latency buckets in seconds (upper bounds), for completions of any status.
  static constexpr std::array<double, 12> kBuckets = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                                      0.5,   1.0,  2.5,   5.0,  10.0, 30.0};

  void count_response(int status) {
    std::lock_guard lk(m_);
    ++by_status_[status];
  }
  void observe_latency(double seconds) {
    std::lock_guard lk(m_);
    for (size_t i = 0; i < kBuckets.size(); ++i)
      if (seconds <= kBuckets[i]) ++buckets_[i];
    ++latency_count_;
    latency_sum_ += seconds;
  }

  std::atomic<uint64_t> prompt_tokens{0};
  std::atomic<uint64_t> generated_tokens{0};
  std::atomic<uint64_t> rejected{0};
  std::atomic<uint64_t> disconnects{0};
  std::atomic<uint64_t> refused_connections{0};

  std::string text(const SchedulerPool& pool, size_t open_connections) const {
    std::string s;
    auto line = [&](const std::string& l) { s += l + "\n"; };
    std::lock_guard lk(m_);
    line("# HELP sqrtdk_requests_total HTTP responses sent, by status code.");
    line("# TYPE sqrtdk_requests_total counter");
    for (const auto& [code, n] : by_status_)
      line("sqrtdk_requests_total{code=\"" + std::to_string(code) + "\"} " + std::to_string(n));
    line("# HELP sqrtdk_prompt_tokens_total Prompt tokens prefilled.");
    line("# TYPE sqrtdk_prompt_tokens_total counter");
    line("sqrtdk_prompt_tokens_total " + std::to_string(prompt_tokens.load()));
    line("# HELP sqrtdk_tokens_generated_total Tokens generated.");
    line("# TYPE sqrtdk_tokens_generated_total counter");
    line("sqrtdk_tokens_generated_total " + std::to_string(generated_tokens.load()));
    line("# HELP sqrtdk_rejected_total Completions answered 503 because all sessions were busy and the queue full.");
    line("# TYPE sqrtdk_rejected_total counter");
    line("sqrtdk_rejected_total " + std::to_string(rejected.load()));
    line("# HELP sqrtdk_client_disconnects_total Completions cut short because the client went away.");
    line("# TYPE sqrtdk_client_disconnects_total counter");
    line("sqrtdk_client_disconnects_total " + std::to_string(disconnects.load()));
    line("# HELP sqrtdk_request_duration_seconds Latency of POST /v1/completions and /v1/chat/completions.");
    line("# TYPE sqrtdk_request_duration_seconds histogram");
    char buf[64];
    for (size_t i = 0; i < kBuckets.size(); ++i) {
      std::snprintf(buf, sizeof buf, "%g", kBuckets[i]);
      line(std::string("sqrtdk_request_duration_seconds_bucket{le=\"") + buf + "\"} " + std::to_string(buckets_[i]));
    }
    line("sqrtdk_request_duration_seconds_bucket{le=\"+Inf\"} " + std::to_string(latency_count_));
    std::snprintf(buf, sizeof buf, "%.6f", latency_sum_);
    line(std::string("sqrtdk_request_duration_seconds_sum ") + buf);
    line("sqrtdk_request_duration_seconds_count " + std::to_string(latency_count_));
    const SchedulerStats st = pool.stats();
    const SchedulerOptions& so = pool.options();
    auto gauge = [&](const char* name, const char* help, const std::string& value) {
      line(std::string("# HELP ") + name + " " + help);
      line(std::string("# TYPE ") + name + " gauge");
      line(std::string(name) + " " + value);
    };
    auto counter = [&](const char* name, const char* help, uint64_t value) {
      line(std::string("# HELP ") + name + " " + help);
      line(std::string("# TYPE ") + name + " counter");
      line(std::string(name) + " " + std::to_string(value));
    };
    // The model-server protocol of the Kubernetes Gateway API Inference Extension reads three gauges: queued
    // requests, running requests and KV-cache utilization (0..1). vLLM names them num_requests_waiting,
    // num_requests_running and kv_cache_usage_perc; these are sqrtdk's, same meanings.
    gauge("sqrtdk_num_requests_waiting", "Requests queued, waiting for a generation slot or KV memory.",
          std::to_string(st.queued));
    gauge("sqrtdk_num_requests_running", "Requests generating now (stepped together).", std::to_string(st.running));
    gauge("sqrtdk_kv_cache_usage_perc",
          "KV memory reserved by running requests and the prefix cache, as a fraction of the budget (0..1).",
          fixed6(st.kv_budget_bytes ? static_cast<double>(st.kv_reserved_bytes) / st.kv_budget_bytes : 0.0));
    gauge("sqrtdk_kv_cache_bytes", "KV cache bytes allocated now.", std::to_string(st.kv_used_bytes));
    gauge("sqrtdk_kv_cache_budget_bytes", "KV cache budget (--kv-budget-mb).", std::to_string(st.kv_budget_bytes));
    gauge("sqrtdk_sessions", "Generations that may run together (--sessions).", std::to_string(so.max_running));
    gauge("sqrtdk_sessions_in_use", "Generations running now (same as sqrtdk_num_requests_running).",
          std::to_string(st.running));
    gauge("sqrtdk_queue_depth", "Requests waiting to start now (same as sqrtdk_num_requests_waiting).",
          std::to_string(st.queued));
    gauge("sqrtdk_queue_capacity", "Requests that may wait; past it, 503.", std::to_string(so.max_queue));
    gauge("sqrtdk_prefix_cache_entries", "Prompt prefixes kept for reuse.", std::to_string(st.prefix_entries));
    counter("sqrtdk_prefix_cache_hits_total", "Requests that started from a kept prefix.", st.prefix_hits);
    counter("sqrtdk_prefix_cache_misses_total", "Requests that found no kept prefix.", st.prefix_misses);
    counter("sqrtdk_prefix_cache_tokens_total", "Prompt tokens taken from kept prefixes (not prefilled).",
            st.prefix_tokens_reused);
    gauge("sqrtdk_prefix_cache_hit_rate", "prefix hits / (hits + misses) since start.",
          fixed6(st.prefix_hits + st.prefix_misses
                     ? static_cast<double>(st.prefix_hits) / static_cast<double>(st.prefix_hits + st.prefix_misses)
                     : 0.0));
    gauge("sqrtdk_tokens_per_second", "Tokens generated per second over the last 10 s.", fixed6(st.tokens_per_second));
    counter("sqrtdk_steps_total", "Forward steps of the scheduler.", st.steps);
    counter("sqrtdk_step_tokens_total", "Tokens (rows) in all steps: decode tokens and prompt chunks.", st.step_rows);
    counter("sqrtdk_prompt_tokens_prefilled_total", "Prompt tokens run through the model.", st.prompt_tokens);
    // Steps by generations in them: a histogram with le = 1, 2, 4, ..., 64.
    line("# HELP sqrtdk_batch_size Generations in one step.");
    line("# TYPE sqrtdk_batch_size histogram");
    uint64_t cumulative = 0;
    static constexpr const char* kLe[] = {"1", "2", "4", "8", "16", "32", "64"};
    for (size_t b = 0; b < 7; ++b) {
      cumulative += st.step_sequences_histogram[b];
      line(std::string("sqrtdk_batch_size_bucket{le=\"") + kLe[b] + "\"} " + std::to_string(cumulative));
    }
    line("sqrtdk_batch_size_bucket{le=\"+Inf\"} " + std::to_string(cumulative + st.step_sequences_histogram[7]));
    line("sqrtdk_batch_size_sum " + std::to_string(st.step_sequences));
    line("sqrtdk_batch_size_count " + std::to_string(st.steps));
    line("# HELP sqrtdk_open_connections Client connections open now.");
    line("# TYPE sqrtdk_open_connections gauge");
    line("sqrtdk_open_connections " + std::to_string(open_connections));
    line("# HELP sqrtdk_refused_connections_total Connections answered 503 and closed at once: too many were open.");
    line("# TYPE sqrtdk_refused_connections_total counter");
    line("sqrtdk_refused_connections_total " + std::to_string(refused_connections.load()));
    line("# HELP sqrtdk_resident_memory_bytes Resident set size of the server process.");
    line("# TYPE sqrtdk_resident_memory_bytes gauge");
    line("sqrtdk_resident_memory_bytes " + std::to_string(resident_bytes()));
    return s;
  }

 private:
  mutable std::mutex m_;
  std::map<int, uint64_t> by_status_;
  std::array<uint64_t, kBuckets.size()> buckets_{};
  uint64_t latency_count_ = 0;
  double latency_sum_ = 0;
};

// ---- connections ----

constexpr size_t kPipelineLimit = 64 << 10;    // bytes of later requests read ahead while a completion runs
constexpr auto kProbeInterval = std::chrono::milliseconds(500);
constexpr auto kLinger = std::chrono::seconds(1);  // reading what a client still sends before closing on it
constexpr std::string_view kProbe = "HTTP/1.1 102 Processing\r\n\r\n";

// A response that is not a stream.
struct Reply {
  int status = 200;
  std::string body;
  std::string content_type = "application/json";
  std::vector<std::pair<http::field, std::string>> headers;
  bool close = false;  // the connection closes after it
};

// An OpenAI-shaped error. `code` defaults to a name for the status (null for 400 and 500).
Reply json_error(int status, const std::string& message, const std::string& param = "", std::string code = "") {
  if (code.empty())
    code = status == 413   ? "body_too_large"
           : status == 431 ? "header_too_large"
           : status == 503 ? "overloaded"
           : status == 404 ? "not_found"
           : status == 405 ? "method_not_allowed"
           : status == 408 ? "request_timeout"
           : status == 415 ? "unsupported_content_encoding"
           : status == 501 ? "unsupported_transfer_encoding"
                           : "";
  Reply r;
  r.status = status;
  r.body = dump(error_json(status, message, param, code)) + "\n";
  return r;
}

// The path and query of a request target: origin-form ("/v1/models?x") as it is; absolute-form
// ("http://127.0.0.1:8080/v1/models", as proxies send it; RFC 9112 §3.2.2: a server must accept it) without its
// scheme and authority. The authority is not checked: one service, under whatever name the client used.
std::string_view origin_form(std::string_view target) {
  const size_t colon = target.find("://");
  if (colon == std::string_view::npos || colon == 0 || !std::isalpha(static_cast<unsigned char>(target[0])))
    return target;
  for (const char ch : target.substr(0, colon))  // a scheme: ALPHA *( ALPHA / DIGIT / "+" / "-" / "." )
    if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '+' && ch != '-' && ch != '.') return target;
  const size_t path = target.find_first_of("/?", colon + 3);
  return path == std::string_view::npos ? std::string_view("/") : target.substr(path);
}

// A path segment with its %XX escapes decoded (OpenAI's SDKs encode a model id's '/', '"', ...), or nullopt if
// an escape is malformed ("%zz", or a '%' without two hex digits after it).
std::optional<std::string> percent_decoded(std::string_view segment) {
  auto hex = [](char ch) {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
  };
  std::string out;
  out.reserve(segment.size());
  for (size_t i = 0; i < segment.size(); ++i) {
    if (segment[i] != '%') {
      out += segment[i];
      continue;
    }
    const int hi = i + 1 < segment.size() ? hex(segment[i + 1]) : -1;
    const int lo = i + 2 < segment.size() ? hex(segment[i + 2]) : -1;
    if (hi < 0 || lo < 0) return std::nullopt;
    out += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  return out;
}

// One client connection. Everything here runs on the connection's strand: its coroutine, the socket's handlers,
// and the wake-ups posted by the session worker and the drain.
struct Connection : std::enable_shared_from_this<Connection> {
  explicit Connection(tcp::socket socket)
      : stream(std::move(socket)), wake(stream.get_executor()), request_deadline(stream.get_executor()) {
    // The completion loop reads after a readiness wait, which can be spurious: such a read must not block.
    beast::error_code ec;
    stream.socket().non_blocking(true, ec);
  }

  beast::tcp_stream stream;
  beast::flat_buffer buffer;  // bytes read and not yet parsed: pipelined requests wait here
  asio::steady_timer wake;    // the coroutine sleeps on it while a completion runs
  asio::steady_timer request_deadline;  // --timeout for reading one request: cancels the read when it passes
  uint64_t deadline_id = 0;             // which request's deadline is current (a stale expiry is ignored)
  bool request_timed_out = false;       // ... and it passed
  bool woken = false;         // a wake-up came while the coroutine was not sleeping
  bool reading_request = false;
  bool cut = false;           // closed by the drain: give up
  bool watching = false;      // a wait for readability is pending
  bool readable = false;      // ... and it completed
  bool peer_closed = false;   // the client half-closed (or left: only a write can tell)
  bool close_after_reply = false;  // the response said "Connection: close" (or ends at the close)

  // Idle: waiting for the first byte of a request; the drain closes such connections at once.
  bool idle() const { return reading_request && buffer.size() == 0; }
  void wake_up() {
    woken = true;
    wake.cancel();
  }
  // For other threads: wakes the coroutine on its strand (if the connection still exists).
  std::function<void()> notifier() {
    return [self = weak_from_this(), ex = stream.get_executor()] {
      asio::post(ex, [self] {
        if (auto c = self.lock()) c->wake_up();
      });
    };
  }
  awaitable<void> sleep_until(Clock::time_point t) {
    if (!woken) {
      wake.expires_at(t);
      beast::error_code ec;
      co_await wake.async_wait(asio::redirect_error(use_awaitable, ec));
    }
    woken = false;
  }
  void close() {
    cut = true;
    stream.close();
    wake_up();
  }
};

}  // namespace server_internal
using namespace server_internal;

class ServerImpl {
 public:
  ServerImpl(std::shared_ptr<const Model> model, const ServerOptions& options)
      : model_(std::move(model)),
        options_(named(options, *model_)),
        control_(asio::make_strand(io_)),
        acceptor_(control_),
        grace_timer_(control_),
        max_connections_(max_connections(options)),
        pool_(model_, scheduler_options(*model_, options),
              [this](const CompletionResult& r) { metrics_.generated_tokens += r.tokens.size(); }) {
    limits_.max_context = pool_context(*model_, options);
  }

  static ServerOptions named(ServerOptions o, const Model& model) {
    if (o.model_name.empty()) o.model_name = std::filesystem::path(model.path()).stem().string();
    return o;
  }
  static size_t pool_context(const Model& model, const ServerOptions& o) {
    return o.max_context ? o.max_context : model.config().max_seq;
  }
  static SchedulerOptions scheduler_options(const Model& model, const ServerOptions& o) {
    if (o.sessions == 0) throw Error("--sessions must be at least 1");
    SchedulerOptions so;
    so.max_context = pool_context(model, o);
    so.max_running = o.sessions;
    so.max_queue = o.queue;
    so.prefill_chunk = o.prefill_chunk;
    // Every running generation's decode token plus a few prompt chunks per step.
    so.max_step_tokens = o.sessions + 4 * o.prefill_chunk;
    so.kv_budget_bytes = o.kv_budget_mb << 20;
    so.prefix_cache_entries = o.prefix_cache;
    so.n_threads = o.threads;  // 0: every core (one scheduler thread drives all generations)
    so.step_delay_ms = o.token_delay_ms;
    return so;
  }
  // Each connection holds a file descriptor: stay under the process's limit, with room for the model and logs.
  static size_t max_connections(const ServerOptions& o) {
    if (o.max_connections) return o.max_connections;
    rlimit nofile{};
    size_t limit = 4096;
    if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur != RLIM_INFINITY)
      limit = std::min<size_t>(limit, nofile.rlim_cur > 80 ? nofile.rlim_cur - 64 : 16);
    return limit;
  }

  int bind() {
    beast::error_code ec;
    tcp::endpoint endpoint;
    tcp::resolver resolver(io_);  // a name ("localhost") or an address
    const auto found = resolver.resolve(options_.host, std::to_string(options_.port),
                                        tcp::resolver::passive | tcp::resolver::numeric_service, ec);
    if (!ec && found.empty()) ec = asio::error::host_not_found;
    if (!ec) endpoint = found.begin()->endpoint();
    if (!ec) acceptor_.open(endpoint.protocol(), ec);
    if (!ec) acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) acceptor_.bind(endpoint, ec);
    if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec)
      throw Error("cannot listen on " + options_.host + ":" + std::to_string(options_.port) + ": " + ec.message() +
                  " (address in use, or not a local address?)");
    return acceptor_.local_endpoint().port();
  }

  void run(const std::function<void()>& on_ready) {
    asio::co_spawn(control_, accept_loop(), [](std::exception_ptr e) { log_exception("accept", e); });
    const size_t n_threads = options_.http_threads
                                 ? options_.http_threads
                                 : std::clamp<size_t>(std::thread::hardware_concurrency(), 1, 4);
    std::vector<std::thread> threads;
    try {
      for (size_t i = 1; i < n_threads; ++i) threads.push_back(start_thread("HTTP I/O", [this] { io_.run(); }));
    } catch (...) {
      io_.stop();
      for (auto& t : threads) t.join();
      throw;
    }
    if (on_ready) on_ready();
    io_.run();
    for (auto& t : threads) t.join();
  }

  void stop() {
    asio::post(control_, [this] { begin_drain(); });
  }

  std::string metrics() const { return metrics_.text(pool_, open_connections()); }

 private:
  static void log_exception(const char* where, std::exception_ptr e) {
    if (!e) return;
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& x) {
      std::fprintf(stderr, "sqrtdk-serve: %s: %s\n", where, x.what());
    }
  }

  size_t open_connections() const {
    std::lock_guard lk(connections_m_);
    return connections_.size();
  }

  // ---- accepting, and the drain (on control_) ----

  awaitable<void> accept_loop() {
    asio::steady_timer backoff(control_);
    for (;;) {
      beast::error_code ec;
      auto accepted = co_await acceptor_.async_accept(asio::make_strand(io_), asio::redirect_error(use_awaitable, ec));
      if (!acceptor_.is_open()) co_return;  // the drain closed it
      if (ec) {  // e.g. out of file descriptors: wait a little instead of spinning
        backoff.expires_after(std::chrono::milliseconds(100));
        co_await backoff.async_wait(asio::redirect_error(use_awaitable, ec));
        continue;
      }
      // No Nagle: a stream's events are small writes; with Nagle each waited for the client's delayed ACK (~40 ms
      // on a reused connection: found by bench-serve, the tokens of a stream arrived together).
      accepted.set_option(tcp::no_delay(true), ec);
      ec = {};
      auto c = std::make_shared<Connection>(tcp::socket(std::move(accepted)));
      bool refused = false;
      {
        std::lock_guard lk(connections_m_);
        refused = connections_.size() >= max_connections_;
        if (!refused) connections_.insert(c);
      }
      auto on_exit = [](std::exception_ptr e) { log_exception("connection", e); };
      if (refused)
        asio::co_spawn(c->stream.get_executor(), refuse(c), on_exit);
      else
        asio::co_spawn(c->stream.get_executor(), serve(c), on_exit);
    }
  }

  void begin_drain() {
    if (draining_.exchange(true)) return;
    beast::error_code ec;
    acceptor_.close(ec);
    pool_.close();
    std::vector<std::shared_ptr<Connection>> open;
    {
      std::lock_guard lk(connections_m_);
      open.assign(connections_.begin(), connections_.end());
    }
    if (open.empty()) return;
    for (auto& c : open)
      asio::post(c->stream.get_executor(), [c] {
        if (c->idle()) c->close();
      });
    grace_timer_.expires_after(std::chrono::seconds(options_.grace_seconds));
    grace_timer_.async_wait([this](beast::error_code e) {
      if (e) return;  // every connection ended in time
      std::lock_guard lk(connections_m_);
      for (auto& c : connections_) asio::post(c->stream.get_executor(), [c] { c->close(); });
    });
  }

  void forget(const std::shared_ptr<Connection>& c) {
    std::lock_guard lk(connections_m_);
    connections_.erase(c);
    if (draining_ && connections_.empty()) asio::post(control_, [this] { grace_timer_.cancel(); });
  }

  // ---- one connection (on its strand) ----

  awaitable<void> refuse(std::shared_ptr<Connection> c) {
    ++metrics_.refused_connections;
    Reply r = json_error(503, "too many connections (" + std::to_string(max_connections_) + "); retry later");
    r.headers.emplace_back(http::field::retry_after, "1");
    r.close = true;
    if (co_await send(*c, r, 11, false)) co_await close_gracefully(*c);
  }

  awaitable<void> serve(std::shared_ptr<Connection> c) {
    try {
      if (co_await serve_requests(*c)) co_await close_gracefully(*c);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "sqrtdk-serve: connection: %s\n", e.what());
    }
    c->stream.close();
    forget(c);
  }

  // One deadline for the whole request, head and body: a client trickling bytes gets no more time. Our own timer,
  // not the stream's expiry, which closes the socket: this one only cancels the read, so a client that began a
  // request can still be answered 408.
  void start_request_deadline(Connection& c) {
    c.request_timed_out = false;
    c.stream.expires_never();
    c.request_deadline.expires_after(std::chrono::seconds(options_.timeout_seconds));
    c.request_deadline.async_wait([weak = c.weak_from_this(), id = ++c.deadline_id](beast::error_code ec) {
      const auto self = weak.lock();
      if (ec || !self || self->deadline_id != id) return;  // cancelled, or the connection or its request is gone
      self->request_timed_out = true;
      beast::error_code ignored;
      self->stream.socket().cancel(ignored);
    });
  }
  static void end_request_deadline(Connection& c) {
    ++c.deadline_id;
    c.request_deadline.cancel();
    c.reading_request = false;
  }

  // A 400's message for a request the client's close cut short (a half-closed client still reads it).
  static std::string cut_short(const RequestParser& parser) {
    if (!parser.is_header_done())
      return "the request ended inside its head: the client closed its side before the blank line that ends it";
    if (parser.chunked()) return "the chunked request body ended before its last chunk: the client closed its side";
    return "request body shorter than Content-Length: the client closed its side after " +
           std::to_string(parser.get().body().size()) + " of " +
           std::to_string(parser.content_length().value_or(0)) + " bytes";
  }

  // Answers requests until the connection should close; false if it is unusable already (no graceful close).
  awaitable<bool> serve_requests(Connection& c) {
    for (;;) {
      RequestParser parser;
      set_limits(parser, options_.max_body);
      beast::error_code ec;
      c.reading_request = true;
      start_request_deadline(c);
      co_await http::async_read_header(c.stream, c.buffer, parser, asio::redirect_error(use_awaitable, ec));
      // The deadline can pass after a read ended and before we resumed: then it cancelled nothing; read no more.
      if (!ec && c.request_timed_out && !parser.is_done()) ec = asio::error::timed_out;
      const std::string transfer_coding = ec ? "" : unsupported_transfer_coding(parser.get());
      if (!transfer_coding.empty()) {  // its body cannot be framed: answer before reading it, and close
        end_request_deadline(c);
        Reply r = json_error(501, "Transfer-Encoding '" + transfer_coding +
                                      "' is not supported: send the body with Content-Length or chunked");
        r.close = true;
        co_return co_await send(c, r, 11, false);
      }
      if (!ec && !parser.is_done()) {
        const auto& head = parser.get();
        if (head.version() == 11 && beast::iequals(head[http::field::expect], "100-continue"))
          co_await asio::async_write(c.stream, asio::buffer(std::string_view("HTTP/1.1 100 Continue\r\n\r\n")),
                                     asio::redirect_error(use_awaitable, ec));
        if (!ec && c.request_timed_out) ec = asio::error::timed_out;
        if (!ec) co_await http::async_read(c.stream, c.buffer, parser, asio::redirect_error(use_awaitable, ec));
      }
      end_request_deadline(c);
      if (c.cut) co_return false;
      if (ec && c.request_timed_out) {
        // Idle between requests: close without a word (a 408 could cross the next request the client sends).
        if (!parser.got_some() && c.buffer.size() == 0) co_return false;
        Reply r = json_error(408, "the request did not arrive whole within " +
                                      std::to_string(options_.timeout_seconds) + " s (--timeout)");
        r.close = true;
        co_return co_await send(c, r, 11, false);
      }
      if (ec) {
        const int status = framing_error_status(ec);
        if (status == 0) co_return ec == http::error::end_of_stream;
        Reply r = status == 413 ? json_error(413, "request body too large: the limit is " +
                                                      std::to_string(options_.max_body) + " bytes (--max-body)")
                  : status == 431
                      ? json_error(431, "request head too large: the limit is " + std::to_string(kHeaderLimit) +
                                            " bytes")
                  : ec == http::error::partial_message ? json_error(400, cut_short(parser))
                                                       : json_error(400, "malformed HTTP request: " + ec.message());
        r.close = true;
        co_return co_await send(c, r, 11, false);
      }
      const http::request<http::string_body>& req = parser.get();
      const bool keep_alive = req.keep_alive() && !draining_;
      if (!co_await respond(c, req, keep_alive)) co_return false;
      if (c.close_after_reply) co_return true;
    }
  }

  awaitable<bool> send(Connection& c, const Reply& r, unsigned version, bool keep_alive) {
    http::response<http::string_body> res{static_cast<http::status>(r.status), version};
    res.set(http::field::content_type, r.content_type);
    for (const auto& [field, value] : r.headers) res.set(field, value);
    res.body() = r.body;
    res.keep_alive(keep_alive && !r.close);
    res.prepare_payload();
    metrics_.count_response(r.status);
    beast::error_code ec;
    c.stream.expires_after(std::chrono::seconds(options_.timeout_seconds));
    co_await http::async_write(c.stream, res, asio::redirect_error(use_awaitable, ec));
    if (!res.keep_alive()) c.close_after_reply = true;
    co_return !ec;
  }

  // Stops sending, then reads what the client still sends for a moment (e.g. the rest of a refused body): closing
  // with unread data would reset the connection and could destroy our answer before the client read it.
  awaitable<void> close_gracefully(Connection& c) {
    beast::error_code ec;
    c.stream.socket().shutdown(tcp::socket::shutdown_send, ec);
    c.stream.expires_after(kLinger);
    std::array<char, 4096> scratch;
    while (!ec) co_await c.stream.async_read_some(asio::buffer(scratch), asio::redirect_error(use_awaitable, ec));
  }

  awaitable<bool> respond(Connection& c, const http::request<http::string_body>& req, bool keep_alive) {
    const std::string_view target = origin_form(std::string_view(req.target().data(), req.target().size()));
    const std::string_view path = target.substr(0, target.find('?'));
    const double t0 = now_seconds();
    struct Route {
      std::string_view path;  // ending in '/': a prefix (/v1/models/{id})
      http::verb method;
    };
    static constexpr std::array<Route, 6> kRoutes = {
        Route{"/v1/completions", http::verb::post}, Route{"/v1/chat/completions", http::verb::post},
        Route{"/v1/models", http::verb::get},       Route{"/v1/models/", http::verb::get},
        Route{"/healthz", http::verb::get},         Route{"/metrics", http::verb::get}};
    const auto route = std::find_if(kRoutes.begin(), kRoutes.end(), [&](const Route& r) {
      return r.path.ends_with('/') ? path.starts_with(r.path) && path.size() > r.path.size() : r.path == path;
    });
    Reply r;
    std::string content_coding;
    if (route == kRoutes.end()) {
      r = json_error(404, "no such endpoint: " + std::string(req.method_string()) + " " + std::string(path));
    } else if (req.method() != route->method) {
      const std::string allowed(http::to_string(route->method));
      r = json_error(405, std::string(path) + " takes " + allowed + ", not " + std::string(req.method_string()));
      r.headers.emplace_back(http::field::allow, allowed);
    } else if (route->method == http::verb::post && !(content_coding = unsupported_content_coding(req)).empty()) {
      // Only POST routes read a body. The body was read whole (its framing is sound): the connection stays open.
      r = json_error(415, "Content-Encoding '" + content_coding + "' is not supported: send the body uncompressed");
      r.headers.emplace_back(http::field::accept_encoding, "identity");
    } else if (path == "/v1/completions" || path == "/v1/chat/completions") {
      const bool ok = co_await complete(
          c, req, keep_alive, path == "/v1/completions" ? Endpoint::completions : Endpoint::chat_completions);
      metrics_.observe_latency(now_seconds() - t0);
      co_return ok;
    } else if (path == "/v1/models") {
      r.body = dump(models_list_json(options_.model_name, started_)) + "\n";
    } else if (route->path == "/v1/models/") {  // the only route with a parameter
      const std::string_view raw_id = path.substr(route->path.size());
      const std::optional<std::string> id = percent_decoded(raw_id);
      if (!id)  // 400, not 404: the target is not a URI (pct-encoded is "%" HEXDIG HEXDIG), so it names no model
        r = json_error(400, "malformed percent-escape in the model id '" + std::string(raw_id) +
                                "': '%' must be followed by two hex digits", "model");
      else if (*id == options_.model_name)
        r.body = dump(model_json(options_.model_name, started_)) + "\n";
      else
        r = json_error(404, "The model '" + *id + "' does not exist; this server serves '" + options_.model_name + "'",
                       "model", "model_not_found");
    } else if (path == "/healthz") {
      // Draining: a load balancer's health check fails at once (and new connections are refused anyway).
      if (draining_) r.status = 503;
      r.body = dump(json{{"status", draining_ ? "draining" : "ok"},
                         {"sessions", pool_.size()},
                         {"sessions_in_use", pool_.in_use()},
                         {"queue_depth", pool_.waiting()},
                         {"model", std::filesystem::path(model_->path()).filename().string()}}) +
               "\n";
    } else {
      r.body = metrics();
      r.content_type = "text/plain; version=0.0.4";
    }
    co_return co_await send(c, r, req.version(), keep_alive);
  }

  // ---- completions ----

  // The bytes of one token, for logprobs.
  std::string token_text(uint32_t token) const {
    const Tokenizer* tokenizer = model_->tokenizer();
    return tokenizer ? tokenizer->decode(std::span<const uint32_t>(&token, 1), /*skip_special=*/false) : "";
  }

  // Answers one completion: JSON, or a stream of Server-Sent Events. While it runs, the socket is watched: bytes of
  // pipelined requests are kept for later; a client that half-closed is probed with "102 Processing" interim
  // responses (HTTP/1.1 clients skip them), because only a write tells a half-closed client, which still reads,
  // from one that left. A failed write cancels the job.
  awaitable<bool> complete(Connection& c, const http::request<http::string_body>& req, bool keep_alive,
                           Endpoint endpoint) {
    const unsigned version = req.version();
    CompletionRequest request;
    Reply invalid;  // co_await may not appear in a catch block
    try {
      const ServedModel served{model_->config(), model_->tokenizer(), options_.model_name};
      request = parse_request(endpoint, req.body(), served, limits_);
    } catch (const RequestError& e) {
      invalid = json_error(e.status(), e.what(), e.param(), e.code());
    }
    if (invalid.status != 200) co_return co_await send(c, invalid, version, keep_alive);
    const bool streaming = request.stream;
    const size_t prompt_tokens = request.prompt.size();
    const ResponseInfo info{(endpoint == Endpoint::completions ? "cmpl-" : "chatcmpl-") + std::to_string(++next_id_),
                            unix_seconds(), options_.model_name};
    auto job = std::make_shared<Job>(std::move(request),
                                     Clock::now() + std::chrono::seconds(options_.request_timeout_seconds),
                                     c.notifier());
    if (streaming) {
      job->stream.emplace(info, job->request, [this](uint32_t token) { return token_text(token); });
      job->events = job->stream->start();  // sent with the headers, once a session runs the job
    }
    const SchedulerPool::Admission admission = pool_.submit(job);
    if (admission == SchedulerPool::Admission::too_large) {  // it could never run: the client must ask for less
      const SchedulerOptions& so = pool_.options();
      co_return co_await send(
          c,
          json_error(400,
                     "prompt + max_tokens (" + std::to_string(job->request.prompt.size() + job->request.max_tokens) +
                         " tokens) need more KV cache than this server's whole budget of " +
                         std::to_string(so.kv_budget_bytes >> 20) + " MiB (--kv-budget-mb); ask for fewer max_tokens",
                     "max_tokens", "context_length_exceeded"),
          version, keep_alive);
    }
    if (admission != SchedulerPool::Admission::accepted) {
      if (admission == SchedulerPool::Admission::full) ++metrics_.rejected;
      Reply r = json_error(503, admission == SchedulerPool::Admission::closed
                                    ? std::string("the server is shutting down")
                                    : "all " + std::to_string(pool_.size()) +
                                          " generation slots are busy (or the KV budget is spent) and the queue of " +
                                          std::to_string(pool_.queue_capacity()) + " is full; retry later");
      r.headers.emplace_back(http::field::retry_after, "1");
      r.close = admission == SchedulerPool::Admission::closed;
      co_return co_await send(c, r, version, keep_alive);
    }
    metrics_.prompt_tokens += prompt_tokens;

    // A write failed: the client left. The job stops at its next token.
    auto give_up = [&] {
      job->cancelled = true;
      ++metrics_.disconnects;
      return false;
    };
    const auto never = Clock::time_point::max();
    auto next_probe = never;
    bool headers_sent = false;
    const bool chunked = version == 11;  // an HTTP/1.0 stream is delimited by closing the connection
    beast::error_code ec;
    Job::State state = Job::State::queued;
    std::string events;
    for (;;) {
      if (!c.peer_closed && !c.watching && c.buffer.size() < kPipelineLimit) watch_peer(c);
      co_await c.sleep_until(std::min(next_probe, state == Job::State::queued ? job->deadline : never));
      if (c.cut) {  // by the drain's grace period
        job->cancelled = true;
        co_return false;
      }
      if (c.readable) {
        c.readable = false;
        const size_t n = c.stream.socket().read_some(c.buffer.prepare(kPipelineLimit), ec);
        c.buffer.commit(n);
        if (ec == asio::error::eof) {
          c.peer_closed = true;
          if (version == 11 && !headers_sent) next_probe = Clock::now();
        } else if (ec && ec != asio::error::would_block) {
          co_return give_up();
        }
        ec = {};
      }
      if (Clock::now() >= next_probe) {
        c.stream.expires_after(std::chrono::seconds(options_.timeout_seconds));
        co_await asio::async_write(c.stream, asio::buffer(kProbe), asio::redirect_error(use_awaitable, ec));
        if (ec) co_return give_up();
        next_probe = Clock::now() + kProbeInterval;
      }
      {
        std::lock_guard lk(job->m);
        state = job->state;
        events.swap(job->events);
      }
      if (state == Job::State::dropped) {
        co_await stop_watching(c);
        Reply r = json_error(503, "the server is shutting down");
        r.headers.emplace_back(http::field::retry_after, "1");
        r.close = true;
        co_return co_await send(c, r, version, false);
      }
      if (state == Job::State::queued && Clock::now() >= job->deadline && pool_.withdraw(job)) {
        co_await stop_watching(c);
        Reply r = json_error(503, "no generation slot became free within the request time limit of " +
                                      std::to_string(options_.request_timeout_seconds) + " s");
        r.headers.emplace_back(http::field::retry_after, "1");
        co_return co_await send(c, r, version, keep_alive);
      }
      if (streaming && state != Job::State::queued && !headers_sent) {
        // Headers go out only once a session runs the job: until then a 503 can still be the answer.
        http::response<http::empty_body> head{http::status::ok, version};
        head.set(http::field::content_type, "text/event-stream");
        head.set(http::field::cache_control, "no-cache");
        head.keep_alive(keep_alive && chunked);
        head.chunked(chunked);
        http::response_serializer<http::empty_body> serializer{head};
        metrics_.count_response(200);
        c.stream.expires_after(std::chrono::seconds(options_.timeout_seconds));
        co_await http::async_write_header(c.stream, serializer, asio::redirect_error(use_awaitable, ec));
        if (ec) co_return give_up();
        headers_sent = true;
        next_probe = never;
      }
      if (!events.empty() && !co_await write_stream(c, events, chunked)) co_return give_up();
      events.clear();
      if (state == Job::State::done) break;
    }
    co_await stop_watching(c);

    CompletionResult result;
    std::string error;
    bool out_of_memory = false;
    {
      std::lock_guard lk(job->m);  // the scheduler is done with the job: this only orders our reads after its writes
      result = std::move(job->result);
      error = std::move(job->error);
      out_of_memory = job->out_of_memory;
    }
    if (!streaming) {
      if (out_of_memory) {  // its KV cache could not be allocated: nothing is wrong with the request
        Reply r = json_error(503, error);
        r.headers.emplace_back(http::field::retry_after, "1");
        co_return co_await send(c, r, version, keep_alive);
      }
      if (!error.empty()) co_return co_await send(c, json_error(500, error), version, keep_alive);
      Reply r;
      r.body = dump(completion_response(info, job->request, result, prompt_tokens,
                                        [this](uint32_t token) { return token_text(token); })) +
               "\n";
      co_return co_await send(c, r, version, keep_alive);
    }
    const std::string end = error.empty()
                                ? job->stream->finish(result.finish_reason, prompt_tokens, result.tokens.size())
                                : job->stream->fail(error);
    if (!co_await write_stream(c, end, chunked)) co_return give_up();
    if (chunked) {
      c.stream.expires_after(std::chrono::seconds(options_.timeout_seconds));
      co_await asio::async_write(c.stream, http::make_chunk_last(), asio::redirect_error(use_awaitable, ec));
      if (ec) co_return give_up();
    }
    if (!chunked || !keep_alive) c.close_after_reply = true;
    co_return true;
  }

  awaitable<bool> write_stream(Connection& c, const std::string& text, bool chunked) {
    beast::error_code ec;
    c.stream.expires_after(std::chrono::seconds(options_.timeout_seconds));
    if (chunked)
      co_await asio::async_write(c.stream, http::make_chunk(asio::buffer(text)), asio::redirect_error(use_awaitable, ec));
    else
      co_await asio::async_write(c.stream, asio::buffer(text), asio::redirect_error(use_awaitable, ec));
    co_return !ec;
  }

  // Waits (without reading) until the client sends something or closes; the completion loop then reads it.
  static void watch_peer(Connection& c) {
    c.watching = true;
    c.stream.socket().async_wait(tcp::socket::wait_read, [self = c.shared_from_this()](beast::error_code ec) {
      self->watching = false;
      if (!ec) self->readable = true;
      self->wake_up();
    });
  }
  // The next request is read from the stream: no other read may be pending then.
  static awaitable<void> stop_watching(Connection& c) {
    if (!c.watching) co_return;
    beast::error_code ec;
    c.stream.socket().cancel(ec);
    while (c.watching) co_await c.sleep_until(Clock::time_point::max());
    c.readable = false;
  }

  std::shared_ptr<const Model> model_;
  const ServerOptions options_;
  asio::io_context io_;
  asio::strand<asio::io_context::executor_type> control_;  // the acceptor and the drain
  tcp::acceptor acceptor_;
  asio::steady_timer grace_timer_;
  const size_t max_connections_;
  std::atomic<bool> draining_{false};
  mutable std::mutex connections_m_;
  std::set<std::shared_ptr<Connection>> connections_;
  RequestLimits limits_;
  Metrics metrics_;
  std::atomic<uint64_t> next_id_{0};
  const int64_t started_ = unix_seconds();  // the model's "created" in /v1/models
  SchedulerPool pool_;  // last: its scheduler thread (which calls into jobs and metrics_) stops first
};

Server::Server(std::shared_ptr<const Model> model, const ServerOptions& options)
    : impl_(std::make_unique<ServerImpl>(std::move(model), options)) {}
Server::~Server() = default;
int Server::bind() { return impl_->bind(); }
void Server::run(const std::function<void()>& on_ready) { impl_->run(on_ready); }
void Server::stop() { impl_->stop(); }
std::string Server::metrics_text() const { return impl_->metrics(); }

}  // namespace sqrtdk::serve
