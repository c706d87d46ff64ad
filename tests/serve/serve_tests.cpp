// sqrtdk-serve: request validation (in-process) and the running service (a child process on an ephemeral loopback
// port, driven with httplib::Client and raw sockets): every endpoint, every error, overload, disconnects, shutdown.
#include "tests/serve/serve_test_util.h"
#include "tools/serve/request.h"

#include <doctest/doctest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <csignal>
#include <string>
#include <thread>
#include <unistd.h>
#include <sys/socket.h>
#include <poll.h>

// Named after the file: the sanitizer builds compile test files together (a unity build), and this file's
// helpers share their names with another test file's.
namespace serve_tests {

namespace {

using nlohmann::json;
using sqrtdk::serve::CompletionRequest;
using sqrtdk::serve::parse_completion_request;
using sqrtdk::serve::RequestError;
using sqrtdk::serve_test::metric_value;
using sqrtdk::serve_test::ServerProcess;

// The bundled default model's config (byte-level, 258 ids, context 512), without loading it.
sqrtdk::ModelConfig byte_config() {
  sqrtdk::ModelConfig c;
  c.n_vocab = 258;
  c.max_seq = 512;
  c.tokenizer = sqrtdk::TokenizerKind::byte_level;
  c.bos_id = 256;
  c.eos_id = 257;
  return c;
}

CompletionRequest parse(const std::string& body) {
  sqrtdk::serve::RequestLimits limits;
  limits.max_context = 512;
  return parse_completion_request(body, byte_config(), limits);
}

// The message of the RequestError `body` raises ("" if it parses).
std::string error_of(const std::string& body) {
  try {
    parse(body);
  } catch (const RequestError& e) {
    CHECK(e.status() == 400);
    return e.what();
  }
  return "";
}

json post(httplib::Client& cli, const json& body, int expect_status) {
  auto res = cli.Post("/v1/completions", body.dump(), "application/json");
  REQUIRE(res);
  CHECK(res->status == expect_status);
  return json::parse(res->body);
}

// The one choice of a completion response, with the response's id and usage beside it.
json choice(const json& response) {
  json c = response.at("choices").at(0);
  c["id"] = response["id"];
  c["usage"] = response["usage"];
  return c;
}

std::string get_metrics(int port) {
  httplib::Client cli("127.0.0.1", port);
  auto res = cli.Get("/metrics");
  REQUIRE(res);
  REQUIRE(res->status == 200);
  return res->body;
}

// Polls /metrics until sessions_in_use is 0 (at most 5 s); returns the last value.
double wait_sessions_idle(int port) {
  double in_use = -1;
  for (int i = 0; i < 500; ++i) {
    in_use = metric_value(get_metrics(port), "sqrtdk_sessions_in_use");
    if (in_use == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return in_use;
}

// The metrics of `port` once `name` reaches `value` (at most 5 s): the server records a completion's latency just
// after its last byte went out, so a client may ask before the count moved.
std::string metrics_when(int port, const std::string& name, double value) {
  std::string m;
  for (int i = 0; i < 500; ++i) {
    m = get_metrics(port);
    if (metric_value(m, name) >= value) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return m;
}

struct IgnoreSigpipe {
  IgnoreSigpipe() { std::signal(SIGPIPE, SIG_IGN); }  // writes to a server that closed must not kill the test
};
const IgnoreSigpipe ignore_sigpipe;

}  // namespace

TEST_CASE("serve: request parsing accepts the documented fields") {
  CompletionRequest r = parse(R"({"prompt":"ab","max_tokens":5,"temperature":0.5,"top_p":0.9,"top_k":7,"seed":3,
                                  "stop":["x", 10],"stream":true})");
  CHECK(r.prompt == std::vector<uint32_t>{256, 'a', 'b'});
  CHECK(r.max_tokens == 5);
  CHECK(r.temperature == 0.5f);
  CHECK(r.top_p == 0.9f);  // the JSON number rounded once to float
  CHECK(r.top_k == 7);
  CHECK(r.seed == 3);
  CHECK(r.stop_texts == std::vector<std::string>{"x"});
  CHECK(r.stop_tokens == std::vector<uint32_t>{10});
  CHECK(r.stream);
  r = parse(R"({"tokens":[1,2,257],"stop":"\n"})");
  CHECK(r.prompt == std::vector<uint32_t>{1, 2, 257});
  CHECK(r.max_tokens == 16);
  CHECK(r.stop_texts == std::vector<std::string>{"\n"});
  // The prompt may fill the context but one token: max_tokens defaults to the room left.
  r = parse(json{{"prompt", std::string(510, 'a')}}.dump());
  CHECK(r.prompt.size() == 511);
  CHECK(r.max_tokens == 1);
}

TEST_CASE("serve: request parsing rejects bad bodies with a message naming the problem") {
  CHECK(error_of("{").find("malformed JSON") != std::string::npos);
  CHECK(error_of("").find("malformed JSON") != std::string::npos);
  CHECK(error_of("[1]").find("must be a JSON object") != std::string::npos);
  CHECK(error_of(std::string(100, '[')).find("nested deeper") != std::string::npos);
  CHECK(error_of("{}").find("exactly one of 'prompt'") != std::string::npos);
  CHECK(error_of(R"({"prompt":"a","tokens":[1]})").find("exactly one of") != std::string::npos);
  CHECK(error_of(R"({"prompt":5})").find("'prompt' must be a string, got number") != std::string::npos);
  CHECK(error_of(R"({"tokens":"abc"})").find("'tokens' must be an array") != std::string::npos);
  CHECK(error_of(R"({"tokens":[]})").find("'tokens' is empty") != std::string::npos);
  CHECK(error_of(R"({"tokens":[1,"a"]})").find("integer token ids, got string") != std::string::npos);
  CHECK(error_of(R"({"tokens":[1.5]})").find("integer token ids") != std::string::npos);
  CHECK(error_of(R"({"tokens":[258]})").find("token id 258, out of range") != std::string::npos);
  CHECK(error_of(R"({"tokens":[-1]})").find("token id -1, out of range") != std::string::npos);
  CHECK(error_of(R"({"prompt":"a","max_tokens":"5"})").find("'max_tokens' must be an integer, got string") !=
        std::string::npos);
  CHECK(error_of(R"({"prompt":"a","max_tokens":0})").find("'max_tokens' is 0") != std::string::npos);
  CHECK(error_of(R"({"prompt":"a","max_tokens":-3})").find("'max_tokens' is -3") != std::string::npos);
  CHECK(error_of(R"({"prompt":"a","max_tokens":511})").find("leave room for 510") != std::string::npos);
  CHECK(error_of(R"({"prompt":"a","max_tokens":100000})").find("'max_tokens' is 100000") != std::string::npos);
  CHECK(error_of(R"({"prompt":"a","max_tokens":16.0})").find("must be an integer") != std::string::npos);
  CHECK(error_of(json{{"prompt", std::string(511, 'a')}}.dump()).find("too long for the context") !=
        std::string::npos);
  CHECK(error_of(json{{"prompt", std::string(100000, 'a')}}.dump()).find("too long for the context") !=
        std::string::npos);
  CHECK(error_of(json{{"tokens", std::vector<int>(512, 1)}}.dump()).find("too long") != std::string::npos);
  CHECK(error_of(R"({"prompt":"a","temperature":"hot"})").find("'temperature' must be a number") !=
        std::string::npos);
  CHECK(error_of(R"({"prompt":"a","temperature":-1})").find("'temperature' is -1") != std::string::npos);
  CHECK(error_of(R"({"prompt":"a","top_p":0})").find("'top_p' is 0") != std::string::npos);
  CHECK(error_of(R"({"prompt":"a","top_p":1.5})").find("'top_p'") != std::string::npos);
  CHECK(error_of(R"({"prompt":"a","top_k":-1})").find("'top_k'") != std::string::npos);
  CHECK(error_of(R"({"prompt":"a","seed":"x"})").find("'seed' must be an integer") != std::string::npos);
  CHECK(error_of(R"({"prompt":"a","stream":"yes"})").find("'stream' must be true or false") != std::string::npos);
  CHECK(error_of(R"({"prompt":"a","stop":{}})").find("'stop' must be an array") != std::string::npos);
  CHECK(error_of(R"({"prompt":"a","stop":[""]})").find("empty string") != std::string::npos);
  CHECK(error_of(R"({"prompt":"a","stop":[[1]]})").find("'stop' must hold strings or token ids") !=
        std::string::npos);
  CHECK(error_of(R"({"prompt":"a","stop":[999]})").find("out of range") != std::string::npos);
  // Invalid UTF-8 in a prompt is bytes to the byte tokenizer, not an error; nlohmann rejects it in JSON text.
  CHECK(error_of("{\"prompt\":\"\xff\xfe\"}").find("malformed JSON") != std::string::npos);
  CHECK(error_of(R"({"prompt":"\u00ff"})") == "");
}

TEST_CASE("serve: healthz, metrics, completions, identical seeded completions, streaming") {
  ServerProcess server({"--sessions", "2"});
  httplib::Client cli("127.0.0.1", server.port());

  auto health = cli.Get("/healthz");
  REQUIRE(health);
  CHECK(health->status == 200);
  CHECK(json::parse(health->body)["status"] == "ok");

  const json req = {{"prompt", "Once upon a time"}, {"max_tokens", 24}, {"temperature", 0.9}, {"seed", 7}};
  const json a = choice(post(cli, req, 200));
  const json b = choice(post(cli, req, 200));
  CHECK(a["tokens"] == b["tokens"]);
  CHECK(a["text"] == b["text"]);
  CHECK(a["id"] != b["id"]);
  CHECK(a["usage"]["prompt_tokens"] == 17);  // BOS + 16 bytes
  CHECK(a["usage"]["completion_tokens"] == a["tokens"].size());
  CHECK(a["tokens"].size() <= 24);
  CHECK((a["finish_reason"] == "length" || a["finish_reason"] == "stop"));
  if (a["finish_reason"] == "length") CHECK(a["tokens"].size() == 24);

  // The same prompt as token ids gives the same completion.
  std::vector<uint32_t> ids = {256};
  for (char ch : std::string("Once upon a time")) ids.push_back(static_cast<unsigned char>(ch));
  json by_ids = req;
  by_ids.erase("prompt");
  by_ids["tokens"] = ids;
  CHECK(choice(post(cli, by_ids, 200))["tokens"] == a["tokens"]);

  // Streaming: one event per token, the same tokens as the plain response, then a summary and [DONE].
  json sreq = req;
  sreq["stream"] = true;
  auto s = cli.Post("/v1/completions", sreq.dump(), "application/json");
  REQUIRE(s);
  CHECK(s->status == 200);
  CHECK(s->get_header_value("Content-Type").find("text/event-stream") == 0);
  std::vector<uint32_t> streamed;
  std::string finish;
  size_t pos = 0;
  bool done = false;
  while ((pos = s->body.find("data: ", pos)) != std::string::npos) {
    const size_t end = s->body.find("\n\n", pos);
    REQUIRE(end != std::string::npos);
    const std::string data = s->body.substr(pos + 6, end - pos - 6);
    pos = end;
    if (data == "[DONE]") {
      done = true;
      break;
    }
    const json ev = json::parse(data).at("choices").at(0);
    if (ev.contains("tokens")) streamed.push_back(ev["tokens"].at(0).get<uint32_t>());
    if (!ev["finish_reason"].is_null()) finish = ev["finish_reason"];
  }
  CHECK(done);
  CHECK(json(streamed) == a["tokens"]);
  CHECK(finish == a["finish_reason"]);

  const std::string m = metrics_when(server.port(), "sqrtdk_request_duration_seconds_count", 4);
  CHECK(metric_value(m, "sqrtdk_requests_total{code=\"200\"}") >= 5);
  CHECK(metric_value(m, "sqrtdk_tokens_generated_total") >= 3 * a["tokens"].size());
  CHECK(metric_value(m, "sqrtdk_request_duration_seconds_count") == 4);
  CHECK(metric_value(m, "sqrtdk_sessions") == 2);
  CHECK(metric_value(m, "sqrtdk_sessions_in_use") == 0);
  CHECK(metric_value(m, "sqrtdk_queue_depth") == 0);
  CHECK(m.find("# TYPE sqrtdk_request_duration_seconds histogram") != std::string::npos);
  CHECK(m.find("sqrtdk_request_duration_seconds_bucket{le=\"+Inf\"} 4") != std::string::npos);
  CHECK(server.stop(SIGTERM) == 0);
}

TEST_CASE("serve: stop strings and stop ids end the completion without being returned") {
  ServerProcess server({});
  httplib::Client cli("127.0.0.1", server.port());
  const json greedy = {{"prompt", "The "}, {"max_tokens", 40}, {"temperature", 0}};
  const json full = choice(post(cli, greedy, 200));
  const std::vector<uint32_t> tokens = full["tokens"];
  REQUIRE(tokens.size() >= 6);
  // "text" replaces bytes that are not UTF-8 (the toy emits random bytes), so stop strings are built from an
  // ASCII token and results compared as token ids, which carry the exact bytes.
  size_t i = 1;
  while (i < tokens.size() && (tokens[i] == 0 || tokens[i] >= 128)) ++i;
  REQUIRE(i < tokens.size());
  const std::string stop(1, static_cast<char>(tokens[i]));
  const size_t at = std::find(tokens.begin(), tokens.end(), tokens[i]) - tokens.begin();
  json with_stop = greedy;
  with_stop["stop"] = {stop};
  const json cut = choice(post(cli, with_stop, 200));
  CHECK(cut["tokens"] == json(std::vector<uint32_t>(tokens.begin(), tokens.begin() + at)));
  CHECK(cut["finish_reason"] == "stop");

  // A two-byte stop string that never completes: streaming holds back each occurrence of its first byte until
  // the next token shows it is not the stop string, and still delivers every token.
  json held = greedy;
  held["stop"] = {stop + "\x01"};
  held["stream"] = true;
  auto s = cli.Post("/v1/completions", held.dump(), "application/json");
  REQUIRE(s);
  std::vector<uint32_t> streamed;
  size_t pos = 0;
  while ((pos = s->body.find("data: {", pos)) != std::string::npos) {
    const size_t end = s->body.find("\n\n", pos);
    const json ev = json::parse(s->body.substr(pos + 6, end - pos - 6)).at("choices").at(0);
    if (ev.contains("tokens")) streamed.push_back(ev["tokens"].at(0));
    pos = end;
  }
  CHECK(streamed == tokens);

  const size_t first = std::find(tokens.begin(), tokens.end(), tokens[3]) - tokens.begin();
  json with_id = greedy;
  with_id["stop"] = {tokens[3]};
  const json cut_id = choice(post(cli, with_id, 200));
  CHECK(cut_id["tokens"].size() == first);
  CHECK(cut_id["finish_reason"] == "stop");
}

TEST_CASE("serve: errors: 400 with a JSON message, 404, 413 for a body over --max-body") {
  ServerProcess server({"--max-body", "4096"});
  httplib::Client cli("127.0.0.1", server.port());
  auto check_400 = [&](const std::string& body, const std::string& needle) {
    auto res = cli.Post("/v1/completions", body, "application/json");
    REQUIRE(res);
    CHECK(res->status == 400);
    const json j = json::parse(res->body);
    CHECK(j["error"]["type"] == "invalid_request_error");
    CHECK(j["error"]["message"].get<std::string>().find(needle) != std::string::npos);
  };
  check_400("{not json", "malformed JSON");
  check_400(R"({"prompt":1})", "'prompt' must be a string");
  check_400(R"({"prompt":"a","max_tokens":0})", "'max_tokens' is 0");
  check_400(R"({"prompt":"a","max_tokens":"many"})", "'max_tokens' must be an integer");
  check_400(R"({"tokens":[300]})", "out of range");
  check_400(json{{"prompt", std::string(600, 'x')}}.dump(), "too long for the context");

  auto nf = cli.Get("/nope");
  REQUIRE(nf);
  CHECK(nf->status == 404);
  CHECK(json::parse(nf->body)["error"]["code"] == "not_found");

  auto big = cli.Post("/v1/completions", json{{"prompt", std::string(10000, 'x')}}.dump(), "application/json");
  REQUIRE(big);
  CHECK(big->status == 413);
  CHECK(json::parse(big->body)["error"]["code"] == "body_too_large");

  // The server is still up, and the metrics count each status.
  httplib::Client again("127.0.0.1", server.port());
  auto h = again.Get("/healthz");
  REQUIRE(h);
  CHECK(h->status == 200);
  const std::string m = metrics_when(server.port(), "sqrtdk_requests_total{code=\"413\"}", 1);
  CHECK(metric_value(m, "sqrtdk_requests_total{code=\"400\"}") == 6);
  CHECK(metric_value(m, "sqrtdk_requests_total{code=\"404\"}") == 1);
  CHECK(metric_value(m, "sqrtdk_requests_total{code=\"413\"}") == 1);
}

TEST_CASE("serve: overload answers 503 with Retry-After at once, queued requests are served") {
  // One session, a queue of one, 20 ms per token: a 40-token request holds the session for about 0.8 s.
  ServerProcess server({"--sessions", "1", "--queue", "1", "--delay-ms", "20"});
  const json slow = {{"prompt", "a"}, {"max_tokens", 40}, {"temperature", 0}};
  std::atomic<int> status_a{0}, status_b{0};
  std::thread a([&] {
    httplib::Client cli("127.0.0.1", server.port());
    auto r = cli.Post("/v1/completions", slow.dump(), "application/json");
    status_a = r ? r->status : -1;
  });
  for (int i = 0; i < 500 && metric_value(get_metrics(server.port()), "sqrtdk_sessions_in_use") != 1; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  std::thread b([&] {  // waits in the queue
    httplib::Client cli("127.0.0.1", server.port());
    auto r = cli.Post("/v1/completions", slow.dump(), "application/json");
    status_b = r ? r->status : -1;
  });
  for (int i = 0; i < 500 && metric_value(get_metrics(server.port()), "sqrtdk_queue_depth") != 1; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  CHECK(metric_value(get_metrics(server.port()), "sqrtdk_queue_depth") == 1);

  httplib::Client cli("127.0.0.1", server.port());
  auto c = cli.Post("/v1/completions", slow.dump(), "application/json");
  REQUIRE(c);
  CHECK(c->status == 503);
  CHECK(c->get_header_value("Retry-After") == "1");
  CHECK(json::parse(c->body)["error"]["type"] == "server_error");
  CHECK(json::parse(c->body)["error"]["code"] == "overloaded");
  auto h = cli.Get("/healthz");  // other endpoints still answer
  REQUIRE(h);
  CHECK(h->status == 200);
  a.join();
  b.join();
  CHECK(status_a == 200);
  CHECK(status_b == 200);
  const std::string m = metrics_when(server.port(), "sqrtdk_request_duration_seconds_count", 3);
  CHECK(metric_value(m, "sqrtdk_rejected_total") == 1);
  CHECK(metric_value(m, "sqrtdk_requests_total{code=\"503\"}") == 1);
  CHECK(metric_value(m, "sqrtdk_sessions_in_use") == 0);
}

TEST_CASE("serve: a client disconnecting mid-stream frees its session") {
  ServerProcess server({"--sessions", "1", "--delay-ms", "10"});
  const json req = {{"prompt", "a"}, {"max_tokens", 300}, {"stream", true}, {"seed", 1}};
  {
    httplib::Client cli("127.0.0.1", server.port());
    size_t received = 0;
    httplib::Request hr;  // 0.11's Post has no content receiver: send() a Request with one
    hr.method = "POST";
    hr.path = "/v1/completions";
    hr.body = req.dump();
    hr.set_header("Content-Type", "application/json");
    hr.content_receiver = [&](const char*, size_t n, uint64_t, uint64_t) {
      received += n;
      return received < 300;  // a few events, then hang up
    };
    auto r = cli.send(hr);
    CHECK(received > 0);
    CHECK(r.error() == httplib::Error::Canceled);
  }
  CHECK(wait_sessions_idle(server.port()) == 0);
  const std::string m = get_metrics(server.port());
  CHECK(metric_value(m, "sqrtdk_client_disconnects_total") == 1);
  CHECK(metric_value(m, "sqrtdk_tokens_generated_total") < 300);  // generation stopped early
  // The session serves the next request.
  httplib::Client cli("127.0.0.1", server.port());
  CHECK(choice(post(cli, {{"prompt", "b"}, {"max_tokens", 3}}, 200))["tokens"].size() <= 3);
}

TEST_CASE("serve: slow clients time out and do not block the others, many connections") {
  ServerProcess server({"--timeout", "1"});
  // A client that sends half a request line and stalls is closed after the read timeout.
  const int slow = sqrtdk::serve_test::connect_loopback(server.port());
  REQUIRE(slow >= 0);
  const char partial[] = "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\n{\"pro";
  REQUIRE(send(slow, partial, sizeof partial - 1, 0) > 0);
  httplib::Client cli("127.0.0.1", server.port());
  auto h = cli.Get("/healthz");
  REQUIRE(h);
  CHECK(h->status == 200);
  pollfd p{slow, POLLIN, 0};
  REQUIRE(poll(&p, 1, 5000) == 1);  // the server answers or closes within the timeout (1 s), not never
  char buf[256];
  CHECK(recv(slow, buf, sizeof buf, 0) >= 0);
  close(slow);

  // 200 connections at once, each sending a request: every one is answered (200 or 503), the server stays up.
  constexpr int kConnections = 200;
  std::vector<int> fds;
  for (int i = 0; i < kConnections; ++i) {
    const int fd = sqrtdk::serve_test::connect_loopback(server.port());
    REQUIRE(fd >= 0);
    fds.push_back(fd);
  }
  const std::string body = json{{"prompt", "hi"}, {"max_tokens", 2}}.dump();
  const std::string request = "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
                              "Content-Type: application/json\r\nContent-Length: " +
                              std::to_string(body.size()) + "\r\n\r\n" + body;
  for (int fd : fds) REQUIRE(send(fd, request.data(), request.size(), 0) == static_cast<ssize_t>(request.size()));
  int ok = 0, overloaded = 0;
  for (int fd : fds) {
    std::string response;
    pollfd q{fd, POLLIN, 0};
    while (poll(&q, 1, 10000) == 1) {
      const ssize_t n = recv(fd, buf, sizeof buf, 0);
      if (n <= 0) break;
      response.append(buf, static_cast<size_t>(n));
    }
    close(fd);
    if (response.rfind("HTTP/1.1 200", 0) == 0) ++ok;
    if (response.rfind("HTTP/1.1 503", 0) == 0) ++overloaded;
  }
  CHECK(ok + overloaded == kConnections);
  CHECK(ok >= 1);
  CHECK(wait_sessions_idle(server.port()) == 0);
  CHECK(server.running());
}

TEST_CASE("serve: SIGTERM finishes the request in flight, then exits 0") {
  ServerProcess server({"--delay-ms", "10"});
  std::atomic<int> status{0};
  std::string text;
  std::thread t([&] {
    httplib::Client cli("127.0.0.1", server.port());
    auto r = cli.Post("/v1/completions", json{{"prompt", "a"}, {"max_tokens", 50}}.dump(), "application/json");
    status = r ? r->status : -1;
  });
  for (int i = 0; i < 500 && metric_value(get_metrics(server.port()), "sqrtdk_sessions_in_use") != 1; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  CHECK(server.stop(SIGTERM) == 0);
  t.join();
  CHECK(status == 200);
  // No longer accepting.
  CHECK(sqrtdk::serve_test::connect_loopback(server.port()) < 0);
}

TEST_CASE("serve: continuous batching: a seeded completion is bit-identical alone and beside seven others") {
  // The probe's tokens and log-probabilities (floats printed exactly by nlohmann::json: shortest round-trip) must
  // not depend on what else the scheduler steps with it: other prompts of other lengths, decode rows beside its
  // prompt chunks and prompt chunks beside its decode rows, a prefix-cache entry or not.
  ServerProcess server({"--sessions", "8", "--queue", "16", "--prefill-chunk", "8", "--threads", "2", "--delay-ms", "3"});
  const json probe = {{"prompt", "The quick brown fox jumps over the lazy dog, twice."},
                      {"max_tokens", 40}, {"temperature", 0.9}, {"seed", 11}, {"logprobs", 2}};
  auto post = [&](const json& body) {
    httplib::Client cli("127.0.0.1", server.port());
    cli.set_read_timeout(60);
    auto res = cli.Post("/v1/completions", body.dump(), "application/json");
    REQUIRE(res);
    REQUIRE(res->status == 200);
    return json::parse(res->body)["choices"][0];
  };
  const json alone = post(probe);
  REQUIRE(alone["tokens"].size() > 0);
  std::vector<json> together(8);
  std::vector<std::thread> clients;
  for (int i = 0; i < 8; ++i)
    clients.emplace_back([&, i] {
      json body = probe;
      if (i != 3) {  // the others: other prompts, lengths, seeds and sampling
        body["prompt"] = std::string(static_cast<size_t>(3 + 9 * i), static_cast<char>('a' + i));
        body["seed"] = 100 + i;
        body["max_tokens"] = 10 + 7 * i;
      }
      together[static_cast<size_t>(i)] = post(body);
    });
  for (auto& t : clients) t.join();
  CHECK(together[3]["tokens"] == alone["tokens"]);
  CHECK(together[3]["text"] == alone["text"]);
  CHECK(together[3]["logprobs"]["token_logprobs"] == alone["logprobs"]["token_logprobs"]);
  CHECK(together[3]["logprobs"]["top_logprobs"] == alone["logprobs"]["top_logprobs"]);
  const std::string m = get_metrics(server.port());
  CHECK(metric_value(m, "sqrtdk_batch_size_sum") > metric_value(m, "sqrtdk_batch_size_count"));  // it did batch
}

}  // namespace serve_tests
