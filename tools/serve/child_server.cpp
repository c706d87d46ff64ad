// ChildServer and loopback helpers (see child_server.h).
#include "tools/serve/child_server.h"

#include <arpa/inet.h>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sstream>
#include <stdexcept>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

namespace sqrtdk::serve_harness {

namespace {

// In the child, before exec: the address-space limit, if any.
void limit_address_space(size_t bytes) {
  if (bytes == 0) return;
  const rlimit limit{bytes, bytes};
  setrlimit(RLIMIT_AS, &limit);
}

std::vector<char*> c_args(std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (auto& s : args) argv.push_back(s.data());
  argv.push_back(nullptr);
  return argv;
}

}  // namespace

ChildServer::ChildServer(const std::string& exe, const std::vector<std::string>& args, size_t address_space_bytes) {
  int out[2];
  if (pipe(out) != 0) throw std::runtime_error("pipe failed");
  std::vector<std::string> argv_s = {exe, "--host", "127.0.0.1", "--port", "0"};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  pid_ = fork();
  if (pid_ < 0) throw std::runtime_error("fork failed");
  if (pid_ == 0) {
    dup2(out[1], STDOUT_FILENO);
    close(out[0]);
    close(out[1]);
    limit_address_space(address_space_bytes);
    execv(argv_s[0].c_str(), c_args(argv_s).data());
    _exit(127);
  }
  close(out[1]);
  std::string line;
  pollfd p{out[0], POLLIN, 0};
  for (int waited_ms = 0; waited_ms < 30000;) {
    if (poll(&p, 1, 100) <= 0) {
      waited_ms += 100;
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        break;
      }
      continue;
    }
    char c;
    if (read(out[0], &c, 1) != 1) break;
    if (c != '\n') {
      line += c;
      continue;
    }
    const std::string prefix = "listening on 127.0.0.1:";
    if (line.rfind(prefix, 0) == 0) {
      port_ = std::stoi(line.substr(prefix.size()));
      break;
    }
    line.clear();
  }
  close(out[0]);
  if (port_ <= 0) {
    if (pid_ > 0) stop(SIGKILL);
    throw std::runtime_error("sqrtdk-serve did not start (last output: '" + line + "')");
  }
}

ChildServer::~ChildServer() {
  if (pid_ > 0 && stop(SIGTERM, 10) < 0 && pid_ > 0) stop(SIGKILL);
}

int ChildServer::stop(int sig, double timeout_seconds) {
  if (pid_ <= 0) return -1;
  kill(pid_, sig);
  for (double waited = 0; waited < timeout_seconds; waited += 0.01) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return -1;
}

bool ChildServer::running() {
  if (pid_ <= 0) return false;
  int status = 0;
  return waitpid(pid_, &status, WNOHANG) == 0;
}

size_t ChildServer::rss_bytes() const {
  std::ifstream f("/proc/" + std::to_string(pid_) + "/status");
  std::string key;
  while (f >> key) {
    if (key == "VmRSS:") {
      size_t kb = 0;
      f >> kb;
      return kb * 1024;
    }
    std::getline(f, key);
  }
  return 0;
}

ExitResult run_to_exit(const std::string& exe, const std::vector<std::string>& args, size_t address_space_bytes,
                       double timeout_seconds) {
  int out[2];
  if (pipe(out) != 0) throw std::runtime_error("pipe failed");
  std::vector<std::string> argv_s = {exe};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    dup2(out[1], STDOUT_FILENO);
    dup2(out[1], STDERR_FILENO);
    close(out[0]);
    close(out[1]);
    limit_address_space(address_space_bytes);
    execv(argv_s[0].c_str(), c_args(argv_s).data());
    _exit(127);
  }
  close(out[1]);
  ExitResult r;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_seconds);
  pollfd p{out[0], POLLIN, 0};
  char buf[4096];
  while (std::chrono::steady_clock::now() < deadline) {
    if (poll(&p, 1, 100) <= 0) continue;
    const ssize_t n = read(out[0], buf, sizeof buf);
    if (n <= 0) break;  // the child closed its output: it is exiting
    r.output.append(buf, static_cast<size_t>(n));
  }
  close(out[0]);
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() >= deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return r;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

int connect_loopback(int port, int timeout_seconds) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (timeout_seconds > 0) {
    timeval tv{timeout_seconds, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

double metric_value(const std::string& metrics, const std::string& name) {
  std::istringstream in(metrics);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(name + " ", 0) == 0) return std::stod(line.substr(name.size() + 1));
  }
  return -1;
}

}  // namespace sqrtdk::serve_harness
