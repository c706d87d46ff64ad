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
// Before those, and first in the run, on a server of its own (--server-args, --model):
//
//   0a. streamed completions ("stream": true, a token-id prompt of --prompt-tokens, max_tokens --max-tokens,
//       temperature 0, every request its own prompt) at each of --streams concurrent streams (1, 2, 8, 32), each a
//       client thread on a keep-alive connection, for --stream-seconds or --stream-requests per level: aggregate
//       decode tokens/s (tokens / wall time of the level) and its ratio to the first level of the same run, time to
//       first token p50/p99, inter-token latency p50/p99 (gaps between token chunks as received), requests, errors,
//       and how many stopped before max_tokens (the server has no ignore_eos: EOS ends a generation early, so
//       actual tokens are counted);
//   0b. shared prefix: a system prompt of --system-tokens plus a 16-token tail, max_tokens 1, one request at a
//       time: TTFT of the first (a miss), median TTFT of --prefix-requests more with the same system prompt and new
//       tails (hits, if the server caches prefixes), a second miss as a control, and /metrics' "prefix" samples
//       before and after. Each of these requests on a new connection, so all start alike.
//
// Every loop is bounded in requests and in time. Flags: --smoke (a few seconds, CI), --json, --requests N
// (phase 3, default 10000), --max-tokens N (default 8), --sessions N (default 2), --flood N (default 1000),
// --server PATH (default: sqrtdk-serve beside this binary), --phases LIST (of streams, prefix, load [1-3],
// overload, flood; default all), and for phase 0: --streams LIST (default 1,2,8,32), --prompt-tokens N (128),
// --stream-seconds S (10), --stream-requests N (per level at most, 2000), --system-tokens N (256),
// --prefix-requests N (8), --model PATH (default: the server's bundled model; phase 0 only, since phases 1-5 send
// text prompts), --server-args "..." (replaces phase 0's default "--sessions <widest level> --queue <2x that>").
// The machine may be shared: figures are noisy.
#include "perf/common/bench_util.h"
#include "tools/serve/child_server.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
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

// ---- streamed completions (Server-Sent Events over a chunked HTTP/1.1 response) ----

// One streamed request as the client saw it. Times are client-side wall clock: a token chunk's time is when the
// recv() that completed its bytes returned (chunks that arrive in one recv() share a time, as a reader sees them).
struct StreamResult {
  int status = -1;            // -1: transport error (or a malformed response)
  bool done = false;          // "data: [DONE]" seen, and the terminal chunk
  bool error_event = false;   // an {"error": ...} event mid-stream, or a chunk that is not JSON
  size_t tokens = 0;          // token ids received (choices[0].tokens)
  double ttft = -1;           // seconds from the request's send to its first token chunk; -1: none
  std::vector<double> gaps;   // seconds between consecutive token chunks
  std::string finish_reason;  // of the last chunk that carried one
  std::string body;           // the body of a non-200 answer
};

// Reads one response from `fd` incrementally. `raw` holds bytes received and not yet consumed.
class StreamReader {
 public:
  StreamReader(int fd, double t_send) : fd_(fd), t_send_(t_send) {}

  // Fills `out`; returns false on a transport error (out.status stays -1 unless a head was read).
  bool read(StreamResult& out) {
    // The head (skipping interim 1xx answers: the server's 102 keep-alive probes).
    std::string head;
    for (;;) {
      size_t end;
      while ((end = raw_.find("\r\n\r\n", pos_)) == std::string::npos)
        if (!more()) return false;
      head = raw_.substr(pos_, end - pos_);
      pos_ = end + 4;
      if (head.size() < 12 || head.compare(0, 5, "HTTP/") != 0) return false;
      const int status = std::atoi(head.c_str() + 9);
      if (status >= 200) {
        out.status = status;
        break;
      }
    }
    std::transform(head.begin(), head.end(), head.begin(), [](unsigned char c) { return std::tolower(c); });
    close_ = head.find("connection: close") != std::string::npos;
    if (head.find("transfer-encoding: chunked") == std::string::npos) {
      // A whole body (an error, or an HTTP/1.0-style stream delimited by close: not expected on HTTP/1.1).
      size_t length = 0;
      if (const size_t p = head.find("content-length:"); p != std::string::npos)
        length = std::strtoul(head.c_str() + p + 15, nullptr, 10);
      else
        close_ = true;
      while (raw_.size() - pos_ < length)
        if (!more()) return false;
      out.body = raw_.substr(pos_, length);
      pos_ += length;
      if (out.status == 200) sse(out.body, out);
      return true;
    }
    double last_token = -1;
    for (;;) {
      std::string line;
      if (!read_line(line)) return false;
      const size_t size = std::strtoul(line.c_str(), nullptr, 16);
      if (size == 0) {  // the last chunk; no trailers are sent, so an empty line ends the response
        for (;;) {
          if (!read_line(line)) return false;
          if (line.empty()) break;
        }
        if (out.status != 200) out.body = sse_;
        return true;
      }
      while (raw_.size() - pos_ < size + 2)
        if (!more()) return false;
      sse_.append(raw_, pos_, size);
      if (out.status == 200) {
        size_t e;
        while ((e = sse_.find("\n\n")) != std::string::npos) {
          event(sse_.substr(0, e), out, last_token);
          sse_.erase(0, e + 2);
        }
      }
      pos_ += size + 2;
    }
  }
  bool close_after() const { return close_; }
  bool received_any() const { return !raw_.empty(); }

 private:
  bool more() {
    char chunk[16384];
    const ssize_t n = recv(fd_, chunk, sizeof chunk, 0);
    if (n <= 0) return false;
    raw_.append(chunk, static_cast<size_t>(n));
    t_recv_ = now_seconds();
    if (pos_ > (1 << 16)) {  // drop what was consumed
      raw_.erase(0, pos_);
      pos_ = 0;
    }
    return true;
  }
  bool read_line(std::string& line) {
    size_t e;
    while ((e = raw_.find("\r\n", pos_)) == std::string::npos)
      if (!more()) return false;
    line = raw_.substr(pos_, e - pos_);
    pos_ = e + 2;
    return true;
  }
  // A whole (non-chunked) SSE body: every event at the time it was read.
  void sse(const std::string& body, StreamResult& out) {
    double last = -1;
    size_t b = 0, e;
    while ((e = body.find("\n\n", b)) != std::string::npos) {
      event(body.substr(b, e - b), out, last);
      b = e + 2;
    }
  }
  void event(const std::string& ev, StreamResult& out, double& last_token) {
    if (ev.rfind("data: ", 0) != 0) return;  // comments, other fields: none are sent today
    const std::string data = ev.substr(6);
    if (data == "[DONE]") {
      out.done = true;
      return;
    }
    json j;
    try {
      j = json::parse(data);
    } catch (...) {
      out.error_event = true;
      return;
    }
    if (!j.is_object() || j.contains("error")) {
      out.error_event = true;
      return;
    }
    const json& choices = j.value("choices", json::array());
    if (!choices.is_array() || choices.empty()) return;  // e.g. the usage chunk
    const json& c = choices[0];
    size_t n = 0;
    if (const auto t = c.find("tokens"); t != c.end() && t->is_array()) n = t->size();
    else if (const auto x = c.find("text"); x != c.end() && x->is_string() && !x->get_ref<const std::string&>().empty())
      n = 1;  // a server without sqrtdk's "tokens": one text chunk, one token
    if (const auto f = c.find("finish_reason"); f != c.end() && f->is_string())
      out.finish_reason = f->get<std::string>();
    if (n == 0) return;
    if (out.ttft < 0) out.ttft = t_recv_ - t_send_;
    else out.gaps.push_back(t_recv_ - last_token);
    last_token = t_recv_;
    out.tokens += n;
  }

  int fd_;
  double t_send_;
  double t_recv_ = 0;
  std::string raw_;
  size_t pos_ = 0;
  std::string sse_;  // SSE bytes not yet split into events
  bool close_ = false;
};

// A keep-alive connection for streamed POSTs.
class StreamConnection {
 public:
  explicit StreamConnection(int port) : port_(port) {}
  ~StreamConnection() { reset(); }
  StreamResult post(const std::string& path, const std::string& body) {
    for (int attempt = 0; attempt < 2; ++attempt) {  // one retry: the server may close an idle keep-alive
      const bool fresh = fd_ < 0;
      if (fd_ < 0) fd_ = connect_loopback(port_, 60);
      if (fd_ < 0) return {};
      const std::string req = http_request("POST", path, body, false);
      const double t_send = now_seconds();
      StreamResult out;
      StreamReader reader(fd_, t_send);
      const bool sent = ::send(fd_, req.data(), req.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(req.size());
      if (sent && reader.read(out)) {
        if (reader.close_after()) reset();
        return out;
      }
      reset();
      if (reader.received_any() || fresh) return StreamResult{};  // a real error, not a stale connection
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

// Deterministic token ids in [32, 127) (printable bytes: in every vocabulary here, and never a special token):
// request `key`'s ids differ from every other key's, so no two requests share a prompt unless meant to.
std::vector<uint32_t> prompt_ids(uint64_t key, size_t n) {
  std::vector<uint32_t> ids(n);
  uint64_t x = key * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull;
  for (auto& id : ids) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 29;
    id = 32 + static_cast<uint32_t>(x % 95);
  }
  return ids;
}

std::string stream_body(const std::vector<uint32_t>& prompt, size_t max_tokens) {
  return json{{"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0}, {"stream", true}}.dump();
}

struct StreamLevel {
  int streams = 0;
  size_t ok = 0, errors = 0, tokens = 0, early_stops = 0;
  double seconds = 0;
  std::vector<double> ttft, gaps;  // seconds, every request's / every gap of the level
  std::string first_error;
};

// `streams` client threads, each on its own keep-alive connection sending streamed completions one after another,
// until `n_requests` are sent in all or `max_seconds` pass (a request in flight then runs to its end: at most
// max_tokens, and the server's --request-timeout). `next_key` numbers the prompts across levels.
StreamLevel run_streams(int port, int streams, size_t n_requests, double max_seconds, size_t prompt_tokens,
                        size_t max_tokens, std::atomic<uint64_t>& next_key) {
  StreamLevel r;
  r.streams = streams;
  std::atomic<size_t> sent{0};
  std::mutex m;
  const double t0 = now_seconds();
  std::vector<std::thread> threads;
  for (int t = 0; t < streams; ++t) {
    threads.emplace_back([&] {
      StreamConnection conn(port);
      StreamLevel mine;
      for (;;) {
        if (sent++ >= n_requests || now_seconds() - t0 > max_seconds) break;
        const std::string body = stream_body(prompt_ids(next_key++, prompt_tokens), max_tokens);
        StreamResult res = conn.post("/v1/completions", body);
        if (res.status == 200 && res.done && !res.error_event && res.tokens > 0) {
          ++mine.ok;
          mine.tokens += res.tokens;
          mine.ttft.push_back(res.ttft);
          mine.gaps.insert(mine.gaps.end(), res.gaps.begin(), res.gaps.end());
          if (res.tokens < max_tokens) ++mine.early_stops;
        } else {
          ++mine.errors;
          if (mine.first_error.empty()) {
            std::string& e = mine.first_error;
            e.append("status ").append(std::to_string(res.status));
            if (!res.done) e.append(", no [DONE]");
            if (res.error_event) e.append(", error event");
            e.append(": ").append(res.body.substr(0, res.body.find_last_not_of('\n') + 1).substr(0, 200));
          }
        }
      }
      std::lock_guard lk(m);
      r.ok += mine.ok;
      r.errors += mine.errors;
      r.tokens += mine.tokens;
      r.early_stops += mine.early_stops;
      r.ttft.insert(r.ttft.end(), mine.ttft.begin(), mine.ttft.end());
      r.gaps.insert(r.gaps.end(), mine.gaps.begin(), mine.gaps.end());
      if (r.first_error.empty()) r.first_error = mine.first_error;
    });
  }
  for (auto& t : threads) t.join();
  r.seconds = now_seconds() - t0;
  return r;
}

// The /metrics samples whose name contains "prefix" ("name{labels}" -> value).
std::map<std::string, double> prefix_metrics(const std::string& text) {
  std::map<std::string, double> out;
  size_t b = 0;
  while (b < text.size()) {
    size_t e = text.find('\n', b);
    if (e == std::string::npos) e = text.size();
    const std::string line = text.substr(b, e - b);
    b = e + 1;
    if (line.empty() || line[0] == '#') continue;
    const size_t sp = line.rfind(' ');
    if (sp == std::string::npos) continue;
    const std::string name = line.substr(0, sp);
    if (name.substr(0, name.find('{')).find("prefix") == std::string::npos) continue;
    out[name] = std::strtod(line.c_str() + sp + 1, nullptr);
  }
  return out;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    const bool is_sep = sep == ' ' ? std::isspace(static_cast<unsigned char>(c)) != 0 : c == sep;
    if (!is_sep) {
      cur.push_back(c);
    } else if (!cur.empty()) {
      out.push_back(cur);
      cur.clear();
    }
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

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
      "bench-serve: load test of sqrtdk-serve on 127.0.0.1 (streamed decode tokens/s, TTFT and inter-token p50/p99 at\n"
      "1/2/8/32 streams, shared-prefix TTFT; throughput, p50/p99 at concurrency 1/2/8/32, RSS over\n"
      "10 000 requests, overload 503s, 1 000 concurrent connections).\n"
      "Own flags: --requests N (RSS phase, default 10000), --max-tokens N (default 8), --sessions N (default 2),\n"
      "  --flood N (connections at once, default 1000), --server PATH (default: sqrtdk-serve beside this binary),\n"
      "  --phases LIST (streams,prefix,load,overload,flood; default all)\n"
      "Streamed phase (first, on its own server): --streams LIST (default 1,2,8,32), --prompt-tokens N (128),\n"
      "  --stream-seconds S (per level, 10), --stream-requests N (per level at most, 2000), --system-tokens N\n"
      "  (shared-prefix phase, 256), --prefix-requests N (hits, 8), --model PATH (phase 0 only; default: the\n"
      "  server's), --server-args \"...\" (replaces the default \"--sessions <widest> --queue <2x widest>\")");
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

  json out = {{"machine", machine_json({}, "wall clock, client side: p50/p99 of every request (and, streamed, of "
                                          "every time to first token and every gap between token chunks); "
                                          "throughput = requests or tokens / wall time of the level; no roofs quoted",
                                      args.threads)},
              {"note", "loopback; the machine may be shared with other jobs: figures are noisy"},
              {"max_tokens", max_tokens},
              {"sessions", std::stoi(sessions)}};
  bool failed = false;
  SeedBook seeds;
  const auto phase_list = split(arg_value(args.rest, "--phases", "streams,prefix,load,overload,flood"), ',');
  auto phase = [&](const char* name) {
    return std::find(phase_list.begin(), phase_list.end(), name) != phase_list.end();
  };

  // 0: streamed completions at 1, 2, 8, 32 concurrent streams, then the shared-prefix TTFT, on one server.
  if (phase("streams") || phase("prefix")) {
    std::vector<int> levels;
    for (const std::string& v : split(arg_value(args.rest, "--streams", args.smoke ? "1,2" : "1,2,8,32"), ','))
      levels.push_back(std::max(1, std::stoi(v)));
    const int max_streams = *std::max_element(levels.begin(), levels.end());
    const size_t prompt_tokens = std::stoul(arg_value(args.rest, "--prompt-tokens", args.smoke ? "16" : "128"));
    const double stream_seconds = std::stod(arg_value(args.rest, "--stream-seconds", args.smoke ? "0.5" : "10"));
    const size_t stream_requests = std::stoul(arg_value(args.rest, "--stream-requests", args.smoke ? "8" : "2000"));
    const size_t system_tokens = std::stoul(arg_value(args.rest, "--system-tokens", args.smoke ? "32" : "256"));
    const size_t prefix_requests = std::stoul(arg_value(args.rest, "--prefix-requests", args.smoke ? "2" : "8"));
    const std::string model = arg_value(args.rest, "--model", "");
    std::vector<std::string> server_args = split(arg_value(args.rest, "--server-args", ""), ' ');
    if (server_args.empty())
      server_args = {"--sessions", std::to_string(max_streams), "--queue", std::to_string(2 * max_streams)};
    if (!model.empty() && std::find(server_args.begin(), server_args.end(), "--model") == server_args.end()) {
      server_args.push_back("--model");
      server_args.push_back(model);
    }
    std::string server_args_text;
    for (const std::string& a : server_args) server_args_text.append(server_args_text.empty() ? "" : " ").append(a);

    ServerProcess server(server_exe, server_args);
    const int port = server.port();
    std::atomic<uint64_t> next_key{1};  // prompt keys: every request of the phase has its own prompt

    if (phase("streams")) {
      // Warm-up, not counted: one round at the widest level (first touch of every session's memory).
      run_streams(port, max_streams, static_cast<size_t>(max_streams), stream_seconds, prompt_tokens, max_tokens,
                  next_key);
      std::string ratio_header = "x vs ";
      ratio_header += std::to_string(levels[0]);
      Table table({"streams", "requests", "tokens", "tok/s", ratio_header, "TTFT p50 ms",
                   "TTFT p99 ms", "ITL p50 ms", "ITL p99 ms", "short", "errors"});
      json jl = json::array();
      double base_tps = 0;
      std::string first_error;
      for (int n : levels) {
        const StreamLevel r =
            run_streams(port, n, stream_requests, stream_seconds, prompt_tokens, max_tokens, next_key);
        const double tps = r.seconds > 0 ? r.tokens / r.seconds : 0;
        if (base_tps == 0) base_tps = tps;
        const double ratio = base_tps > 0 ? tps / base_tps : 0;
        const double ttft50 = percentile(r.ttft, 0.5) * 1e3, ttft99 = percentile(r.ttft, 0.99) * 1e3;
        const double itl50 = percentile(r.gaps, 0.5) * 1e3, itl99 = percentile(r.gaps, 0.99) * 1e3;
        table.add({std::to_string(n), std::to_string(r.ok), std::to_string(r.tokens), fmt(tps), fmt(ratio, 2),
                   fmt(ttft50, 1), fmt(ttft99, 1), fmt(itl50, 2), fmt(itl99, 2), std::to_string(r.early_stops),
                   std::to_string(r.errors)});
        jl.push_back({{"streams", n}, {"requests", r.ok}, {"errors", r.errors}, {"tokens", r.tokens},
                      {"seconds", r.seconds}, {"tokens_per_second", tps}, {"ratio_to_first_level", ratio},
                      {"ttft_p50_ms", ttft50}, {"ttft_p99_ms", ttft99}, {"itl_p50_ms", itl50},
                      {"itl_p99_ms", itl99}, {"ttft_samples", r.ttft.size()}, {"itl_samples", r.gaps.size()},
                      {"stopped_before_max_tokens", r.early_stops}});
        if (r.errors || r.ok == 0) failed = true;
        if (first_error.empty()) first_error = r.first_error;
      }
      out["streams"] = {{"server_args", server_args}, {"prompt_tokens", prompt_tokens}, {"max_tokens", max_tokens},
                        {"level_seconds", stream_seconds}, {"level_requests_at_most", stream_requests},
                        {"levels", jl},
                        {"method", "streamed POST /v1/completions (token-id prompt, distinct per request, temperature "
                                   "0), one keep-alive connection per stream; TTFT = send to first token chunk; ITL "
                                   "= gaps between token chunks as received (chunks in one recv share a time); "
                                   "tokens/s = tokens of the level / its wall time (requests in flight at the "
                                   "deadline run to their end); ratio against the first level of this run; "
                                   "'short' = requests that stopped before max_tokens (EOS: there is no ignore_eos)"}};
      if (!first_error.empty()) out["streams"]["first_error"] = first_error;
      if (!args.json) {
        std::printf("streamed completions: sqrtdk-serve %s; prompt %zu tokens, max_tokens %zu, temperature 0; "
                    "%.1f s or %zu requests per level\n%s",
                    server_args_text.c_str(), prompt_tokens, max_tokens, stream_seconds, stream_requests,
                    table.str().c_str());
        if (!first_error.empty()) std::printf("first error: %s\n", first_error.c_str());
      }
    }

    if (phase("prefix")) {
      // One request with a new system prompt (a miss), then `prefix_requests` with the same system prompt and each
      // its own 16-token tail (hits if the server caches prefixes), one at a time, max_tokens 1; then a new system
      // prompt again (a second miss, as a control for noise).
      const std::vector<uint32_t> system = prompt_ids(next_key++ | (uint64_t{1} << 62), system_tokens);
      const std::vector<uint32_t> other_system = prompt_ids(next_key++ | (uint64_t{1} << 62), system_tokens);
      auto prefixed = [&](const std::vector<uint32_t>& sys) {
        std::vector<uint32_t> p = sys;
        const std::vector<uint32_t> tail = prompt_ids(next_key++, 16);
        p.insert(p.end(), tail.begin(), tail.end());
        return stream_body(p, 1);
      };
      Connection mc(port);
      const std::string metrics_before = mc.request("GET", "/metrics", "").body;
      size_t errors = 0;
      std::string prefix_error;
      // A new connection per request: every sample starts alike (on a reused connection a server without
      // TCP_NODELAY can hold the first chunk ~40 ms for the client's delayed ACK, which would swamp the prefix).
      auto ttft_of = [&](const std::string& body) {
        StreamConnection conn(port);
        const StreamResult r = conn.post("/v1/completions", body);
        if (r.status != 200 || !r.done || r.error_event || r.ttft < 0) {
          if (prefix_error.empty()) prefix_error.append("status ").append(std::to_string(r.status)).append(": ")
                                        .append(r.body.substr(0, r.body.find_last_not_of('\n') + 1).substr(0, 200));
          ++errors;
          return -1.0;
        }
        return r.ttft;
      };
      const double t0 = now_seconds();
      const double miss = ttft_of(prefixed(system));
      std::vector<double> hits;
      for (size_t i = 0; i < prefix_requests && now_seconds() - t0 < 120; ++i)
        if (const double t = ttft_of(prefixed(system)); t >= 0) hits.push_back(t);
      const double control = ttft_of(prefixed(other_system));
      const std::string metrics_after = mc.request("GET", "/metrics", "").body;
      const double hit = hits.empty() ? -1 : median(hits);
      const double speedup = miss > 0 && hit > 0 ? miss / hit : 0;
      const auto before = prefix_metrics(metrics_before), after = prefix_metrics(metrics_after);
      auto ms_json = [](double seconds) { return seconds < 0 ? json(nullptr) : json(seconds * 1e3); };
      json jm = json::object();
      for (const auto& kv : after) {
        const auto b = before.find(kv.first);
        const double was = b == before.end() ? 0 : b->second;
        jm[kv.first] = {{"before", was}, {"after", kv.second}, {"delta", kv.second - was}};
      }
      out["prefix"] = {{"system_tokens", system_tokens}, {"tail_tokens", 16}, {"max_tokens", 1},
                       {"ttft_miss_ms", ms_json(miss)}, {"ttft_hit_median_ms", ms_json(hit)},
                       {"ttft_hit_samples_ms", json::array()}, {"hits_sent", prefix_requests},
                       {"ttft_miss_control_ms", ms_json(control)}, {"speedup", speedup}, {"errors", errors},
                       {"prefix_metrics", after.empty() ? json("no prefix metrics exposed") : jm}};
      for (double h : hits) out["prefix"]["ttft_hit_samples_ms"].push_back(h * 1e3);
      if (!prefix_error.empty()) out["prefix"]["first_error"] = prefix_error;
      if (errors || miss < 0 || hits.empty()) failed = true;
      if (!args.json) {
        Table pt({"system tokens", "TTFT miss ms", "TTFT hit p50 ms", "hits", "speedup", "2nd miss ms", "errors"});
        auto ms = [](double seconds) { return seconds < 0 ? std::string("-") : fmt(seconds * 1e3, 2); };
        pt.add({std::to_string(system_tokens), ms(miss), ms(hit), std::to_string(hits.size()), fmt(speedup, 2),
                ms(control), std::to_string(errors)});
        std::printf("shared prefix: system prompt + 16-token tail, max_tokens 1, one request at a time\n%s",
                    pt.str().c_str());
        if (!prefix_error.empty()) std::printf("first error: %s\n", prefix_error.c_str());
        if (after.empty()) std::printf("no prefix metrics exposed\n");
        for (const auto& kv : after) {
          const auto b = before.find(kv.first);
          const double was = b == before.end() ? 0 : b->second;
          std::printf("%s: %g -> %g (delta %g)\n", kv.first.c_str(), was, kv.second, kv.second - was);
        }
      }
    }
    server.stop(SIGTERM, 10);
  }


  // 1-3: one server, a queue deep enough for 32 clients.
  if (phase("load")) {
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
  if (phase("overload")) {
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
  if (phase("flood")) {
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
