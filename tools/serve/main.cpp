// sqrtdk-serve: an HTTP completion service on one model (see server.h for the endpoints and the concurrency).
//
//   sqrtdk-serve --port 8080 --sessions 2 --queue 16
//   curl -s 127.0.0.1:8080/v1/completions -d '{"prompt": "Once upon", "max_tokens": 32, "seed": 1}'
//
// Prints "listening on HOST:PORT" on stdout once it accepts connections (with --port 0 the port is the one the
// system chose). SIGTERM or SIGINT: stop accepting, finish the requests in flight, exit 0.
#include "tools/serve/server.h"

#include <sqrtdk/error.h>

#include <CLI/CLI.hpp>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <pthread.h>
#include <thread>

namespace {

std::string default_model_path() {
  if (const char* env = std::getenv("SQRTDK_MODEL"); env && env[0]) return env;
  // The build puts the default model in <build>/models/ beside <build>/bin/ (as the sqrtdk CLI does).
  std::error_code ec;
  auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) return (exe.parent_path().parent_path() / "models" / "default.sqdk").string();
  return "models/default.sqdk";
}

}  // namespace

int main(int argc, char** argv) {
  sqrtdk::serve::ServerOptions o;
  std::string model_path = default_model_path();
  CLI::App app{"sqrtdk-serve: an HTTP completion service (POST /v1/completions, GET /healthz, GET /metrics).\n"
               "Exit codes: 0 ok (also after SIGTERM/SIGINT), 1 usage error, 2 model error, 3 cannot listen."};
  app.add_option("--model", model_path, "model file (.sqdk); default: the bundled model")->capture_default_str();
  app.add_option("--host", o.host, "address to listen on (loopback by default)")->capture_default_str();
  app.add_option("--port", o.port, "TCP port; 0 = one the system picks (printed)")
      ->check(CLI::Range(0, 65535))->capture_default_str();
  app.add_option("--sessions", o.sessions, "sessions in the pool (concurrent generations)")
      ->check(CLI::Range(1, 256))->capture_default_str();
  app.add_option("--queue", o.queue, "requests that may wait for a session; past it, 503 at once")
      ->check(CLI::Range(0, 4096))->capture_default_str();
  app.add_option("--threads", o.threads, "threads per session call; 0 = cores / sessions")
      ->check(CLI::Range(0, 1024))->capture_default_str();
  app.add_option("--context", o.max_context, "context length per session; 0 = the model's max_seq")
      ->capture_default_str();
  app.add_option("--max-body", o.max_body, "request body bytes at most (413 past it)")
      ->check(CLI::Range(size_t{64}, size_t{1} << 30))->capture_default_str();
  app.add_option("--timeout", o.timeout_seconds, "socket read/write timeout in seconds (slow clients)")
      ->check(CLI::Range(1, 3600))->capture_default_str();
  app.add_option("--http-threads", o.http_threads, "connection threads; 0 = max(256, sessions + queue + 16)")
      ->capture_default_str();
  app.add_option("--delay-ms", o.token_delay_ms, "sleep per generated token: simulates a slower model (tests)")
      ->check(CLI::Range(0, 10000))->group("Testing");
  CLI11_PARSE(app, argc, argv);

  // Signals go to one thread (sigwait) so no handler runs inside the engine or httplib; block them first, before
  // any thread starts, so every thread inherits the mask. SIGPIPE: a client that left must not kill the server.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  std::shared_ptr<const sqrtdk::Model> model;
  try {
    model = sqrtdk::Model::load(model_path);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sqrtdk-serve: %s\n", e.what());
    return 2;
  }
  try {
    sqrtdk::serve::Server server(model, o);
    const int port = server.bind();
    std::atomic<bool> done{false};
    std::thread signal_watcher([&] {
      const timespec tick{0, 100'000'000};
      while (!done.load()) {
        const int sig = sigtimedwait(&stop_signals, nullptr, &tick);
        if (sig == SIGTERM || sig == SIGINT) {
          std::fprintf(stderr, "sqrtdk-serve: signal %d: finishing requests in flight\n", sig);
          server.stop();
          return;
        }
      }
    });
    std::printf("listening on %s:%d\n", o.host.c_str(), port);
    std::fflush(stdout);
    server.run();
    done = true;
    signal_watcher.join();
    std::fprintf(stderr, "sqrtdk-serve: stopped\n");
  } catch (const sqrtdk::Error& e) {
    std::fprintf(stderr, "sqrtdk-serve: %s\n", e.what());
    return 3;
  }
  return 0;
}
