// sqrtdk-serve's HTTP service: one Model, its completions stepped together by a sqrtdk::Scheduler (continuous
// batching) behind a bounded queue.
//
//   POST /v1/completions, /v1/chat/completions  OpenAI's JSON in (request.h) and out (openai.h), or Server-Sent
//                         Events with "stream": true
//   GET  /v1/models, /v1/models/{id}  the one served model
//   GET  /healthz         {"status":"ok", ...}; 503 {"status":"draining"} once stop() began
//   GET  /metrics         Prometheus text: requests by status, tokens, latency, running and queued requests, KV-cache
//                         use, prefix-cache hits, step sizes (the gauges inference-aware load balancers read)
//   another method on these paths: 405 with Allow; another path: 404; absolute-form targets
//                         ("http://host:port/v1/models") are routed by their path
//   a Transfer-Encoding other than chunked: 501, then close; a POST's Content-Encoding other than identity: 415
//
// Concurrency: connections are served asynchronously by `http_threads` I/O threads (a slow or idle connection
// costs a socket and a little memory, never a thread), at most `max_connections` at once (past it: 503 and close).
// A completion is a job for the scheduler (<sqrtdk/scheduler.h>): one thread steps up to `sessions` generations
// together, each linear layer one GEMM over all of them, with `threads` threads; a generation's tokens are the same
// alone or beside others. A job starts when a slot and its KV reservation (prompt + max_tokens, from
// `kv_budget_mb`) are free; until then it waits in a queue of at most `queue`; past it, 503 with Retry-After.
// Prompts that start with a kept prefix (`prefix_cache`) reuse its KV rows.
//
// Deadlines: a client has `timeout_seconds` to send one whole request (head and body; also the idle wait between
// keep-alive requests) and to take each write. Past it, a request begun is answered 408 (an idle connection just
// closes); a request the client's half-close cut short, 400. A completion has `request_timeout_seconds` from its arrival: past
// it a queued one gets 503 and a running one stops with finish_reason "time_limit". A client that goes away
// (write error, or no reader behind a half-closed socket) cancels its completion at the next step.
//
// stop() drains: no new connections; queued completions get 503 (before any header); running ones finish; idle
// connections close at once; whatever is still open after `grace_seconds` is cut (running jobs cancelled).
#pragma once

#include <sqrtdk/model.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

namespace sqrtdk::serve {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                     // 0: an ephemeral port (bind() returns it)
  size_t sessions = 8;                 // generations stepped together (continuous batching); more wait in the queue
  size_t queue = 16;                   // requests that may wait to start; past it, 503
  int threads = 0;                     // threads of the scheduler's steps; 0: every core
  size_t prefill_chunk = 64;           // prompt tokens per generation per step (fixed: batching determinism)
  size_t kv_budget_mb = 0;             // KV cache of running generations + prefix cache; 0: sessions full contexts
  size_t prefix_cache = 32;            // prompt prefixes kept for reuse; 0: no prefix cache
  size_t max_context = 0;              // per-session context; 0: the model's max_seq
  std::string model_name;              // the model's id in /v1/models and `model`; empty: the file's stem
  size_t max_body = 1 << 20;           // request body bytes at most (413 past it, chunked bodies too)
  int timeout_seconds = 10;            // to send one whole request, to take each write, idle keep-alive
  int request_timeout_seconds = 300;   // a completion's limit from arrival (queue wait + generation)
  int grace_seconds = 10;              // stop(): connections still open after this are cut
  size_t http_threads = 0;             // I/O threads; 0: min(cores, 4)
  size_t max_connections = 0;          // open connections at most; 0: min(4096, open-file limit - 64)
  int token_delay_ms = 0;              // sleep after each step that generated tokens: a slower model (tests, demos)
};

class ServerImpl;

class Server {
 public:
  // Creates every session and starts the worker threads; throws sqrtdk::Error naming what did not fit (a KV
  // cache, a thread) and leaves nothing running.
  Server(std::shared_ptr<const Model> model, const ServerOptions& options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds the listening socket; returns the port (the chosen one when options.port is 0). Throws on failure.
  int bind();
  // Starts the I/O threads (throws if it cannot), calls on_ready, and serves until stop() has drained every
  // connection. Call bind() first.
  void run(const std::function<void()>& on_ready = nullptr);
  // Begins the drain (see above); safe from any thread (e.g. a signal-watching one).
  void stop();

  // The /metrics text (also for tests).
  std::string metrics_text() const;

 private:
  std::unique_ptr<ServerImpl> impl_;
};

}  // namespace sqrtdk::serve
