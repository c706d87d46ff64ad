// sqrtdk-serve's HTTP service: one Model shared by a fixed pool of Sessions behind a bounded queue.
//
//   POST /v1/completions, /v1/chat/completions  OpenAI's JSON in (request.h) and out (openai.h), or Server-Sent
//                         Events with "stream": true
//   GET  /v1/models, /v1/models/{id}  the one served model
//   GET  /healthz         {"status":"ok", ...}
//   GET  /metrics         Prometheus text: requests by status, tokens, latency histogram, sessions, queue
//   another method on these paths: 405 with Allow; another path: 404
//
// Concurrency: connections are served asynchronously by `http_threads` I/O threads (a slow or idle connection
// costs a socket and a little memory, never a thread), at most `max_connections` at once (past it: 503 and close).
// A completion is a job for the session pool: `sessions` worker threads, each owning one Session (so only they
// enter the engine and its OpenMP teams), with `threads` threads per call; by default sessions x threads <= cores.
// When all sessions are busy a job waits in a queue of at most `queue`; past it, 503 with Retry-After at once.
//
// Deadlines: a client has `timeout_seconds` to send one whole request (head and body; also the idle wait between
// keep-alive requests) and to take each write. A completion has `request_timeout_seconds` from its arrival: past
// it a queued one gets 503 and a running one stops with finish_reason "time_limit". A client that goes away
// (write error, or no reader behind a half-closed socket) cancels its completion at the next token.
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
  size_t sessions = 2;                 // pool size
  size_t queue = 16;                   // requests that may wait for a session; past it, 503
  int threads = 0;                     // threads per session call; 0: max(1, cores / sessions)
  size_t max_context = 0;              // per-session context; 0: the model's max_seq
  std::string model_name;              // the model's id in /v1/models and `model`; empty: the file's stem
  size_t max_body = 1 << 20;           // request body bytes at most (413 past it, chunked bodies too)
  int timeout_seconds = 10;            // to send one whole request, to take each write, idle keep-alive
  int request_timeout_seconds = 300;   // a completion's limit from arrival (queue wait + generation)
  int grace_seconds = 10;              // stop(): connections still open after this are cut
  size_t http_threads = 0;             // I/O threads; 0: min(cores, 4)
  size_t max_connections = 0;          // open connections at most; 0: min(4096, open-file limit - 64)
  int token_delay_ms = 0;              // sleep after each generated token: simulates a slower model (tests, demos)
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
