// bench-serve: a bounded load test of sqrtdk-serve on loopback (127.0.0.1 only). It starts bin/sqrtdk-serve as a
// child process and drives it with a small blocking HTTP/1.1 client (keep-alive, one connection per client thread):
//
//   1. throughput, p50/p99 latency at concurrency 1, 2, 8, 32 (queue large enough: no 503 is expected);
//   2. identical completions for identical seeded requests (every request carries one of 4 seeds; the tokens
//      returned for a seed must never change, across concurrency levels and sessions);
//   3. server RSS across 10 000 requests (VmRSS at start, every 1 000, and at the end);
//   4. overload: 32 clients against --sessions 1 --queue 2: only 200 and deliberate 503 (with Retry-After);
//   5. 1 000 concurrent connections each sending a request: every one is answered 200 or 503, the server stays up,
//      /healthz answers meanwhile, and sessions_in_use returns to 0.
//
// Every loop is bounded in requests and in time. Flags: --smoke (a few seconds, CI), --json, --requests N
// (phase 3, default 10000), --max-tokens N (default 8), --sessions N (default 2), --flood N (default 1000),
// --server PATH (default: sqrtdk-serve beside this binary). The machine may be shared: figures are noisy.
#include "perf/common/bench_util.h"
#include "tools/serve/child_server.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

using namespace sqrtdk::perf;
using nlohmann::json;

namespace {

using sqrtdk::serve_harness::connect_loopback;
using ServerProcess = sqrtdk::serve_harness::ChildServer;

struct HttpResult {
  int status = -1;  // -1: transport error
  std::string body;
  bool retry_after = false;
  bool close = false;
};

std::string http_request(const std::string& method, const std::string& path, const std::string& body,
                         bool close_connection) {
  std::string r = method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n";
  if (close_connection) r += "Connection: close\r\n";
  if (!body.empty()) r += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  return r + "\r\n" + body;
}

// Parses one response from `buf`; returns false if incomplete.
bool parse_response(const std::string& buf, HttpResult& out) {
  const size_t head_end = buf.find("\r\n\r\n");
  if (head_end == std::string::npos) return false;
  std::string head = buf.substr(0, head_end);
  std::transform(head.begin(), head.end(), head.begin(), [](unsigned char c) { return std::tolower(c); });
  size_t length = 0;
  if (const size_t p = head.find("content-length:"); p != std::string::npos)
    length = std::strtoul(head.c_str() + p + 15, nullptr, 10);
  if (buf.size() < head_end + 4 + length) return false;
  out.status = std::atoi(buf.c_str() + 9);
  out.body = buf.substr(head_end + 4, length);
  out.retry_after = head.find("retry-after:") != std::string::npos;
  out.close = head.find("connection: close") != std::string::npos;
  return true;
}

class Connection {
 public:
  explicit Connection(int port) : port_(port) {}
  ~Connection() {
    if (fd_ >= 0) close(fd_);
  }
  HttpResult request(const std::string& method, const std::string& path, const std::string& body) {
    for (int attempt = 0; attempt < 2; ++attempt) {  // one retry: the server may close an idle keep-alive
      if (fd_ < 0) fd_ = connect_loopback(port_, 60);
      if (fd_ < 0) return {};
      const std::string req = http_request(method, path, body, false);
      std::string buf;
      HttpResult res;
      bool sent = ::send(fd_, req.data(), req.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(req.size());
      char chunk[16384];
      while (sent) {
        const ssize_t n = recv(fd_, chunk, sizeof chunk, 0);
        if (n <= 0) break;
        buf.append(chunk, static_cast<size_t>(n));
        if (parse_response(buf, res)) {
          if (res.close) reset();
          return res;
        }
      }
      reset();
      if (!buf.empty()) return {};  // a partial response: a real error, not a stale connection
    }
    return {};
  }

 private:
  void reset() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }
  int port_;
  int fd_ = -1;
};

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5));
  return v[i];
}

std::string completion_body(uint64_t seed, size_t max_tokens) {
  return json{{"prompt", "Once upon a time"}, {"max_tokens", max_tokens}, {"temperature", 0.8},
              {"seed", seed}}.dump();
}

// Tokens seen per seed: any difference between two responses for one seed is a determinism failure.
struct SeedBook {
  std::mutex m;
  std::map<uint64_t, std::string> first;
  std::atomic<int> mismatches{0};
  std::atomic<int> checked{0};
  void check(uint64_t seed, const std::string& body) {
    std::string tokens;
    try {
      tokens = json::parse(body).at("choices").at(0).at("tokens").dump();
    } catch (...) {
      ++mismatches;
      return;
    }
    std::lock_guard lk(m);
    auto [it, inserted] = first.emplace(seed, tokens);
    if (!inserted && it->second != tokens) ++mismatches;
    ++checked;
  }
};

struct LoadResult {
  int concurrency = 0;
  size_t ok = 0, overloaded = 0, other = 0, tokens = 0;
  double seconds = 0;
  std::vector<double> latencies;  // of 200s
};

// `concurrency` client threads, each on its own keep-alive connection, until `n_requests` are sent in all or
// `max_seconds` pass.
LoadResult run_load(int port, int concurrency, size_t n_requests, double max_seconds, size_t max_tokens,
                    SeedBook& seeds, const std::function<void(size_t)>& every_1000 = nullptr) {
  LoadResult r;
  r.concurrency = concurrency;
  std::atomic<size_t> next{0};
  std::mutex m;
  const double t0 = now_seconds();
  std::vector<std::thread> threads;
  for (int t = 0; t < concurrency; ++t) {
    threads.emplace_back([&] {
      Connection conn(port);
      std::vector<double> lat;
      size_t ok = 0, overloaded = 0, other = 0, tokens = 0;
      for (;;) {
        const size_t i = next++;
        if (i >= n_requests || now_seconds() - t0 > max_seconds) break;
        if (every_1000 && i % 1000 == 0) every_1000(i);
        const uint64_t seed = i % 4;
        const double s = now_seconds();
        HttpResult res = conn.request("POST", "/v1/completions", completion_body(seed, max_tokens));
        const double e = now_seconds() - s;
        if (res.status == 200) {
          ++ok;
          lat.push_back(e);
          seeds.check(seed, res.body);
          tokens += json::parse(res.body)["usage"]["completion_tokens"].get<size_t>();
        } else if (res.status == 503 && res.retry_after) {
          ++overloaded;
        } else {
          ++other;
        }
      }
      std::lock_guard lk(m);
      r.ok += ok;
      r.overloaded += overloaded;
      r.other += other;
      r.tokens += tokens;
      r.latencies.insert(r.latencies.end(), lat.begin(), lat.end());
    });
  }
  for (auto& t : threads) t.join();
  r.seconds = now_seconds() - t0;
  return r;
}

double metric(int port, const std::string& name) {
  Connection c(port);
  return sqrtdk::serve_harness::metric_value(c.request("GET", "/metrics", "").body, name);
}

std::string arg_value(const std::vector<std::string>& rest, const std::string& flag, const std::string& dflt) {
  for (size_t i = 0; i + 1 < rest.size(); ++i)
    if (rest[i] == flag) return rest[i + 1];
  return dflt;
}

}  // namespace

int main(int argc, char** argv) {
  BenchArgs args = BenchArgs::parse(
      argc, argv,
      "bench-serve: load test of sqrtdk-serve on 127.0.0.1 (throughput, p50/p99 at concurrency 1/2/8/32, RSS over\n"
      "10 000 requests, overload 503s, 1 000 concurrent connections).\n"
      "Own flags: --requests N (RSS phase, default 10000), --max-tokens N (default 8), --sessions N (default 2),\n"
      "  --flood N (connections at once, default 1000), --server PATH (default: sqrtdk-serve beside this binary)");
  std::signal(SIGPIPE, SIG_IGN);
  std::error_code ec;
  const auto self_dir = std::filesystem::read_symlink("/proc/self/exe", ec).parent_path();
  const std::string server_exe = arg_value(args.rest, "--server", (self_dir / "sqrtdk-serve").string());
  if (!std::filesystem::exists(server_exe)) {
    std::printf("bench-serve: %s not built; skipped\n", server_exe.c_str());
    return 0;
  }
  const size_t rss_requests = std::stoul(arg_value(args.rest, "--requests", args.smoke ? "300" : "10000"));
  const size_t max_tokens = std::stoul(arg_value(args.rest, "--max-tokens", "8"));
  const std::string sessions = arg_value(args.rest, "--sessions", "2");
  const int flood = std::stoi(arg_value(args.rest, "--flood", args.smoke ? "200" : "1000"));
  const double level_seconds = args.smoke ? 0.5 : 5.0;
  const size_t level_requests = args.smoke ? 50 : 2000;

  json out = {{"machine", machine_json({}, "wall clock per request, client side (p50/p99 of every request); "
                                          "throughput = requests / wall time of the level; no roofs quoted",
                                      args.threads)},
              {"note", "loopback; the machine may be shared with other jobs: figures are noisy"},
              {"max_tokens", max_tokens},
              {"sessions", std::stoi(sessions)}};
  bool failed = false;
  SeedBook seeds;

  // 1-3: one server, a queue deep enough for 32 clients.
  {
    ServerProcess server(server_exe, {"--sessions", sessions, "--queue", "64"});
    const int port = server.port();
    {
      SeedBook warm;
      run_load(port, 2, 20, 10.0, max_tokens, warm);  // warm-up (first-touch of the sessions' memory)
    }
    Table table({"concurrency", "requests", "req/s", "tokens/s", "p50 ms", "p99 ms", "503", "errors"});
    json levels = json::array();
    for (int c : {1, 2, 8, 32}) {
      LoadResult r = run_load(port, c, level_requests, level_seconds, max_tokens, seeds);
      const double rps = r.ok / r.seconds, tps = r.tokens / r.seconds;
      const double p50 = percentile(r.latencies, 0.5) * 1e3, p99 = percentile(r.latencies, 0.99) * 1e3;
      table.add({std::to_string(c), std::to_string(r.ok), fmt(rps), fmt(tps), fmt(p50, 2), fmt(p99, 2),
                 std::to_string(r.overloaded), std::to_string(r.other)});
      levels.push_back({{"concurrency", c}, {"requests", r.ok}, {"seconds", r.seconds}, {"requests_per_second", rps},
                        {"tokens_per_second", tps}, {"p50_ms", p50}, {"p99_ms", p99},
                        {"status_503", r.overloaded}, {"errors", r.other}});
      if (r.other || r.overloaded) failed = true;  // the queue holds 32 clients: neither is expected
    }
    out["levels"] = levels;

    // RSS across rss_requests requests at concurrency 8.
    std::vector<size_t> rss_samples;
    std::mutex rss_m;
    const size_t rss_start = server.rss_bytes();
    LoadResult r = run_load(port, 8, rss_requests, args.smoke ? 10.0 : 600.0, max_tokens, seeds, [&](size_t) {
      std::lock_guard lk(rss_m);
      rss_samples.push_back(server.rss_bytes());
    });
    const size_t rss_end = server.rss_bytes();
    const size_t rss_max = std::max(rss_end, *std::max_element(rss_samples.begin(), rss_samples.end()));
    const double idle_sessions = metric(port, "sqrtdk_sessions_in_use");
    out["rss"] = {{"requests", r.ok + r.overloaded + r.other}, {"ok", r.ok}, {"errors", r.other},
                  {"start_bytes", rss_start}, {"end_bytes", rss_end}, {"max_bytes", rss_max},
                  {"samples_bytes", rss_samples}, {"requests_per_second", r.ok / r.seconds},
                  {"sessions_in_use_after", idle_sessions}};
    if (r.other || idle_sessions != 0) failed = true;
    out["determinism"] = {{"seeded_responses_checked", seeds.checked.load()}, {"mismatches", seeds.mismatches.load()}};
    if (seeds.mismatches) failed = true;
    out["exit_status_after_sigterm"] = server.stop(SIGTERM, 10);
    if (!args.json) {
      std::printf("sqrtdk-serve on 127.0.0.1, --sessions %s, max_tokens %zu (machine shared: figures noisy)\n%s",
                  sessions.c_str(), max_tokens, table.str().c_str());
      std::printf("RSS over %zu requests (concurrency 8, %.0f req/s): start %.1f MiB, end %.1f MiB, max %.1f MiB; "
                  "errors %zu; sessions in use after: %.0f\n",
                  r.ok + r.overloaded + r.other, r.ok / r.seconds, rss_start / 1048576.0, rss_end / 1048576.0,
                  rss_max / 1048576.0, r.other, idle_sessions);
      std::printf("determinism: %d seeded responses checked, %d mismatches\n", seeds.checked.load(),
                  seeds.mismatches.load());
    }
  }

  // 4: overload, 32 clients on one session and a queue of 2.
  {
    ServerProcess server(server_exe, {"--sessions", "1", "--queue", "2"});
    SeedBook s;
    LoadResult r = run_load(server.port(), 32, args.smoke ? 300 : 5000, args.smoke ? 1.0 : 5.0, max_tokens, s);
    out["overload"] = {{"clients", 32}, {"sessions", 1}, {"queue", 2}, {"ok", r.ok}, {"status_503", r.overloaded},
                       {"errors", r.other}, {"seconds", r.seconds}, {"mismatches", s.mismatches.load()}};
    if (r.other || r.ok == 0 || s.mismatches) failed = true;
    if (!args.json)
      std::printf("overload (32 clients, 1 session, queue 2, %.1f s): %zu ok, %zu deliberate 503 with Retry-After, "
                  "%zu other\n",
                  r.seconds, r.ok, r.overloaded, r.other);
  }

  // 5: `flood` connections at once, each sending one request (Connection: close); /healthz meanwhile.
  {
    ServerProcess server(server_exe, {"--sessions", sessions});
    const int port = server.port();
    const size_t rss_before = server.rss_bytes();
    const double t0 = now_seconds();
    std::vector<int> fds;
    for (int i = 0; i < flood; ++i) fds.push_back(connect_loopback(port, 30));
    const std::string req = http_request("POST", "/v1/completions", completion_body(1, max_tokens), true);
    for (int fd : fds)
      if (fd >= 0) (void)::send(fd, req.data(), req.size(), MSG_NOSIGNAL);
    // /healthz from another client while the flood is served.
    HttpResult health;
    double health_ms = 0;
    std::thread prober([&] {
      Connection c(port);
      const double s = now_seconds();
      health = c.request("GET", "/healthz", "");
      health_ms = (now_seconds() - s) * 1e3;
    });
    std::vector<std::string> bufs(fds.size());
    std::vector<pollfd> pfds;
    for (int fd : fds) pfds.push_back({fd, static_cast<short>(fd >= 0 ? POLLIN : 0), 0});
    size_t open_count = std::count_if(fds.begin(), fds.end(), [](int fd) { return fd >= 0; });
    char chunk[16384];
    while (open_count > 0 && now_seconds() - t0 < 60) {  // bounded: 60 s
      if (poll(pfds.data(), pfds.size(), 1000) <= 0) continue;
      for (size_t i = 0; i < pfds.size(); ++i) {
        if (pfds[i].fd < 0 || !(pfds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        const ssize_t n = recv(pfds[i].fd, chunk, sizeof chunk, 0);
        if (n > 0) {
          bufs[i].append(chunk, static_cast<size_t>(n));
          continue;
        }
        close(pfds[i].fd);
        pfds[i].fd = -1;
        --open_count;
      }
    }
    prober.join();
    const double seconds = now_seconds() - t0;
    size_t ok = 0, overloaded = 0, other = 0;
    for (size_t i = 0; i < bufs.size(); ++i) {
      if (pfds[i].fd >= 0) close(pfds[i].fd);
      HttpResult r;
      if (parse_response(bufs[i], r) && r.status == 200) ++ok;
      else if (r.status == 503) ++overloaded;
      else ++other;
    }
    const double idle = [&] {
      double v = -1;
      for (int i = 0; i < 100 && (v = metric(port, "sqrtdk_sessions_in_use")) != 0; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      return v;
    }();
    const size_t rss_after = server.rss_bytes();
    const bool up = server.running();
    out["flood"] = {{"connections", flood}, {"ok", ok}, {"status_503", overloaded}, {"unanswered_or_error", other},
                    {"seconds", seconds}, {"healthz_status", health.status}, {"healthz_ms", health_ms},
                    {"server_up", up}, {"sessions_in_use_after", idle}, {"rss_before_bytes", rss_before},
                    {"rss_after_bytes", rss_after}};
    if (other || !up || idle != 0 || health.status != 200) failed = true;
    if (!args.json)
      std::printf("flood: %d connections at once: %zu ok, %zu 503, %zu unanswered/error in %.2f s; /healthz %d in "
                  "%.1f ms meanwhile; server up: %s; sessions in use after: %.0f; RSS %.1f -> %.1f MiB\n",
                  flood, ok, overloaded, other, seconds, health.status, health_ms, up ? "yes" : "no", idle,
                  rss_before / 1048576.0, rss_after / 1048576.0);
  }
  out["passed"] = !failed;
  if (args.json) std::printf("%s\n", out.dump(2).c_str());
  if (failed) std::fprintf(stderr, "bench-serve: FAILED (see the figures above)\n");
  return failed ? 1 : 0;
}
