// Helpers for the sqrtdk-serve tests: run the real executable as a child process on an ephemeral loopback port.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include <sys/types.h>

namespace sqrtdk::serve_test {

// Starts bin/sqrtdk-serve with `args` plus --port 0 on 127.0.0.1 and waits (at most 30 s) for its
// "listening on 127.0.0.1:PORT" line. The destructor sends SIGTERM (then SIGKILL after 10 s) if still running.
class ServerProcess {
 public:
  explicit ServerProcess(const std::vector<std::string>& args);
  ~ServerProcess();
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  // Sends `sig` and waits (at most timeout_seconds) for the exit; returns the exit status, or -1 (killed, or
  // it did not exit in time).
  int stop(int sig, double timeout_seconds = 15);
  bool running();
  size_t rss_bytes() const;  // VmRSS from /proc/PID/status

 private:
  pid_t pid_ = -1;
  int port_ = 0;
};

// A raw TCP connection to 127.0.0.1:port (for slow and many-connection clients); -1 on failure.
int connect_loopback(int port);

// Value of a sample line "name value" (or "name{labels} value") in Prometheus text; -1 if absent.
double metric_value(const std::string& metrics, const std::string& name);

}  // namespace sqrtdk::serve_test
