// ChildServer: runs bin/sqrtdk-serve as a child process on an ephemeral loopback port, plus the raw socket and
// /metrics helpers that drive it. Shared by the serve tests (tests/serve) and the load test (perf/bench_serve.cpp),
// so the two cannot drift apart. Loopback (127.0.0.1) only.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include <sys/types.h>

namespace sqrtdk::serve_harness {

// Starts `exe` with --host 127.0.0.1 --port 0 and `args`, and waits (at most 30 s) for its
// "listening on 127.0.0.1:PORT" line; throws std::runtime_error (with the last output line) if it does not come.
// The destructor sends SIGTERM (then SIGKILL after 10 s) if the server is still running. address_space_bytes > 0
// runs the child under that RLIMIT_AS (ulimit -v).
class ChildServer {
 public:
  ChildServer(const std::string& exe, const std::vector<std::string>& args, size_t address_space_bytes = 0);
  ~ChildServer();
  ChildServer(const ChildServer&) = delete;
  ChildServer& operator=(const ChildServer&) = delete;

  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  // Sends `sig` and waits (at most timeout_seconds) for the exit; returns the exit status, or -1 (killed by a
  // signal, or it did not exit in time).
  int stop(int sig, double timeout_seconds = 15);
  bool running();
  size_t rss_bytes() const;  // VmRSS from /proc/PID/status

 private:
  pid_t pid_ = -1;
  int port_ = 0;
};

// Runs `exe args` to its end (SIGKILL after timeout_seconds) under an optional RLIMIT_AS; returns the exit status
// (-1: killed or timed out) and what it wrote to stdout and stderr.
struct ExitResult {
  int status = -1;
  std::string output;
};
ExitResult run_to_exit(const std::string& exe, const std::vector<std::string>& args, size_t address_space_bytes = 0,
                       double timeout_seconds = 30);

// A TCP connection to 127.0.0.1:port; -1 on failure. timeout_seconds > 0 also sets send/receive timeouts and
// TCP_NODELAY (for request/response clients); 0 leaves the socket as it is (for slow-client tests).
int connect_loopback(int port, int timeout_seconds = 0);

// Value of a sample line "name value" in Prometheus text; -1 if absent.
double metric_value(const std::string& metrics, const std::string& name);

}  // namespace sqrtdk::serve_harness
