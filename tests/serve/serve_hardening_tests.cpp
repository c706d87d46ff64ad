// sqrtdk-serve under hostile clients, faults and shutdown (issue 13): resource limits at start, cancellation of
// abandoned completions, the per-request time limit, half-close, pipelining, conflicting framing, oversized chunked
// bodies, slow-header floods, the connection cap, the SIGTERM drain, 405s, /healthz, --version. Raw loopback sockets
// (127.0.0.1), every wait bounded.
#include "tests/common/address_space.h"
#include "tests/serve/serve_test_util.h"

#include <doctest/doctest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <thread>
#include <vector>

// Named after the file: the sanitizer builds compile test files together (a unity build), and this file's
// helpers share their names with another test file's.
namespace serve_hardening_tests {

namespace {

using nlohmann::json;
using sqrtdk::serve_test::connect_loopback;
using sqrtdk::serve_test::metric_value;
using sqrtdk::serve_test::run_to_exit;
using sqrtdk::serve_test::ServerProcess;
using Clock = std::chrono::steady_clock;

struct IgnoreSigpipe {
  IgnoreSigpipe() { std::signal(SIGPIPE, SIG_IGN); }  // writes to a server that closed must not kill the test
};
const IgnoreSigpipe ignore_sigpipe;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

bool send_all(int fd, const std::string& bytes) {
  return send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(bytes.size());
}

// A new loopback connection that has sent `bytes`.
int open_with(int port, const std::string& bytes) {
  const int fd = connect_loopback(port);
  REQUIRE(fd >= 0);
  REQUIRE(send_all(fd, bytes));
  return fd;
}

// What arrives on fd until the server closes it or `seconds` pass.
std::string read_until_closed(int fd, double seconds) {
  std::string out;
  const auto t0 = Clock::now();
  char buf[8192];
  while (seconds_since(t0) < seconds) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 50) <= 0) continue;
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

// True if the server closed fd (EOF or reset) within `seconds`; bytes it sent before are skipped.
bool closed_within(int fd, double seconds) {
  const auto t0 = Clock::now();
  char buf[4096];
  while (seconds_since(t0) < seconds) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 50) <= 0) continue;
    if (recv(fd, buf, sizeof buf, 0) <= 0) return true;
  }
  return false;
}

std::string post_request(const json& body, const std::string& extra_headers = "") {
  const std::string b = body.dump();
  return "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" + extra_headers +
         "Content-Length: " + std::to_string(b.size()) + "\r\n\r\n" + b;
}

std::string get_request(const std::string& path, const std::string& extra_headers = "") {
  return "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n" + extra_headers + "\r\n";
}

struct RawResponse {
  int status = 0;
  std::map<std::string, std::string> headers;  // names in lower case
  std::string body;                           // de-chunked
};

// Consecutive HTTP/1.1 responses in `bytes` (Content-Length or chunked bodies, 1xx interim ones included); stops at
// the first incomplete one.
std::vector<RawResponse> parse_responses(const std::string& bytes) {
  std::vector<RawResponse> out;
  size_t pos = 0;
  for (;;) {
    const size_t head_end = bytes.find("\r\n\r\n", pos);
    if (head_end == std::string::npos || bytes.compare(pos, 9, "HTTP/1.1 ") != 0) return out;
    RawResponse r;
    r.status = std::atoi(bytes.c_str() + pos + 9);
    size_t line = bytes.find("\r\n", pos) + 2;
    while (line < head_end) {
      const size_t eol = bytes.find("\r\n", line);
      const size_t colon = bytes.find(':', line);
      std::string name = bytes.substr(line, colon - line);
      std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
      r.headers[name] = bytes.substr(colon + 2, eol - colon - 2);
      line = eol + 2;
    }
    pos = head_end + 4;
    if (r.headers["transfer-encoding"] == "chunked") {
      for (;;) {
        const size_t eol = bytes.find("\r\n", pos);
        if (eol == std::string::npos) return out;
        const size_t n = std::strtoul(bytes.c_str() + pos, nullptr, 16);
        if (bytes.size() < eol + 2 + n + 2) return out;
        r.body += bytes.substr(eol + 2, n);
        pos = eol + 2 + n + 2;
        if (n == 0) break;
      }
    } else if (r.headers.count("content-length")) {
      const size_t n = std::stoul(r.headers["content-length"]);
      if (bytes.size() < pos + n) return out;
      r.body = bytes.substr(pos, n);
      pos += n;
    }
    out.push_back(r);
  }
}

// Final (non-1xx) responses only.
std::vector<RawResponse> final_responses(const std::string& bytes) {
  std::vector<RawResponse> all = parse_responses(bytes), out;
  for (auto& r : all)
    if (r.status >= 200) out.push_back(r);
  return out;
}

std::string get_metrics(int port) {
  const int fd = open_with(port, get_request("/metrics", "Connection: close\r\n"));
  const auto responses = final_responses(read_until_closed(fd, 5));
  close(fd);
  REQUIRE(responses.size() == 1);
  return responses[0].body;
}

// Polls /metrics (at most `seconds`) until `name` equals `value`; returns the last value seen.
double wait_metric(int port, const std::string& name, double value, double seconds = 5) {
  const auto t0 = Clock::now();
  double v = -1;
  while (seconds_since(t0) < seconds) {
    v = metric_value(get_metrics(port), name);
    if (v == value) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return v;
}

constexpr size_t kGiB = size_t{1} << 30;

std::string to_hex(size_t n) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%zx", n);
  return buf;
}

}  // namespace

TEST_CASE("serve hardening: default options start and serve under a 1 GiB address-space limit" *
          doctest::skip(sqrtdk::test::kUnderSanitizer)) {  // an address-space cap: not under sanitizers
  // Before: 256 HTTP threads (8 MiB stacks each) aborted the server after "listening".
  ServerProcess server({}, kGiB);
  const int fd = open_with(server.port(), post_request({{"prompt", "a"}, {"max_tokens", 4}}, "Connection: close\r\n"));
  const auto r = final_responses(read_until_closed(fd, 10));
  close(fd);
  REQUIRE(r.size() == 1);
  CHECK(r[0].status == 200);
  CHECK(server.running());
}

TEST_CASE("serve hardening: start-up that cannot get its threads exits 4 with a clear message" *
          doctest::skip(sqrtdk::test::kUnderSanitizer)) {  // an address-space cap: not under sanitizers
  // 256 I/O threads reserve 2 GiB of stacks: they do not fit in 1 GiB. The error comes before "listening".
  const auto r = run_to_exit(SQRTDK_SERVE_BIN, ServerProcess::with_model({"--port", "0", "--http-threads", "256"}),
                             kGiB, 20);
  INFO(r.output);
  CHECK(r.status == 4);
  CHECK(r.output.find("sqrtdk-serve: cannot start: a new HTTP I/O thread") != std::string::npos);
  CHECK(r.output.find("ulimit") != std::string::npos);
  CHECK(r.output.find("listening") == std::string::npos);
}

TEST_CASE("serve hardening: the KV budget bounds memory: a request larger than all of it is a 400, others wait") {
  // The long-context toy holds 1 KiB of KV per position (2 layers x 2 kv heads x 32 x K and V x 4 bytes): a budget
  // of 1 MiB is 1 024 positions in all. KV is reserved per request (prompt + max_tokens), never per slot up front.
  sqrtdk::serve_harness::ChildServer server(SQRTDK_SERVE_BIN, {"--model", SQRTDK_SERVE_LONG_MODEL, "--kv-budget-mb", "1",
                                                       "--sessions", "4", "--prefix-cache", "0", "--delay-ms", "5"});
  httplib::Client cli("127.0.0.1", server.port());
  auto big = cli.Post("/v1/completions", json{{"prompt", "a"}, {"max_tokens", 2000}}.dump(), "application/json");
  REQUIRE(big);
  CHECK(big->status == 400);
  const json e = json::parse(big->body);
  CHECK(e["error"]["param"] == "max_tokens");
  CHECK(e["error"]["code"] == "context_length_exceeded");
  CHECK(e["error"]["message"].get<std::string>().find("--kv-budget-mb") != std::string::npos);
  // Four requests of 400 positions each: two fit in the budget at a time, the others wait, all are served.
  std::vector<std::thread> clients;
  std::atomic<int> ok{0};
  for (int i = 0; i < 4; ++i)
    clients.emplace_back([&] {
      httplib::Client c("127.0.0.1", server.port());
      c.set_read_timeout(60);
      auto r = c.Post("/v1/completions",
                      json{{"prompt", "a"}, {"max_tokens", 399}, {"temperature", 0}}.dump(),
                      "application/json");
      if (r && r->status == 200) ++ok;
    });
  int most_running = 0;
  for (int k = 0; k < 200 && ok.load() < 4; ++k) {
    const std::string m = get_metrics(server.port());
    most_running = std::max(most_running, static_cast<int>(metric_value(m, "sqrtdk_num_requests_running")));
    CHECK(metric_value(m, "sqrtdk_kv_cache_usage_perc") <= 1.0);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (auto& t : clients) t.join();
  CHECK(ok.load() == 4);
  CHECK(most_running <= 2);
}

TEST_CASE("serve hardening: a non-streaming client that disconnects cancels its completion") {
  // 400 tokens at 20 ms each would hold the only session for 8 s (greedy: this toy emits no EOS on "a").
  ServerProcess server({"--sessions", "1", "--delay-ms", "20"});
  const int fd = open_with(server.port(), post_request({{"prompt", "a"}, {"max_tokens", 400}, {"temperature", 0}}));
  REQUIRE(wait_metric(server.port(), "sqrtdk_sessions_in_use", 1) == 1);
  close(fd);
  const auto t0 = Clock::now();
  CHECK(wait_metric(server.port(), "sqrtdk_sessions_in_use", 0, 5) == 0);
  CHECK(seconds_since(t0) < 3);
  const std::string m = get_metrics(server.port());
  CHECK(metric_value(m, "sqrtdk_client_disconnects_total") == 1);
  CHECK(metric_value(m, "sqrtdk_tokens_generated_total") < 400);
}

TEST_CASE("serve hardening: --request-timeout stops a long completion with finish_reason time_limit") {
  ServerProcess server({"--sessions", "1", "--delay-ms", "20", "--request-timeout", "1"});
  const auto t0 = Clock::now();
  const int fd = open_with(server.port(),
                           post_request({{"prompt", "a"}, {"max_tokens", 400}, {"temperature", 0}}, "Connection: close\r\n"));
  const auto r = final_responses(read_until_closed(fd, 10));
  close(fd);
  CHECK(seconds_since(t0) < 4);
  REQUIRE(r.size() == 1);
  CHECK(r[0].status == 200);
  const json j = json::parse(r[0].body)["choices"][0];
  CHECK(j["finish_reason"] == "time_limit");
  CHECK(j["tokens"].size() < 400);
  CHECK(j["tokens"].size() > 0);
}

TEST_CASE("serve hardening: a client that half-closes after a complete request gets its response") {
  // Fast (answered before the half-close is seen) and slow (the server notices the half-close while generating
  // and probes with 102 interim responses, which the client reads past).
  for (const char* delay : {"0", "20"}) {
    ServerProcess server({"--delay-ms", delay});
    const int fd = open_with(server.port(), post_request({{"prompt", "a"}, {"max_tokens", 40}, {"seed", 2}}));
    REQUIRE(shutdown(fd, SHUT_WR) == 0);
    const auto r = final_responses(read_until_closed(fd, 10));
    close(fd);
    REQUIRE(r.size() == 1);
    CHECK(r[0].status == 200);
    CHECK(json::parse(r[0].body)["usage"]["completion_tokens"] ==
          json::parse(r[0].body)["choices"][0]["tokens"].size());
    CHECK(metric_value(get_metrics(server.port()), "sqrtdk_client_disconnects_total") == 0);
  }
}

TEST_CASE("serve hardening: pipelined requests are all answered, in order") {
  ServerProcess server({});
  std::string batch;
  for (const char* prompt : {"a", "bb", "ccc"}) batch += post_request({{"prompt", prompt}, {"max_tokens", 3}});
  batch += get_request("/healthz");
  batch += post_request({{"prompt", "dddd"}, {"max_tokens", 3}}, "Connection: close\r\n");
  const int fd = open_with(server.port(), batch);
  const auto r = final_responses(read_until_closed(fd, 10));
  close(fd);
  REQUIRE(r.size() == 5);
  const size_t prompt_tokens[] = {2, 3, 4, 0, 5};  // BOS + bytes
  for (size_t i = 0; i < r.size(); ++i) {
    CHECK(r[i].status == 200);
    if (i == 3)
      CHECK(json::parse(r[i].body)["status"] == "ok");
    else
      CHECK(json::parse(r[i].body)["usage"]["prompt_tokens"] == prompt_tokens[i]);
  }
}

TEST_CASE("serve hardening: back-to-back completions on one keep-alive connection never stall") {
  // The server watches the socket while a completion runs; a spurious readiness must not block it in a read.
  ServerProcess server({"--http-threads", "4"});
  const int fd = connect_loopback(server.port());
  REQUIRE(fd >= 0);
  std::string pending;
  char buf[8192];
  for (int i = 0; i < 300; ++i) {
    REQUIRE(send_all(fd, post_request({{"prompt", "a"}, {"max_tokens", 2}, {"seed", i}})));
    const auto t0 = Clock::now();
    std::vector<RawResponse> r;
    while (r.empty() && seconds_since(t0) < 5) {
      pollfd p{fd, POLLIN, 0};
      if (poll(&p, 1, 50) <= 0) continue;
      const ssize_t n = recv(fd, buf, sizeof buf, 0);
      if (n <= 0) break;
      pending.append(buf, static_cast<size_t>(n));
      r = final_responses(pending);
    }
    INFO("request " << i);
    REQUIRE(r.size() == 1);
    CHECK(r[0].status == 200);
    pending.clear();
  }
  close(fd);
}

TEST_CASE("serve hardening: framing attacks: conflicting Content-Length 400, oversized chunked body 413 early") {
  ServerProcess server({"--max-body", "4096"});
  const std::string body = json{{"prompt", "a"}, {"max_tokens", 2}}.dump();
  {
    const int fd = open_with(server.port(), "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: " +
                                                std::to_string(body.size()) + "\r\nContent-Length: " +
                                                std::to_string(body.size() + 1) + "\r\n\r\n" + body);
    const auto r = final_responses(read_until_closed(fd, 5));
    close(fd);
    REQUIRE(r.size() == 1);
    CHECK(r[0].status == 400);
    CHECK(json::parse(r[0].body)["error"]["message"].get<std::string>().find("Content-Length") != std::string::npos);
  }
  {
    // 64 KiB of chunks, and the body never ends: the answer must come once the limit is passed, not at the end.
    const int fd = open_with(server.port(),
                             "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n");
    const std::string chunk = "400\r\n" + std::string(1024, 'x') + "\r\n";
    for (int i = 0; i < 64; ++i)
      if (!send_all(fd, chunk)) break;  // the server may have answered and closed already
    const auto t0 = Clock::now();
    const auto r = final_responses(read_until_closed(fd, 5));
    close(fd);
    CHECK(seconds_since(t0) < 3);
    REQUIRE(r.size() == 1);
    CHECK(r[0].status == 413);
    CHECK(json::parse(r[0].body)["error"]["code"] == "body_too_large");
  }
  {
    // Neighbours: Content-Length with chunked (request smuggling) is 400; a head past 16 KiB is 431.
    const int smuggle = open_with(server.port(), "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 4"
                                                 "\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n");
    const auto r = final_responses(read_until_closed(smuggle, 5));
    close(smuggle);
    REQUIRE(r.size() == 1);
    CHECK(r[0].status == 400);
    const int big = open_with(server.port(), get_request("/healthz", "X-Big: " + std::string(17000, 'a') + "\r\n"));
    const auto b = final_responses(read_until_closed(big, 5));
    close(big);
    REQUIRE(b.size() == 1);
    CHECK(b[0].status == 431);
  }
  const std::string m = get_metrics(server.port());
  CHECK(metric_value(m, "sqrtdk_requests_total{code=\"400\"}") == 2);
  CHECK(metric_value(m, "sqrtdk_requests_total{code=\"413\"}") == 1);
  CHECK(metric_value(m, "sqrtdk_requests_total{code=\"431\"}") == 1);
}

TEST_CASE("serve hardening: GET /v1/models/{id} percent-decodes the id; a malformed escape is a 400") {
  // OpenAI's SDKs encode the id (encodeURIComponent: '/' is %2F). Before: every escaped id was a 404.
  ServerProcess server({"--model-name", "a/b\"c d"});
  std::string pipelined;
  const std::string targets[] = {"/v1/models/a%2Fb%22c%20d", "/v1/models/a/b%22c%20d", "/v1/models/a%2fb%22c%20d",
                                 "/v1/models/a%2Fb%22c",     "/v1/models/a%zzb",       "/v1/models/abc%2",
                                 "/v1/models/abc%"};
  for (const std::string& target : targets) pipelined += get_request(target);
  pipelined += get_request("/healthz", "Connection: close\r\n");
  const int fd = open_with(server.port(), pipelined);
  auto r = final_responses(read_until_closed(fd, 5));
  close(fd);
  REQUIRE(r.size() == 8);
  for (size_t i = 0; i < 3; ++i) {
    INFO(targets[i]);
    CHECK(r[i].status == 200);
    CHECK(json::parse(r[i].body)["id"] == "a/b\"c d");
  }
  CHECK(r[3].status == 404);  // decoded, and named so in the message
  CHECK(json::parse(r[3].body)["error"]["message"].get<std::string>().find("'a/b\"c'") != std::string::npos);
  for (size_t i = 4; i < 7; ++i) {
    INFO(targets[i]);
    CHECK(r[i].status == 400);
    CHECK(json::parse(r[i].body)["error"]["message"].get<std::string>().find("percent-escape") != std::string::npos);
  }
}

TEST_CASE("serve hardening: an absolute-form request target is routed by its path") {
  // RFC 9112 §3.2.2: a server must accept absolute-form (what a client sends to a proxy). Before: 404.
  ServerProcess server({});
  const std::string authority = "127.0.0.1:" + std::to_string(server.port());
  const std::string body = json{{"prompt", "a"}, {"max_tokens", 1}}.dump();
  const int fd = open_with(server.port(),
                           "POST http://" + authority + "/v1/completions HTTP/1.1\r\nHost: " + authority +
                               "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body +
                               get_request("HTTP://" + authority + "/healthz?x=1") +
                               get_request("https://elsewhere.example/v1/models/serve-toy") +
                               get_request("http://" + authority, "Connection: close\r\n"));
  auto r = final_responses(read_until_closed(fd, 5));
  close(fd);
  REQUIRE(r.size() == 4);
  CHECK(r[0].status == 200);
  CHECK(json::parse(r[0].body)["object"] == "text_completion");
  CHECK(r[1].status == 200);
  CHECK(json::parse(r[1].body)["status"] == "ok");
  CHECK(r[2].status == 200);
  CHECK(json::parse(r[2].body)["id"] == "serve-toy");
  CHECK(r[3].status == 404);  // an empty path is "/": no such endpoint
  CHECK(json::parse(r[3].body)["error"]["message"] == "no such endpoint: GET /");
}

TEST_CASE("serve hardening: a request cut short: 400 once the client half-closes, 408 at --timeout if it stalls") {
  ServerProcess server({"--timeout", "1"});
  const std::string body = json{{"prompt", "a"}, {"max_tokens", 1}}.dump();
  const std::string head = "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n";
  const std::string promised = head + "Content-Length: " + std::to_string(body.size() + 10) + "\r\n\r\n" + body;
  const std::string unfinished_chunks =
      head + "Transfer-Encoding: chunked\r\n\r\n" + to_hex(body.size()) + "\r\n" + body;
  // Before: each connection was closed without a response (at once after the half-close, at --timeout otherwise).
  // The stalled ones and an idle one all wait out the same second.
  std::vector<std::pair<int, std::string>> stalled;
  for (const std::string& request : {promised, unfinished_chunks, std::string("GET /healthz HTTP/1.1\r\nHo")})
    stalled.emplace_back(open_with(server.port(), request), request);
  const int idle = connect_loopback(server.port());
  REQUIRE(idle >= 0);
  const auto t0 = Clock::now();
  const std::pair<std::string, std::string> half_closed[] = {
      {promised, "request body shorter than Content-Length: the client closed its side after " +
                     std::to_string(body.size()) + " of " + std::to_string(body.size() + 10) + " bytes"},
      {unfinished_chunks, "chunked request body ended"},
      {"GET /healthz HTTP/1.1\r\nHo", "ended inside its head"}};
  for (const auto& [request, message] : half_closed) {
    const std::string sent = request;  // INFO's lambda cannot capture a structured binding (clang 14)
    const int fd = open_with(server.port(), sent);
    REQUIRE(shutdown(fd, SHUT_WR) == 0);
    auto r = final_responses(read_until_closed(fd, 5));
    close(fd);
    INFO(sent);
    CHECK(r.size() == 1);
    if (r.empty()) continue;
    CHECK(r[0].status == 400);
    CHECK(r[0].headers["connection"] == "close");
    CHECK(json::parse(r[0].body)["error"]["message"].get<std::string>().find(message) != std::string::npos);
  }
  for (const auto& [fd, request] : stalled) {
    const std::string sent = request;  // INFO's lambda cannot capture a structured binding (clang 14)
    auto r = final_responses(read_until_closed(fd, 5));
    close(fd);
    INFO(sent);
    CHECK(r.size() == 1);
    if (r.empty()) continue;
    CHECK(r[0].status == 408);
    CHECK(r[0].headers["connection"] == "close");
    CHECK(json::parse(r[0].body)["error"]["code"] == "request_timeout");
  }
  CHECK(seconds_since(t0) < 3);
  // Idle between requests (here before the first): closed at --timeout without a word, as before.
  CHECK(read_until_closed(idle, 5).empty());
  close(idle);
}

TEST_CASE("serve hardening: a transfer coding other than chunked is 501, a content coding other than identity 415") {
  ServerProcess server({});
  const std::string body = json{{"prompt", "a"}, {"max_tokens", 1}}.dump();
  const std::string head = "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n";
  const std::string chunked_body = to_hex(body.size()) + "\r\n" + body + "\r\n0\r\n\r\n";
  // Before: Beast took "Transfer-Encoding: gzip" for no body (400 "malformed JSON"), framed the request by a
  // Content-Length beside it (200), and read "gzip, chunked" as plain chunked (200).
  const std::pair<std::string, std::string> transfer_cases[] = {
      {head + "Transfer-Encoding: gzip\r\n\r\n" + body, "'gzip'"},
      {head + "Transfer-Encoding: gzip\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body,
       "'gzip'"},
      {head + "Transfer-Encoding: Deflate ,chunked\r\n\r\n" + chunked_body, "'Deflate'"}};
  for (const auto& [request, named] : transfer_cases) {
    const std::string sent = request;  // INFO's lambda cannot capture a structured binding (clang 14)
    const int fd = open_with(server.port(), sent);
    auto r = final_responses(read_until_closed(fd, 5));  // and the server closes
    close(fd);
    INFO(sent);
    CHECK(r.size() == 1);  // before: 2 in the first case (the body was read as a second request)
    if (r.empty()) continue;
    CHECK(r[0].status == 501);
    CHECK(r[0].headers["connection"] == "close");
    const json e = json::parse(r[0].body)["error"];
    CHECK(e["message"].get<std::string>().find("Transfer-Encoding " + named) != std::string::npos);
    CHECK(e["code"] == "unsupported_transfer_encoding");
  }
  // Before: the body was read as JSON whatever its coding (200 here: the bytes were not really compressed). The
  // body is framed, so the connection stays open: identity (the same as none) is served on it next.
  const json small = {{"prompt", "a"}, {"max_tokens", 1}};
  const int fd = open_with(server.port(), post_request(small, "Content-Encoding: gzip\r\n") +
                                              post_request(small, "Content-Encoding: identity\r\n"
                                                                  "Connection: close\r\n"));
  auto r = final_responses(read_until_closed(fd, 5));
  close(fd);
  REQUIRE(r.size() == 2);
  CHECK(r[0].status == 415);
  CHECK(r[0].headers["accept-encoding"] == "identity");
  CHECK(json::parse(r[0].body)["error"]["message"].get<std::string>().find("Content-Encoding 'gzip'") !=
        std::string::npos);
  CHECK(r[1].status == 200);
}

TEST_CASE("serve hardening: Expect 100-continue, and an HTTP/1.0 stream delimited by the close") {
  ServerProcess server({});
  const std::string body = json{{"prompt", "a"}, {"max_tokens", 3}}.dump();
  const int fd = open_with(server.port(), "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nExpect: 100-continue\r\n"
                                          "Connection: close\r\nContent-Length: " +
                                              std::to_string(body.size()) + "\r\n\r\n");
  char buf[256];
  pollfd p{fd, POLLIN, 0};
  REQUIRE(poll(&p, 1, 5000) == 1);
  const ssize_t n = recv(fd, buf, sizeof buf, 0);
  REQUIRE(n > 0);
  CHECK(std::string(buf, static_cast<size_t>(n)).rfind("HTTP/1.1 100 Continue\r\n\r\n", 0) == 0);
  REQUIRE(send_all(fd, body));
  const auto r = final_responses(read_until_closed(fd, 5));
  close(fd);
  REQUIRE(r.size() == 1);
  CHECK(r[0].status == 200);

  const std::string sbody = json{{"prompt", "a"}, {"max_tokens", 3}, {"stream", true}}.dump();
  const int old = open_with(server.port(), "POST /v1/completions HTTP/1.0\r\nContent-Length: " +
                                               std::to_string(sbody.size()) + "\r\n\r\n" + sbody);
  const std::string got = read_until_closed(old, 5);
  close(old);
  CHECK(got.rfind("HTTP/1.0 200", 0) == 0);
  CHECK(got.find("Transfer-Encoding") == std::string::npos);
  CHECK(got.ends_with("data: [DONE]\n\n"));
}

TEST_CASE("serve hardening: slow-header clients do not stall others, and the whole head has one deadline") {
  ServerProcess server({"--http-threads", "32", "--timeout", "2"});
  std::vector<int> slow;
  for (int i = 0; i < 100; ++i) slow.push_back(open_with(server.port(), "GET /healthz HTTP/1.1\r\nHo"));
  const auto t0 = Clock::now();
  const int fd = open_with(server.port(), get_request("/healthz", "Connection: close\r\n"));
  const auto r = final_responses(read_until_closed(fd, 5));
  close(fd);
  CHECK(seconds_since(t0) < 1.5);  // httplib 0.11: no answer within 5 s
  REQUIRE(r.size() == 1);
  CHECK(r[0].status == 200);
  for (int s : slow) close(s);

  // A client that trickles its head one byte every 200 ms never lets a read time out, but is cut at --timeout.
  const int trickle = connect_loopback(server.port());
  REQUIRE(trickle >= 0);
  const std::string head = "GET /healthz HTTP/1.1\r\nX-Slow: " + std::string(100, 'a');
  const auto t1 = Clock::now();
  bool cut = false;
  for (char ch : head) {
    if (!send_all(trickle, std::string(1, ch)) || closed_within(trickle, 0.2)) {
      cut = true;
      break;
    }
  }
  close(trickle);
  CHECK(cut);
  CHECK(seconds_since(t1) < 4);
}

TEST_CASE("serve hardening: past --max-connections a new connection gets 503 and is closed") {
  ServerProcess server({"--max-connections", "8"});
  std::vector<int> held;
  for (int i = 0; i < 7; ++i) held.push_back(open_with(server.port(), "GET /healthz HTTP/1.1\r\n"));
  REQUIRE(wait_metric(server.port(), "sqrtdk_open_connections", 8) == 8);  // 7 + the one asking
  // The 8th. The connection that asked for the metric counts until the server has seen it close, so an 8th opened
  // at once can be refused in its place (seen under ASan: the 9th then got 200). Open it until it is not refused:
  // a refused connection is answered (503) and closed at once; an accepted one waits, silent, for its head.
  for (int attempt = 0;; ++attempt) {
    const int fd8 = open_with(server.port(), "GET /healthz HTTP/1.1\r\n");
    pollfd pfd{fd8, POLLIN, 0};
    if (poll(&pfd, 1, 300) == 0) {
      held.push_back(fd8);
      break;
    }
    close(fd8);
    REQUIRE_MESSAGE(attempt < 20, "every 8th connection was refused: the server counts more than 8 open");
  }
  const int fd = open_with(server.port(), get_request("/healthz"));
  auto r = final_responses(read_until_closed(fd, 5));
  close(fd);
  REQUIRE(r.size() == 1);
  CHECK(r[0].status == 503);
  CHECK(r[0].headers["retry-after"] == "1");
  for (int s : held) close(s);
  CHECK(wait_metric(server.port(), "sqrtdk_open_connections", 1) == 1);
  const std::string m = get_metrics(server.port());
  CHECK(metric_value(m, "sqrtdk_refused_connections_total") >= 1);  // and /metrics polls while the 8 were closing
}

TEST_CASE("serve hardening: SIGTERM drains: running stream ends with [DONE], queued gets 503, slow ones are cut") {
  ServerProcess server({"--sessions", "1", "--queue", "4", "--delay-ms", "20", "--grace", "2"});
  const json stream = {{"prompt", "a"}, {"max_tokens", 50}, {"stream", true}};
  const int running = open_with(server.port(), post_request(stream));
  REQUIRE(wait_metric(server.port(), "sqrtdk_sessions_in_use", 1) == 1);
  const int queued = open_with(server.port(), post_request(stream));
  REQUIRE(wait_metric(server.port(), "sqrtdk_queue_depth", 1) == 1);
  const int idle = connect_loopback(server.port());
  REQUIRE(idle >= 0);
  const int slow = open_with(server.port(), "GET /healthz HTTP/1.1\r\nHo");
  REQUIRE(wait_metric(server.port(), "sqrtdk_open_connections", 5) == 5);  // 4 + the /metrics one

  const auto t0 = Clock::now();
  kill(server.pid(), SIGTERM);
  const auto q = final_responses(read_until_closed(queued, 5));
  REQUIRE(q.size() == 1);
  CHECK(q[0].status == 503);  // before any 200 header
  CHECK(closed_within(idle, 1));
  const auto r = final_responses(read_until_closed(running, 5));
  REQUIRE(r.size() == 1);
  CHECK(r[0].status == 200);
  CHECK(r[0].body.find("data: [DONE]") != std::string::npos);
  CHECK(closed_within(slow, 4));  // cut by the grace period (2 s), not the 10 s request timeout
  CHECK(server.stop(0, 5) == 0);  // already exiting: signal 0 only waits
  CHECK(seconds_since(t0) < 4);
  for (int fd : {running, queued, idle, slow}) close(fd);
}

TEST_CASE("serve hardening: a wrong method is 405 with Allow, /healthz names the model file and not its path") {
  ServerProcess server({});
  const std::pair<std::string, std::string> cases[] = {
      {"POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}", "GET"},
      {get_request("/v1/completions"), "POST"},
      {"DELETE /metrics HTTP/1.1\r\nHost: x\r\n\r\n", "GET"}};
  for (const auto& [request, allow] : cases) {
    const int fd = open_with(server.port(), request);
    shutdown(fd, SHUT_WR);
    auto r = final_responses(read_until_closed(fd, 5));
    close(fd);
    REQUIRE(r.size() == 1);
    CHECK(r[0].status == 405);
    CHECK(r[0].headers["allow"] == allow);
    CHECK(json::parse(r[0].body)["error"]["code"] == "method_not_allowed");
  }
  const int fd = open_with(server.port(), get_request("/healthz?verbose=1", "Connection: close\r\n"));
  const auto r = final_responses(read_until_closed(fd, 5));
  close(fd);
  REQUIRE(r.size() == 1);
  CHECK(json::parse(r[0].body)["model"] == "serve-toy.sqdk");
  CHECK(r[0].body.find('/') == std::string::npos);
}

TEST_CASE("serve hardening: --version") {
  const auto r = run_to_exit(SQRTDK_SERVE_BIN, {"--version"});
  CHECK(r.status == 0);
  CHECK(r.output.rfind("sqrtdk-serve ", 0) == 0);
}

TEST_CASE("serve hardening: a usage error exits 1 with one line naming the option; --help exits 0") {
  // Before: CLI11_PARSE's own codes (105 for a value out of range, 109 for an unknown option) and a second line.
  const std::pair<std::vector<std::string>, std::string> cases[] = {{{"--port", "99999"}, "--port"},
                                                                    {{"--sessions", "0"}, "--sessions"},
                                                                    {{"--bogus"}, "--bogus"},
                                                                    {{"--threads", "x"}, "--threads"}};
  for (const auto& [args, option] : cases) {
    const auto r = run_to_exit(SQRTDK_SERVE_BIN, args);
    INFO(r.output);
    CHECK(r.status == 1);
    CHECK(r.output.rfind("sqrtdk-serve: usage error: ", 0) == 0);
    CHECK(r.output.find(option) != std::string::npos);
    CHECK(std::count(r.output.begin(), r.output.end(), '\n') == 1);
  }
  // Only the loaded model knows its max_seq (512 here), but a --context past it is still the caller's mistake.
  // Before: exit 4, "cannot start: Batch: max_context 100000 exceeds ...".
  const auto context = run_to_exit(SQRTDK_SERVE_BIN, ServerProcess::with_model({"--port", "0", "--context", "100000"}));
  INFO(context.output);
  CHECK(context.status == 1);
  CHECK(context.output.rfind("sqrtdk-serve: usage error: --context 100000 ", 0) == 0);
  CHECK(context.output.find("max_seq 512") != std::string::npos);
  CHECK(context.output.find("listening") == std::string::npos);
  const auto help = run_to_exit(SQRTDK_SERVE_BIN, {"--help"});
  CHECK(help.status == 0);
  CHECK(help.output.find("1 usage error") != std::string::npos);
}

TEST_CASE("serve hardening: an empty --host, --model-name or --model is a usage error, not the default") {
  // Before: --host "" listened on 0.0.0.0 (every interface, though the default is loopback), --model-name "" became
  // the file's name, --model "" failed as a model file named "". A 5 s limit: the old server served for ever.
  for (const char* option : {"--host", "--model-name", "--model"}) {
    std::vector<std::string> args = {"--port", "0", "--threads", "1", option, ""};
    if (option != std::string("--model")) args = ServerProcess::with_model(args);
    const auto r = run_to_exit(SQRTDK_SERVE_BIN, args, 0, 5);
    INFO(r.output);
    CHECK(r.status == 1);
    CHECK(r.output.rfind(std::string("sqrtdk-serve: usage error: ") + option + ": must not be empty", 0) == 0);
    CHECK(r.output.find("listening") == std::string::npos);
  }
}

}  // namespace serve_hardening_tests
