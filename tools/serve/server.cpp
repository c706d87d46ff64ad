// sqrtdk-serve's HTTP service (see server.h): the session pool, the completion loop, metrics and routes.
#include "tools/serve/server.h"

#include "tools/serve/request.h"

#include <sqrtdk/error.h>
#include <sqrtdk/generate.h>
#include <sqrtdk/session.h>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>
#include <vector>

namespace sqrtdk::serve {

namespace {

using nlohmann::json;

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

size_t resident_bytes() {
  long pages_total = 0, pages_resident = 0;
  if (FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld %ld", &pages_total, &pages_resident) != 2) pages_resident = 0;
    std::fclose(f);
  }
  return static_cast<size_t>(pages_resident) * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

// ---- the session pool: `n` sessions, each on its own worker thread, and a bounded wait queue ----

class SessionPool {
 public:
  struct Slot {
    explicit Slot(Session s) : session(std::move(s)) {}
    Session session;
    std::thread worker;
    std::mutex m;
    std::condition_variable cv;
    std::function<void()> job;  // set by run(), cleared by the worker when done
    std::exception_ptr error;
    bool quit = false;
  };

  // A session held by one request; returns it to the pool when destroyed.
  class Lease {
   public:
    Lease(SessionPool& pool, Slot* slot) : pool_(pool), slot_(slot) {}
    ~Lease() { pool_.release(slot_); }
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    Session& session() { return slot_->session; }
    // Runs fn on the session's worker thread and waits for it; rethrows what it threw.
    void run(std::function<void()> fn) {
      std::unique_lock lk(slot_->m);
      slot_->job = std::move(fn);
      slot_->error = nullptr;
      slot_->cv.notify_all();
      slot_->cv.wait(lk, [&] { return !slot_->job; });
      if (slot_->error) std::rethrow_exception(slot_->error);
    }

   private:
    SessionPool& pool_;
    Slot* slot_;
  };

  SessionPool(std::shared_ptr<const Model> model, size_t n_sessions, size_t queue_capacity,
              const SessionOptions& options)
      : queue_capacity_(queue_capacity) {
    for (size_t i = 0; i < n_sessions; ++i) {
      slots_.push_back(std::make_unique<Slot>(Session(model, options)));
      Slot* s = slots_.back().get();
      s->worker = std::thread([s] { work(*s); });
      free_.push_back(s);
    }
  }

  ~SessionPool() {
    for (auto& s : slots_) {
      {
        std::lock_guard lk(s->m);
        s->quit = true;
      }
      s->cv.notify_all();
      s->worker.join();
    }
  }

  // A free session, waiting for one if the queue has room; nullptr if all are busy and the queue is full.
  std::unique_ptr<Lease> acquire() {
    std::unique_lock lk(m_);
    if (free_.empty()) {
      if (waiting_ >= queue_capacity_) return nullptr;
      ++waiting_;
      cv_.wait(lk, [&] { return !free_.empty(); });
      --waiting_;
    }
    Slot* s = free_.back();
    free_.pop_back();
    return std::make_unique<Lease>(*this, s);
  }

  size_t size() const { return slots_.size(); }
  size_t in_use() const {
    std::lock_guard lk(m_);
    return slots_.size() - free_.size();
  }
  size_t waiting() const {
    std::lock_guard lk(m_);
    return waiting_;
  }
  size_t queue_capacity() const { return queue_capacity_; }

 private:
  static void work(Slot& s) {
    std::unique_lock lk(s.m);
    for (;;) {
      s.cv.wait(lk, [&] { return s.quit || s.job; });
      if (s.job) {
        try {
          s.job();
        } catch (...) {
          s.error = std::current_exception();
        }
        s.job = nullptr;
        s.cv.notify_all();
      } else if (s.quit) {
        return;
      }
    }
  }

  void release(Slot* s) {
    {
      std::lock_guard lk(m_);
      free_.push_back(s);
    }
    cv_.notify_one();
  }

  const size_t queue_capacity_;
  std::vector<std::unique_ptr<Slot>> slots_;
  mutable std::mutex m_;
  std::condition_variable cv_;
  std::vector<Slot*> free_;
  size_t waiting_ = 0;
};

// ---- the completion loop ----

struct Completion {
  std::vector<uint32_t> tokens;
  std::string text;
  std::string finish_reason;  // "length", "stop", or "cancelled" (the client went away)
};

// Called with each token (and its text) once it is certain not to be part of a stop string; false stops.
using EmitFn = std::function<bool(uint32_t token, std::string_view text)>;

Completion run_completion(Session& session, const CompletionRequest& r, const EmitFn& emit, int token_delay_ms) {
  const ModelConfig& config = session.model().config();
  const bool byte_level = config.tokenizer == TokenizerKind::byte_level;
  session.reset();
  SamplingOptions so;
  so.temperature = r.temperature;
  so.top_k = r.top_k;
  so.top_p = r.top_p;
  so.seed = r.seed;
  Sampler sampler(so);

  Completion c;
  std::vector<size_t> ends;  // text end offset of each token
  size_t emitted = 0;
  auto flush = [&](size_t n_tokens) {
    for (; emitted < n_tokens; ++emitted) {
      const size_t begin = emitted ? ends[emitted - 1] : 0;
      if (emit && !emit(c.tokens[emitted], std::string_view(c.text).substr(begin, ends[emitted] - begin)))
        return false;
    }
    return true;
  };

  std::span<const float> logits = session.prefill(r.prompt);
  c.finish_reason = "length";
  while (c.tokens.size() < r.max_tokens) {
    const uint32_t token = sampler.sample(logits);
    if (token == config.eos_id ||
        std::find(r.stop_tokens.begin(), r.stop_tokens.end(), token) != r.stop_tokens.end()) {
      c.finish_reason = "stop";
      break;
    }
    if (token_delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(token_delay_ms));
    c.tokens.push_back(token);
    if (byte_level && token < 256) c.text.push_back(static_cast<char>(token));
    ends.push_back(c.text.size());

    bool stopped = false;
    for (const std::string& stop : r.stop_texts) {
      if (c.text.size() >= stop.size() && c.text.compare(c.text.size() - stop.size(), stop.size(), stop) == 0) {
        // Drop the stop string: byte-level tokens never straddle it, so whole tokens go.
        const size_t cut = c.text.size() - stop.size();
        size_t keep = 0;
        while (keep < ends.size() && ends[keep] <= cut) ++keep;
        c.tokens.resize(keep);
        ends.resize(keep);
        c.text.resize(cut);
        stopped = true;
        break;
      }
    }
    if (stopped) {
      c.finish_reason = "stop";
      break;
    }
    // Hold back the tokens that might begin a stop string, so a stream never shows part of one.
    size_t hold = 0;
    for (const std::string& stop : r.stop_texts) {
      for (size_t len = std::min(stop.size() - 1, c.text.size()); len > hold; --len) {
        if (c.text.compare(c.text.size() - len, len, stop, 0, len) == 0) {
          hold = len;
          break;
        }
      }
    }
    size_t safe = c.tokens.size();
    while (safe > 0 && ends[safe - 1] > c.text.size() - hold) --safe;
    if (!flush(safe)) {
      c.finish_reason = "cancelled";
      return c;
    }
    if (c.tokens.size() == r.max_tokens || session.n_past() >= session.max_context()) break;
    logits = session.decode(token);
  }
  if (!flush(c.tokens.size())) c.finish_reason = "cancelled";
  return c;
}

// ---- metrics ----

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

  std::string text(const SessionPool& pool) const {
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
    line("# HELP sqrtdk_client_disconnects_total Streams cut short because the client went away.");
    line("# TYPE sqrtdk_client_disconnects_total counter");
    line("sqrtdk_client_disconnects_total " + std::to_string(disconnects.load()));
    line("# HELP sqrtdk_request_duration_seconds Latency of POST /v1/completions (any status).");
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
    line("# HELP sqrtdk_sessions Sessions in the pool.");
    line("# TYPE sqrtdk_sessions gauge");
    line("sqrtdk_sessions " + std::to_string(pool.size()));
    line("# HELP sqrtdk_sessions_in_use Sessions serving a request now.");
    line("# TYPE sqrtdk_sessions_in_use gauge");
    line("sqrtdk_sessions_in_use " + std::to_string(pool.in_use()));
    line("# HELP sqrtdk_queue_depth Requests waiting for a session now.");
    line("# TYPE sqrtdk_queue_depth gauge");
    line("sqrtdk_queue_depth " + std::to_string(pool.waiting()));
    line("# HELP sqrtdk_queue_capacity Requests that may wait; past it, 503.");
    line("# TYPE sqrtdk_queue_capacity gauge");
    line("sqrtdk_queue_capacity " + std::to_string(pool.queue_capacity()));
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

void json_error(httplib::Response& res, int status, const std::string& message) {
  res.status = status;
  const char* type = status == 400   ? "invalid_request"
                     : status == 413 ? "body_too_large"
                     : status == 503 ? "overloaded"
                     : status == 404 ? "not_found"
                     : status == 405 ? "method_not_allowed"
                                     : "server_error";
  res.set_content(dump(json{{"error", {{"message", message}, {"type", type}, {"code", status}}}}) + "\n",
                  "application/json");
}

// The latency clock of the request this connection thread is serving (httplib serves a request on one thread).
thread_local double t_request_start = 0;

}  // namespace

// ---- the server ----

class ServerImpl {
 public:
  ServerImpl(std::shared_ptr<const Model> model, const ServerOptions& o)
      : model_(std::move(model)), options_(o), pool_(model_, o.sessions, o.queue, session_options(*model_, o)) {
    limits_.max_context = pool_context(*model_, o);
    setup_routes();
  }

  static size_t pool_context(const Model& model, const ServerOptions& o) {
    return o.max_context ? o.max_context : model.config().max_seq;
  }
  static SessionOptions session_options(const Model& model, const ServerOptions& o) {
    if (o.sessions == 0) throw Error("--sessions must be at least 1");
    SessionOptions so;
    so.max_context = pool_context(model, o);
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    so.n_threads = o.threads > 0 ? o.threads : std::max(1, cores / static_cast<int>(o.sessions));
    return so;
  }

  int bind() {
    const int port = options_.port == 0 ? http_.bind_to_any_port(options_.host)
                                        : (http_.bind_to_port(options_.host, options_.port) ? options_.port : -1);
    if (port < 0)
      throw Error("cannot listen on " + options_.host + ":" + std::to_string(options_.port) +
                  " (address in use, or not a local address?)");
    // Debian's httplib listens with a backlog of 5 (compiled in): a burst of connections then waits on SYN
    // retransmits (1 s, 3 s, ...). Calling listen() again on the bound socket raises the backlog.
    if (listen_fd_ >= 0) ::listen(listen_fd_, SOMAXCONN);
    return port;
  }
  void run() { http_.listen_after_bind(); }
  void stop() { http_.stop(); }
  std::string metrics() const { return metrics_.text(pool_); }

 private:
  void setup_routes() {
    const size_t http_threads =
        options_.http_threads ? options_.http_threads : std::max<size_t>(256, options_.sessions + options_.queue + 16);
    http_.new_task_queue = [http_threads] { return new httplib::ThreadPool(http_threads); };
    http_.set_payload_max_length(options_.max_body);
    http_.set_read_timeout(options_.timeout_seconds, 0);
    http_.set_write_timeout(options_.timeout_seconds, 0);
    http_.set_keep_alive_timeout(std::min(options_.timeout_seconds, 5));
    http_.set_keep_alive_max_count(100);
    http_.set_tcp_nodelay(true);  // one SSE event per token: no Nagle delay
    http_.set_socket_options([this](socket_t fd) {  // called on the listening socket only
      httplib::default_socket_options(fd);
      listen_fd_ = fd;
    });

    http_.set_pre_routing_handler([](const httplib::Request&, httplib::Response&) {
      t_request_start = now_seconds();
      return httplib::Server::HandlerResponse::Unhandled;
    });
    http_.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
      metrics_.count_response(res.status);
      if (req.path == "/v1/completions") metrics_.observe_latency(now_seconds() - t_request_start);
    });
    http_.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty() || res.is_chunked_content_provider_) return;
      if (res.status == 413)
        json_error(res, 413, "request body too large");
      else if (res.status == 404)
        json_error(res, 404, "no such endpoint: " + req.method + " " + req.path);
      else
        json_error(res, res.status, "HTTP error " + std::to_string(res.status));
    });
    http_.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
      std::string what = "internal error";
      try {
        std::rethrow_exception(ep);
      } catch (const std::exception& e) {
        what = e.what();
      } catch (...) {
      }
      json_error(res, 500, what);
    });

    http_.Get("/healthz", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(dump(json{{"status", "ok"},
                                {"sessions", pool_.size()},
                                {"sessions_in_use", pool_.in_use()},
                                {"queue_depth", pool_.waiting()},
                                {"model", model_->path()}}) +
                          "\n",
                      "application/json");
    });
    http_.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(metrics_.text(pool_), "text/plain; version=0.0.4");
    });
    http_.Post("/v1/completions",
               [this](const httplib::Request& req, httplib::Response& res) { completions(req, res); });
  }

  void completions(const httplib::Request& req, httplib::Response& res) {
    CompletionRequest r;
    try {
      r = parse_completion_request(req.body, model_->config(), limits_);
    } catch (const RequestError& e) {
      json_error(res, e.status(), e.what());
      return;
    }
    std::unique_ptr<SessionPool::Lease> lease = pool_.acquire();
    if (!lease) {
      ++metrics_.rejected;
      res.set_header("Retry-After", "1");
      json_error(res, 503, "all " + std::to_string(pool_.size()) + " sessions are busy and the queue of " +
                               std::to_string(pool_.queue_capacity()) + " is full; retry later");
      return;
    }
    const std::string id = "cmpl-" + std::to_string(++next_id_);
    metrics_.prompt_tokens += r.prompt.size();

    if (!r.stream) {
      Completion c;
      lease->run([&] { c = run_completion(lease->session(), r, nullptr, options_.token_delay_ms); });
      lease.reset();
      metrics_.generated_tokens += c.tokens.size();
      res.set_content(dump(json{{"id", id},
                                {"object", "text_completion"},
                                {"text", c.text},
                                {"tokens", c.tokens},
                                {"finish_reason", c.finish_reason},
                                {"usage",
                                 {{"prompt_tokens", r.prompt.size()},
                                  {"completion_tokens", c.tokens.size()},
                                  {"total_tokens", r.prompt.size() + c.tokens.size()}}}}) +
                          "\n",
                      "application/json");
      return;
    }

    // Streaming: the provider runs the whole generation in its first call, writing one event per token.
    struct Stream {
      std::unique_ptr<SessionPool::Lease> lease;
      CompletionRequest request;
      std::string id;
    };
    auto st = std::make_shared<Stream>(Stream{std::move(lease), std::move(r), id});
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, st](size_t, httplib::DataSink& sink) {
          Completion c;
          bool ok = true;
          try {
            st->lease->run([&] {
              c = run_completion(st->lease->session(), st->request,
                                 [&](uint32_t token, std::string_view text) {
                                   ++metrics_.generated_tokens;
                                   const std::string ev =
                                       "data: " + dump(json{{"id", st->id}, {"token", token}, {"text", text}}) +
                                       "\n\n";
                                   return sink.write(ev.data(), ev.size());
                                 },
                                 options_.token_delay_ms);
            });
          } catch (const std::exception& e) {
            const std::string ev = "event: error\ndata: " + dump(json{{"error", {{"message", e.what()}}}}) + "\n\n";
            ok = sink.write(ev.data(), ev.size());
            c.finish_reason = "error";
          }
          st->lease.reset();  // the session is free before the last bytes go out
          if (c.finish_reason == "cancelled" || !ok) {
            ++metrics_.disconnects;
            return false;
          }
          const std::string end =
              "data: " +
              dump(json{{"id", st->id},
                        {"finish_reason", c.finish_reason},
                        {"usage",
                         {{"prompt_tokens", st->request.prompt.size()},
                          {"completion_tokens", c.tokens.size()},
                          {"total_tokens", st->request.prompt.size() + c.tokens.size()}}}}) +
              "\n\ndata: [DONE]\n\n";
          if (!sink.write(end.data(), end.size())) {
            ++metrics_.disconnects;
            return false;
          }
          sink.done();
          return true;
        },
        // Runs when the response is destroyed, also if the provider never ran (the client left first).
        [st](bool) { st->lease.reset(); });
  }

  std::shared_ptr<const Model> model_;
  ServerOptions options_;
  SessionPool pool_;
  RequestLimits limits_;
  Metrics metrics_;
  std::atomic<uint64_t> next_id_{0};
  int listen_fd_ = -1;
  httplib::Server http_;
};

Server::Server(std::shared_ptr<const Model> model, const ServerOptions& options)
    : impl_(std::make_unique<ServerImpl>(std::move(model), options)) {}
Server::~Server() = default;
int Server::bind() { return impl_->bind(); }
void Server::run() { impl_->run(); }
void Server::stop() { impl_->stop(); }
std::string Server::metrics_text() const { return impl_->metrics(); }

}  // namespace sqrtdk::serve
