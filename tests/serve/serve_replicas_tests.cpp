// sqrtdk-serve replicas behind HAProxy: the shipped config (tools/serve/replicas/haproxy.cfg) with fast health checks,
// HAProxy on a free loopback port in front of two replicas (child processes), clients sending completions through
// it while one replica is stopped: by SIGTERM (a drain: no request may fail) and by SIGKILL (requests that reach the
// balancer after the kill may not fail; a stream that was running on the dead replica ends without [DONE]).
// Skipped, with a message, only when no haproxy binary is installed (tools/setup.sh installs it).
#include "tests/serve/serve_test_util.h"

#include <doctest/doctest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <arpa/inet.h>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <netinet/in.h>
#include <sstream>
#include <stdexcept>
#include <string>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

extern char** environ;

// Named after the file: the sanitizer builds compile test files together (a unity build), and this file's
// helpers share their names with another test file's.
namespace serve_replicas_tests {

namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;
using sqrtdk::serve_test::connect_loopback;
using sqrtdk::serve_test::metric_value;
using sqrtdk::serve_test::ServerProcess;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Polls `done` every 20 ms for at most `seconds`; returns its last answer.
bool wait_for(double seconds, const std::function<bool()>& done) {
  const auto t0 = Clock::now();
  for (;;) {
    if (done()) return true;
    if (seconds_since(t0) > seconds) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// haproxy on PATH or in the sbin directories (a user's PATH often lacks /usr/sbin); "" if none.
std::string find_haproxy() {
  std::vector<std::string> dirs;
  if (const char* path = std::getenv("PATH")) {
    std::istringstream in(path);
    for (std::string d; std::getline(in, d, ':');)
      if (!d.empty()) dirs.push_back(d);
  }
  for (const char* d : {"/usr/sbin", "/usr/local/sbin", "/sbin"}) dirs.emplace_back(d);
  for (const auto& d : dirs) {
    const std::string exe = d + "/haproxy";
    if (access(exe.c_str(), X_OK) == 0) return exe;
  }
  return "";
}

// A loopback port nobody listens on now (the system's pick for an ephemeral bind).
int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::runtime_error("socket failed");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    close(fd);
    throw std::runtime_error("bind failed");
  }
  close(fd);
  return ntohs(a.sin_port);
}

// HAProxy as a child process: `haproxy -f tools/serve/replicas/haproxy.cfg -db` (foreground), its variables in the
// environment (health checks every 200 ms, DOWN after one failure), its output in a log file in the working
// directory (printed when a check fails). The destructor stops it (SIGTERM, then SIGKILL).
class Balancer {
 public:
  Balancer(const std::string& exe, int replica_1, int replica_2, int replica_maxconn) {
    for (int attempt = 0; attempt < 3 && pid_ <= 0; ++attempt) start(exe, replica_1, replica_2, replica_maxconn);
    if (pid_ <= 0) throw std::runtime_error("haproxy did not start:\n" + log());
    // Up and checked: both servers UP with a passed layer-7 check (/healthz answered 200).
    const bool ready = wait_for(30, [&] {
      const auto s = servers();
      for (const char* name : {"r1", "r2"}) {
        const auto it = s.find(name);
        if (it == s.end() || it->second.at("status") != "UP" || it->second.at("check_status") != "L7OK") return false;
      }
      return true;
    });
    if (!ready) {
      stop();
      throw std::runtime_error("haproxy's backends did not come UP:\n" + log());
    }
  }
  ~Balancer() { stop(); }
  Balancer(const Balancer&) = delete;
  Balancer& operator=(const Balancer&) = delete;

  int port() const { return port_; }

  // "show stat" on the admin socket: backend sqrtdk's rows (servers r1, r2 and "BACKEND"), column name -> value.
  std::map<std::string, std::map<std::string, std::string>> servers() const {
    std::map<std::string, std::map<std::string, std::string>> rows;
    const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return rows;
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::snprintf(a.sun_path, sizeof a.sun_path, "%s", socket_path_.c_str());
    std::string text;
    if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 && write(fd, "show stat\n", 10) == 10) {
      char buf[4096];
      for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0;) text.append(buf, static_cast<size_t>(n));
    }
    close(fd);
    std::istringstream in(text);
    std::string line;
    std::vector<std::string> columns;
    auto split = [](const std::string& l) {
      std::vector<std::string> v;
      std::istringstream s(l);
      for (std::string f; std::getline(s, f, ',');) v.push_back(f);
      return v;
    };
    while (std::getline(in, line)) {
      if (line.rfind("# ", 0) == 0) {
        columns = split(line.substr(2));
        continue;
      }
      const auto fields = split(line);
      if (fields.size() < 2 || fields[0] != "sqrtdk") continue;
      auto& row = rows[fields[1]];
      for (size_t i = 0; i < columns.size(); ++i) row[columns[i]] = i < fields.size() ? fields[i] : "";
    }
    return rows;
  }
  // A counter of one row, 0 if absent.
  long stat(const std::string& server, const std::string& column) const {
    const auto s = servers();
    const auto r = s.find(server);
    if (r == s.end()) return 0;
    const auto c = r->second.find(column);
    return c == r->second.end() || c->second.empty() ? 0 : std::stol(c->second);
  }
  std::string status(const std::string& server) const {
    const auto s = servers();
    const auto r = s.find(server);
    return r == s.end() ? "" : r->second.at("status");
  }

  // The last 80 lines of HAProxy's log (a line per request, and the servers going UP and DOWN).
  std::string log() const {
    std::ifstream f(log_path_);
    std::vector<std::string> lines;
    for (std::string l; std::getline(f, l);) lines.push_back(l);
    std::string s;
    for (size_t i = lines.size() > 80 ? lines.size() - 80 : 0; i < lines.size(); ++i) s += lines[i] + "\n";
    return s;
  }

 private:
  void start(const std::string& exe, int replica_1, int replica_2, int replica_maxconn) {
    port_ = free_port();
    const std::string tag = std::to_string(getpid()) + "-" + std::to_string(port_);
    socket_path_ = (std::filesystem::temp_directory_path() / ("sqrtdk-haproxy-" + tag + ".sock")).string();
    log_path_ = std::filesystem::absolute("haproxy-replicas-" + tag + ".log").string();
    std::vector<std::string> env;
    for (char** e = environ; *e; ++e)
      if (std::string_view(*e).rfind("SQRTDK_", 0) != 0) env.emplace_back(*e);  // none of the user's settings
    const std::string loopback = "127.0.0.1:";
    env.push_back("SQRTDK_LB_BIND=" + loopback + std::to_string(port_));
    env.push_back("SQRTDK_REPLICA_1=" + loopback + std::to_string(replica_1));
    env.push_back("SQRTDK_REPLICA_2=" + loopback + std::to_string(replica_2));
    env.push_back("SQRTDK_REPLICA_MAXCONN=" + std::to_string(replica_maxconn));
    env.push_back("SQRTDK_CHECK_INTER=200ms");
    env.push_back("SQRTDK_CHECK_FALL=1");
    env.push_back("SQRTDK_CHECK_RISE=2");
    env.push_back("SQRTDK_LB_SOCKET=" + socket_path_);
    std::vector<std::string> args = {exe, "-f", SQRTDK_REPLICAS_HAPROXY_CFG, "-db"};
    std::vector<char*> argv, envp;
    for (auto& s : args) argv.push_back(s.data());
    argv.push_back(nullptr);
    for (auto& s : env) envp.push_back(s.data());
    envp.push_back(nullptr);
    const int log_fd = open(log_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (log_fd < 0) throw std::runtime_error("cannot write " + log_path_);
    pid_ = fork();
    if (pid_ < 0) {
      close(log_fd);
      throw std::runtime_error("fork failed");
    }
    if (pid_ == 0) {
      dup2(log_fd, STDOUT_FILENO);
      dup2(log_fd, STDERR_FILENO);
      execve(argv[0], argv.data(), envp.data());
      _exit(127);
    }
    close(log_fd);
    // Listening: the admin socket answers. Exited: e.g. the port was taken meanwhile; the caller tries another.
    const bool up = wait_for(15, [&] {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return true;
      }
      return !servers().empty();
    });
    if (!up) stop();
  }

  void stop() {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      int status = 0;
      const bool exited = wait_for(10, [&] { return waitpid(pid_, &status, WNOHANG) == pid_; });
      if (!exited) {
        kill(pid_, SIGKILL);
        waitpid(pid_, &status, 0);
      }
      pid_ = -1;
    }
    if (!socket_path_.empty()) unlink(socket_path_.c_str());
  }

  pid_t pid_ = -1;
  int port_ = 0;
  std::string socket_path_;
  std::string log_path_;
};

// Why a /v1/completions answer is not a good completion ("" if it is): status 200, a JSON object without "error",
// with generated content (a non-empty "text" or "content" anywhere, or usage.completion_tokens > 0). Shape-agnostic
// on purpose: the response format may become OpenAI's.
bool has_content(const json& j) {
  if (j.is_object()) {
    for (const auto& item : j.items()) {
      if ((item.key() == "text" || item.key() == "content") && item.value().is_string() &&
          !item.value().get<std::string>().empty())
        return true;
      if (has_content(item.value())) return true;
    }
  } else if (j.is_array()) {
    for (const auto& e : j)
      if (has_content(e)) return true;
  }
  return false;
}

std::string completion_problem(int status, const std::string& body) {
  if (status != 200) return "status " + std::to_string(status) + ": " + body;
  const json j = json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return "not a JSON object: " + body;
  if (j.contains("error")) return "an error: " + body;
  const bool counted = j.contains("usage") && j["usage"].is_object() && j["usage"].value("completion_tokens", 0) > 0;
  if (!has_content(j) && !counted) return "nothing generated: " + body;
  return "";
}

struct Outcome {
  Clock::time_point start, end;
  std::string replica;  // X-Sqrtdk-Replica, set by the balancer
  std::string problem;  // "" for a good completion
};

// `clients` threads sending non-streamed completions through the balancer back to back until stop().
class Load {
 public:
  Load(int port, int clients) {
    for (int i = 0; i < clients; ++i) threads_.emplace_back([this, port, i] { client(port, i); });
  }
  ~Load() { stop(); }
  Load(const Load&) = delete;
  Load& operator=(const Load&) = delete;

  void stop() {
    stop_ = true;
    for (auto& t : threads_)
      if (t.joinable()) t.join();
  }
  std::vector<Outcome> outcomes() const {
    std::lock_guard lk(m_);
    return outcomes_;
  }
  size_t count(const std::function<bool(const Outcome&)>& f) const {
    std::lock_guard lk(m_);
    size_t n = 0;
    for (const auto& o : outcomes_) n += f(o) ? 1 : 0;
    return n;
  }

 private:
  void client(int port, int i) {
    httplib::Client cli("127.0.0.1", port);
    cli.set_keep_alive(true);
    cli.set_connection_timeout(10);
    cli.set_write_timeout(10);
    cli.set_read_timeout(120);  // a retried completion waits for its second replica; sanitizer builds are slow
    const std::string body = json{{"prompt", "Once upon a time " + std::to_string(i)}, {"max_tokens", 8},
                                  {"seed", 1 + i}}.dump();
    while (!stop_) {
      Outcome o;
      o.start = Clock::now();
      auto res = cli.Post("/v1/completions", body, "application/json");
      o.end = Clock::now();
      if (!res) {
        o.problem = "no response: " + httplib::to_string(res.error());
      } else {
        o.replica = res->get_header_value("X-Sqrtdk-Replica");
        o.problem = completion_problem(res->status, res->body);
      }
      std::lock_guard lk(m_);
      outcomes_.push_back(std::move(o));
    }
  }

  std::atomic<bool> stop_{false};
  mutable std::mutex m_;
  std::vector<Outcome> outcomes_;
  std::vector<std::thread> threads_;
};

// A streamed completion through the balancer on a raw socket: the request goes out at once, read() takes what came.
class Stream {
 public:
  Stream(int port, int max_tokens) : fd_(connect_loopback(port, 60)) {
    REQUIRE(fd_ >= 0);
    const std::string body = json{{"prompt", "A long story"}, {"max_tokens", max_tokens}, {"stream", true}}.dump();
    const std::string request = "POST /v1/completions HTTP/1.1\r\nHost: sqrtdk\r\nContent-Type: application/json\r\n"
                                "Connection: close\r\nContent-Length: " +
                                std::to_string(body.size()) + "\r\n\r\n" + body;
    REQUIRE(send(fd_, request.data(), request.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(request.size()));
  }
  ~Stream() { close(fd_); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  // Reads until `what` has arrived (true) or the connection ended or was quiet for 60 s (false).
  bool read_until(const std::string& what) {
    while (text_.find(what) == std::string::npos)
      if (!read_more()) return false;
    return true;
  }
  // Reads to the end of the connection (or 60 s of silence).
  void read_to_end() {
    while (read_more()) {
    }
  }
  const std::string& text() const { return text_; }
  // The X-Sqrtdk-Replica header of the response ("" before the head arrived).
  std::string replica() const {
    const std::string name = "\r\nx-sqrtdk-replica: ";
    std::string lower = text_.substr(0, text_.find("\r\n\r\n"));
    for (auto& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    const size_t at = lower.find(name);
    if (at == std::string::npos) return "";
    const size_t from = at + name.size();
    return text_.substr(from, text_.find("\r\n", from) - from);
  }

 private:
  bool read_more() {
    char buf[4096];
    const ssize_t n = recv(fd_, buf, sizeof buf, 0);
    if (n <= 0) return false;
    text_.append(buf, static_cast<size_t>(n));
    return true;
  }

  int fd_;
  std::string text_;
};

std::string problems_of(const std::vector<Outcome>& outcomes, const std::function<bool(const Outcome&)>& which) {
  std::string s;
  size_t n = 0;
  for (const auto& o : outcomes)
    if (which(o) && !o.problem.empty() && ++n <= 5) s += "  " + o.problem + "\n";
  return std::to_string(n) + " failed\n" + s;
}

// Replicas with one session each and a short queue, slowed to 20 ms a token so requests overlap the stop.
const std::vector<std::string> kReplica = {"--sessions", "1", "--queue", "4",  "--threads",
                                           "1",          "--delay-ms", "20", "--grace", "60"};
constexpr int kReplicaMaxconn = 5;  // --sessions + --queue: the balancer never overfills a replica's queue
constexpr int kClients = 6;

}  // namespace

TEST_CASE("serve replicas: HAProxy, SIGTERM of one replica under load: no request fails, the other serves the rest") {
  const std::string haproxy = find_haproxy();
  if (haproxy.empty()) {
    MESSAGE("skipped: no haproxy binary on PATH or in /usr/sbin (apt-get install haproxy; tools/setup.sh does)");
    return;
  }
  ServerProcess r1(kReplica), r2(kReplica);
  Balancer lb(haproxy, r1.port(), r2.port(), kReplicaMaxconn);
  Load load(lb.port(), kClients);
  // Both replicas answer through the balancer.
  REQUIRE(wait_for(120, [&] {
    return load.count([](const Outcome& o) { return o.replica == "r1"; }) >= 3 &&
           load.count([](const Outcome& o) { return o.replica == "r2"; }) >= 3;
  }));
  // A stream on one replica (the victim): its only session is busy, so requests queue behind it there.
  Stream stream(lb.port(), 200);
  REQUIRE(stream.read_until("data: "));  // the first token arrived while the stream runs: not buffered
  const std::string victim_name = stream.replica();
  REQUIRE((victim_name == "r1" || victim_name == "r2"));
  ServerProcess& victim = victim_name == "r1" ? r1 : r2;
  const std::string survivor_name = victim_name == "r1" ? "r2" : "r1";
  REQUIRE(wait_for(60, [&] {
    httplib::Client cli("127.0.0.1", victim.port());
    const auto res = cli.Get("/metrics");
    return res && metric_value(res->body, "sqrtdk_queue_depth") >= 1;
  }));
  const size_t victim_served = load.count([&](const Outcome& o) { return o.replica == victim_name; });

  // The drain: the running stream finishes, the queued completions get 503 and the balancer retries them.
  const auto t_term = Clock::now();
  const int exit_status = victim.stop(SIGTERM, 90);
  const auto t_exit = Clock::now();
  CHECK(exit_status == 0);
  CHECK(stream.read_until("data: [DONE]"));
  CHECK(stream.text().find("HTTP/1.1 200") == 0);
  CHECK(wait_for(30, [&] { return lb.status(victim_name).rfind("DOWN", 0) == 0; }));
  // The survivor takes the rest.
  auto after_exit = [&](const Outcome& o) { return o.start > t_exit; };
  CHECK(wait_for(120, [&] { return load.count(after_exit) >= 10; }));
  load.stop();

  const auto outcomes = load.outcomes();
  const long retries = lb.stat("BACKEND", "wretr");
  const long redispatches = lb.stat("BACKEND", "wredis");
  MESSAGE("requests: " << outcomes.size() << ", the victim " << victim_name << " served " << victim_served
                       << " before the SIGTERM; balancer retries " << retries << ", redispatches " << redispatches);
  INFO("haproxy log:\n" << lb.log());
  CHECK_MESSAGE(load.count([](const Outcome& o) { return !o.problem.empty(); }) == 0,
                problems_of(outcomes, [](const Outcome&) { return true; }));
  CHECK(victim_served >= 1);  // before the stop
  CHECK(load.count([&](const Outcome& o) { return after_exit(o) && o.replica != survivor_name; }) == 0);
  CHECK(load.count([&](const Outcome& o) { return o.start > t_term && o.replica == survivor_name; }) >= 10);
  // The victim had completions queued at the SIGTERM: it answered them 503 (a retried 503 leaves no trace in
  // HAProxy's per-server counters) and the balancer retried them: none failed (above), some retries were counted.
  CHECK(retries + redispatches >= 1);
  CHECK(lb.stat(victim_name, "slim") == kReplicaMaxconn);  // the template's variables took effect
}

TEST_CASE("serve replicas: HAProxy, SIGKILL of one replica under load: later requests go to the other, its stream is cut") {
  const std::string haproxy = find_haproxy();
  if (haproxy.empty()) {
    MESSAGE("skipped: no haproxy binary on PATH or in /usr/sbin (apt-get install haproxy; tools/setup.sh does)");
    return;
  }
  ServerProcess r1(kReplica), r2(kReplica);
  Balancer lb(haproxy, r1.port(), r2.port(), kReplicaMaxconn);
  Load load(lb.port(), kClients);
  REQUIRE(wait_for(120, [&] {
    return load.count([](const Outcome& o) { return o.replica == "r1"; }) >= 3 &&
           load.count([](const Outcome& o) { return o.replica == "r2"; }) >= 3;
  }));
  Stream stream(lb.port(), 200);
  REQUIRE(stream.read_until("data: "));
  const std::string victim_name = stream.replica();
  REQUIRE((victim_name == "r1" || victim_name == "r2"));
  ServerProcess& victim = victim_name == "r1" ? r1 : r2;
  const std::string survivor_name = victim_name == "r1" ? "r2" : "r1";

  const auto t_kill = Clock::now();
  victim.stop(SIGKILL, 30);
  // The stream's head and first tokens had reached the client: it cannot be replayed, it ends cut (no [DONE]).
  stream.read_to_end();
  CHECK(stream.text().find("HTTP/1.1 200") == 0);
  CHECK(stream.text().find("[DONE]") == std::string::npos);
  CHECK(wait_for(30, [&] { return lb.status(victim_name).rfind("DOWN", 0) == 0; }));
  auto after_kill = [&](const Outcome& o) { return o.start > t_kill; };
  CHECK(wait_for(120, [&] { return load.count(after_kill) >= 10; }));
  load.stop();

  const auto outcomes = load.outcomes();
  // Those in flight on the victim (no response byte yet: empty-response) are replayed on the survivor; reported,
  // not required (a response cut half-way through would be a 502).
  auto in_flight = [&](const Outcome& o) { return o.start <= t_kill && o.end > t_kill; };
  MESSAGE("in flight at the kill: " << load.count(in_flight) << ", of which failed "
                                    << load.count([&](const Outcome& o) { return in_flight(o) && !o.problem.empty(); })
                                    << "; balancer retries " << lb.stat("BACKEND", "wretr") << ", redispatches "
                                    << lb.stat("BACKEND", "wredis"));
  INFO("haproxy log:\n" << lb.log());
  // Requests sent after the kill: refused connections (conn-failure) retried on the survivor, none fails.
  CHECK_MESSAGE(load.count([&](const Outcome& o) { return after_kill(o) && !o.problem.empty(); }) == 0,
                problems_of(outcomes, after_kill));
  CHECK(load.count([&](const Outcome& o) { return after_kill(o) && o.replica != survivor_name; }) == 0);
  CHECK(load.count([&](const Outcome& o) { return o.end <= t_kill && !o.problem.empty(); }) == 0);
}

}  // namespace serve_replicas_tests
