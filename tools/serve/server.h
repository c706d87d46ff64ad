// sqrtdk-serve's HTTP service: one Model shared by a fixed pool of Sessions behind a bounded queue.
//
//   POST /v1/completions  JSON in (request.h), JSON out, or Server-Sent Events with "stream": true
//   GET  /healthz         {"status":"ok", ...}
//   GET  /metrics         Prometheus text: requests by status, tokens, latency histogram, sessions, queue
//
// Concurrency: httplib serves each connection on one of `http_threads` threads. A completion takes a session from
// the pool; when all are busy it waits in a queue of at most `queue` requests, and past that it is answered 503 with
// Retry-After at once. Each session runs on its own worker thread (so only `sessions` threads ever enter the engine
// and its OpenMP teams), with `threads` threads per call; by default sessions x threads <= cores.
// A streaming client that disconnects is noticed at the next token write: generation stops, the session returns.
#pragma once

#include <sqrtdk/model.h>

#include <cstddef>
#include <memory>
#include <string>

namespace sqrtdk::serve {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                   // 0: an ephemeral port (bind() returns it)
  size_t sessions = 2;               // pool size
  size_t queue = 16;                 // requests that may wait for a session; past it, 503
  int threads = 0;                   // threads per session call; 0: max(1, cores / sessions)
  size_t max_context = 0;            // per-session context; 0: the model's max_seq
  size_t max_body = 1 << 20;         // request body bytes at most (413 past it)
  int timeout_seconds = 10;          // socket read/write timeout (slow clients)
  size_t http_threads = 0;           // connection threads; 0: max(256, sessions + queue + 16)
  int token_delay_ms = 0;            // sleep after each generated token: simulates a slower model (tests, demos)
};

class ServerImpl;

class Server {
 public:
  Server(std::shared_ptr<const Model> model, const ServerOptions& options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds the listening socket; returns the port (the chosen one when options.port is 0). Throws on failure.
  int bind();
  // Serves until stop(); then finishes in-flight requests and returns. Call bind() first.
  void run();
  // Stops accepting connections; safe from any thread (e.g. a signal-watching one).
  void stop();

  // The /metrics text (also for tests).
  std::string metrics_text() const;

 private:
  std::unique_ptr<ServerImpl> impl_;
};

}  // namespace sqrtdk::serve
