// sqrtdk-serve: an HTTP completion service on one model (see server.h for the endpoints and the concurrency).
//
//   sqrtdk-serve --port 8080 --sessions 8 --queue 16
//   curl -s 127.0.0.1:8080/v1/completions -d '{"prompt": "Once upon", "max_tokens": 32, "seed": 1}'
//
// Prints "listening on HOST:PORT" on stdout once it accepts connections (with --port 0 the port is the one the
// system chose). SIGTERM or SIGINT: drain (see server.h: running requests finish, queued ones get 503, what is still
// open after --grace seconds is cut), exit 0.
#include "tools/common/default_model.h"
#include "tools/common/sigbus_report.h"
#include "tools/common/usage_error.h"
#include "tools/serve/server.h"

#include <sqrtdk/error.h>

#include <CLI/CLI.hpp>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <pthread.h>
#include <thread>

int main(int argc, char** argv) {
  sqrtdk::serve::ServerOptions o;
  std::string model_path = sqrtdk::tools::default_model_path();
  CLI::App app{"sqrtdk-serve: an OpenAI-compatible HTTP service (POST /v1/completions, /v1/chat/completions,\n"
               "GET /v1/models, /healthz, /metrics).\n"
               "Exit codes: 0 ok (also after SIGTERM/SIGINT), 1 usage error (a bad option or value, or --context\n"
               "past the model's max_seq), 2 model error, 3 cannot listen, 4 cannot start (a session's KV cache or a\n"
               "thread does not fit in memory or the process limits)."};
  app.set_version_flag("--version", "sqrtdk-serve " SQRTDK_VERSION);
  // An empty value would quietly mean something else (every interface, the file's name, the bundled model): refused.
  using sqrtdk::tools::non_empty;
  app.add_option("--model", model_path, "model file (.sqdk); default: the bundled model")
      ->check(non_empty("leave --model out for the bundled model"))->capture_default_str();
  app.add_option("--model-name", o.model_name,
                 "the model's id in /v1/models and in requests' \"model\"; default: the file name without .sqdk")
      ->check(non_empty("leave --model-name out for the file name without .sqdk"));
  app.add_option("--host", o.host, "address to listen on (loopback by default)")
      ->check(non_empty("\"\" would listen on every interface; say 0.0.0.0 if that is meant"))->capture_default_str();
  app.add_option("--port", o.port, "TCP port; 0 = one the system picks (printed)")
      ->check(CLI::Range(0, 65535))->capture_default_str();
  app.add_option("--sessions", o.sessions,
                 "generations stepped together (continuous batching: one GEMM per layer over all of them)")
      ->check(CLI::Range(1, 256))->capture_default_str();
  app.add_option("--queue", o.queue, "requests that may wait to start; past it, 503 at once")
      ->check(CLI::Range(0, 4096))->capture_default_str();
  app.add_option("--threads", o.threads, "threads per step; 0 = every core")
      ->check(CLI::Range(0, 256))->capture_default_str();
  app.add_option("--prefill-chunk", o.prefill_chunk, "prompt tokens per generation per step")
      ->check(CLI::Range(size_t{1}, size_t{4096}))->capture_default_str();
  app.add_option("--kv-budget-mb", o.kv_budget_mb,
                 "KV cache of running generations + the prefix cache, MiB; 0 = --sessions full contexts")
      ->capture_default_str();
  app.add_option("--prefix-cache", o.prefix_cache, "prompt prefixes kept for reuse (0 = off)")
      ->check(CLI::Range(0, 1024))->capture_default_str();
  app.add_option("--context", o.max_context, "context length per request (prompt + tokens); 0 = the model's max_seq")
      ->capture_default_str();
  app.add_option("--max-body", o.max_body, "request body bytes at most (413 past it, chunked bodies too)")
      ->check(CLI::Range(size_t{64}, size_t{1} << 30))->capture_default_str();
  app.add_option("--timeout", o.timeout_seconds,
                 "seconds a client has to send a whole request (head and body; 408 past it), to take each write, "
                 "and idle between keep-alive requests")
      ->check(CLI::Range(1, 3600))->capture_default_str();
  app.add_option("--request-timeout", o.request_timeout_seconds,
                 "seconds a completion may take from arrival (queue + generation): then 503 if still queued, or "
                 "finish_reason \"time_limit\" with the tokens so far")
      ->check(CLI::Range(1, 86400))->capture_default_str();
  app.add_option("--grace", o.grace_seconds, "on SIGTERM/SIGINT: seconds before connections still open are cut")
      ->check(CLI::Range(0, 3600))->capture_default_str();
  app.add_option("--http-threads", o.http_threads, "I/O threads serving the connections; 0 = min(cores, 4)")
      ->check(CLI::Range(0, 256))->capture_default_str();
  app.add_option("--max-connections", o.max_connections,
                 "open connections at most (past it: 503 and close); 0 = min(4096, open-file limit - 64)")
      ->check(CLI::Range(0, 1 << 20))->capture_default_str();
  app.add_option("--delay-ms", o.token_delay_ms, "sleep after each step that generated tokens: simulates a slower model (tests)")
      ->check(CLI::Range(0, 10000))->group("Testing");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    std::printf("%s\n", e.what());
    return 0;
  } catch (const CLI::ParseError& e) {  // one line and exit 1, as the sqrtdk CLI (CLI11_PARSE: its own codes)
    std::fprintf(stderr, "sqrtdk-serve: usage error: %s (see 'sqrtdk-serve --help')\n",
                 sqrtdk::tools::usage_error_text(e).c_str());
    return 1;
  }

  // Signals go to one thread (sigwait) so no handler runs inside the engine or the I/O threads; block them first, before
  // any thread starts, so every thread inherits the mask. SIGPIPE: a client that left must not kill the server.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  std::shared_ptr<const sqrtdk::Model> model;
  try {
    sqrtdk::tools::report_sigbus_for_model(model_path);
    model = sqrtdk::Model::load(model_path);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sqrtdk-serve: %s\n", e.what());
    return 2;
  }
  // Only the model knows its max_seq: a usage error found after the load.
  if (o.max_context > model->config().max_seq) {
    std::fprintf(stderr,
                 "sqrtdk-serve: usage error: --context %zu is larger than the model's max_seq %zu (give at most %zu, "
                 "or 0 for max_seq)\n",
                 o.max_context, static_cast<size_t>(model->config().max_seq),
                 static_cast<size_t>(model->config().max_seq));
    return 1;
  }
  std::unique_ptr<sqrtdk::serve::Server> server_ptr;
  try {
    server_ptr = std::make_unique<sqrtdk::serve::Server>(model, o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sqrtdk-serve: cannot start: %s\n", e.what());
    return 4;
  }
  sqrtdk::serve::Server& server = *server_ptr;
  int port = 0;
  try {
    port = server.bind();
  } catch (const sqrtdk::Error& e) {
    std::fprintf(stderr, "sqrtdk-serve: %s\n", e.what());
    return 3;
  }
  std::atomic<bool> done{false};
  std::thread signal_watcher;
  try {
    signal_watcher = std::thread([&] {
      const timespec tick{0, 100'000'000};
      while (!done.load()) {
        const int sig = sigtimedwait(&stop_signals, nullptr, &tick);
        if (sig == SIGTERM || sig == SIGINT) {
          std::fprintf(stderr, "sqrtdk-serve: signal %d: finishing requests in flight (at most %d s)\n", sig,
                       o.grace_seconds);
          server.stop();
          return;
        }
      }
    });
    server.run([&] {
      std::printf("listening on %s:%d\n", o.host.c_str(), port);
      std::fflush(stdout);
    });
  } catch (const std::exception& e) {  // a thread that could not start
    std::fprintf(stderr, "sqrtdk-serve: cannot start: %s\n", e.what());
    done = true;
    if (signal_watcher.joinable()) signal_watcher.join();
    return 4;
  }
  done = true;
  signal_watcher.join();
  std::fprintf(stderr, "sqrtdk-serve: stopped\n");
  return 0;
}
