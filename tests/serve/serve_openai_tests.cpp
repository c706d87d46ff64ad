// sqrtdk-serve's OpenAI layer without sockets: request parsing for both endpoints (every parameter's 400 names its
// `param`), the response and stream-chunk shapes (openai.h), logprobs, finish reasons, models and errors.
#include "tools/serve/openai.h"
#include "tools/serve/request.h"

#include <sqrtdk/chat.h>
#include <sqrtdk/model.h>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <random>
#include <string>
#include <vector>

// Named after the file: the sanitizer builds compile test files together (a unity build), and this file's
// helpers share their names with another test file's.
namespace serve_openai_tests {

namespace {

using nlohmann::json;
using namespace sqrtdk::serve;

sqrtdk::ModelConfig byte_config() {
  sqrtdk::ModelConfig c;
  c.n_vocab = 258;
  c.max_seq = 512;
  c.tokenizer = sqrtdk::TokenizerKind::byte_level;
  c.bos_id = 256;
  c.eos_id = 257;
  return c;
}

RequestLimits limits_of(size_t context) {
  RequestLimits l;
  l.max_context = context;
  return l;
}

CompletionRequest parse_bytes(Endpoint endpoint, const json& body) {
  const sqrtdk::ModelConfig config = byte_config();
  return parse_request(endpoint, body.dump(), ServedModel{config, nullptr, "toy"}, limits_of(512));
}

// The RequestError a body raises: status and param ("" if it parses: then status 0).
struct Refusal {
  int status = 0;
  std::string param;
  std::string code;
  std::string message;
};
Refusal refusal(Endpoint endpoint, const json& body) {
  try {
    parse_bytes(endpoint, body);
  } catch (const RequestError& e) {
    return {e.status(), e.param(), e.code(), e.what()};
  }
  return {};
}

// The chat model of tests/serve/CMakeLists.txt (Llama 2's tokenizer and template), loaded once.
std::shared_ptr<const sqrtdk::Model> chat_model() {
  static const auto model = sqrtdk::Model::load(SQRTDK_SERVE_CHAT_MODEL);
  return model;
}

std::string token_text(uint32_t token) { return std::string("t").append(std::to_string(token)); }

// The JSON of each "data: " event of an SSE text ("[DONE]" as a string).
std::vector<json> events_of(const std::string& sse) {
  std::vector<json> out;
  size_t pos = 0;
  while ((pos = sse.find("data: ", pos)) != std::string::npos) {
    const size_t end = sse.find("\n\n", pos);
    REQUIRE(end != std::string::npos);
    const std::string data = sse.substr(pos + 6, end - pos - 6);
    out.push_back(data == "[DONE]" ? json("[DONE]") : json::parse(data));
    pos = end;
  }
  return out;
}

}  // namespace

TEST_CASE("serve openai: completions parameters are honoured") {
  const CompletionRequest r = parse_bytes(Endpoint::completions,
                                          {{"model", "toy"}, {"prompt", "ab"}, {"max_tokens", 5}, {"temperature", 0.5},
                                           {"top_p", 0.5}, {"top_k", 3}, {"seed", 9}, {"stop", {"x", "yz"}},
                                           {"stream", true}, {"stream_options", {{"include_usage", true}}},
                                           {"logprobs", 3}, {"n", 1}, {"user", "u"}, {"echo", false}, {"suffix", ""},
                                           {"presence_penalty", 0}, {"frequency_penalty", 0.0},
                                           {"logit_bias", json::object()}, {"best_of", 1}});
  CHECK(r.endpoint == Endpoint::completions);
  CHECK(r.prompt == std::vector<uint32_t>{256, 'a', 'b'});
  CHECK(r.max_tokens == 5);
  CHECK(r.temperature == 0.5f);
  CHECK(r.top_p == 0.5f);
  CHECK(r.top_k == 3);
  CHECK(r.seed == 9);
  CHECK(r.stop_texts == std::vector<std::string>{"x", "yz"});
  CHECK(r.stream);
  CHECK(r.include_usage);
  CHECK(r.logprobs);
  CHECK(r.top_logprobs == 3);
  // Prompt forms: a list of one string, token ids, a list of one list of ids; null fields are unset.
  CHECK(parse_bytes(Endpoint::completions, {{"prompt", {"ab"}}}).prompt == std::vector<uint32_t>{256, 'a', 'b'});
  CHECK(parse_bytes(Endpoint::completions, {{"prompt", {1, 2, 3}}}).prompt == std::vector<uint32_t>{1, 2, 3});
  CHECK(parse_bytes(Endpoint::completions, {{"prompt", {{4, 5}}}}).prompt == std::vector<uint32_t>{4, 5});
  const CompletionRequest defaults =
      parse_bytes(Endpoint::completions, {{"prompt", "a"}, {"model", nullptr}, {"logprobs", nullptr}, {"n", nullptr}});
  CHECK(defaults.max_tokens == 16);
  CHECK_FALSE(defaults.logprobs);
  CHECK_FALSE(defaults.include_usage);
  CHECK(parse_bytes(Endpoint::completions, {{"prompt", "a"}, {"logprobs", 0}}).logprobs);
}

TEST_CASE("serve openai: each refused parameter is a 400 naming it") {
  struct Case {
    json body;
    const char* param;
  };
  const json p = "a";
  const Case cases[] = {
      {{{"prompt", p}, {"max_tokens", -1}}, "max_tokens"},
      {{{"prompt", p}, {"max_tokens", 0}}, "max_tokens"},
      {{{"prompt", p}, {"max_tokens", 600}}, "max_tokens"},
      {{{"prompt", p}, {"temperature", -1}}, "temperature"},
      {{{"prompt", p}, {"top_p", 0}}, "top_p"},
      {{{"prompt", p}, {"top_k", -2}}, "top_k"},
      {{{"prompt", p}, {"seed", "x"}}, "seed"},
      {{{"prompt", p}, {"stop", {""}}}, "stop"},
      {{{"prompt", p}, {"stop", {{"x", 1}}}}, "stop"},
      {{{"prompt", p}, {"stream", "yes"}}, "stream"},
      {{{"prompt", p}, {"stream_options", {{"include_usage", true}}}}, "stream_options"},  // without stream
      {{{"prompt", p}, {"stream", true}, {"stream_options", {{"other", 1}}}}, "stream_options"},
      {{{"prompt", p}, {"n", 2}}, "n"},
      {{{"prompt", p}, {"best_of", 3}}, "best_of"},
      {{{"prompt", p}, {"logprobs", 6}}, "logprobs"},
      {{{"prompt", p}, {"logprobs", true}}, "logprobs"},
      {{{"prompt", p}, {"echo", true}}, "echo"},
      {{{"prompt", p}, {"suffix", "end"}}, "suffix"},
      {{{"prompt", p}, {"presence_penalty", 0.5}}, "presence_penalty"},
      {{{"prompt", p}, {"frequency_penalty", -1}}, "frequency_penalty"},
      {{{"prompt", p}, {"logit_bias", {{"50", 1}}}}, "logit_bias"},
      {{{"prompt", p}, {"user", 5}}, "user"},
      {{{"prompt", p}, {"model", 5}}, "model"},
      {{{"prompt", p}, {"unknown_field", 1}}, "unknown_field"},
      {{{"prompt", p}, {"tools", json::array()}}, "tools"},  // a chat field
      {{{"prompt", {"a", "b"}}}, "prompt"},
      {{{"prompt", json::array()}}, "prompt"},
      {{{"prompt", {true}}}, "prompt"},
      {{{"prompt", {300}}}, "prompt"},
  };
  for (const Case& c : cases) {
    const Refusal r = refusal(Endpoint::completions, c.body);
    CAPTURE(c.body.dump());
    CAPTURE(r.message);
    CHECK(r.status == 400);
    CHECK(r.param == c.param);
    CHECK(r.code == "");
  }
  const Refusal unknown = refusal(Endpoint::completions, {{"prompt", "a"}, {"frobnicate", 1}});
  CHECK(unknown.message.find("unknown field 'frobnicate'") != std::string::npos);
  // Another model is a 404 with OpenAI's code.
  const Refusal other = refusal(Endpoint::completions, {{"prompt", "a"}, {"model", "gpt-4"}});
  CHECK(other.status == 404);
  CHECK(other.param == "model");
  CHECK(other.code == "model_not_found");
}

TEST_CASE("serve openai: chat parameters, and chat refused for a model without a template") {
  const json hello = {{{"role", "user"}, {"content", "a"}}};
  const Refusal no_template = refusal(Endpoint::chat_completions, {{"messages", hello}});
  CHECK(no_template.status == 400);
  CHECK(no_template.param == "messages");
  CHECK(no_template.message.find("cannot render messages") != std::string::npos);

  const auto model = chat_model();
  const sqrtdk::Tokenizer& tok = model->require_tokenizer();
  const ServedModel served{model->config(), &tok, "serve-chat"};
  const RequestLimits limits = limits_of(model->config().max_seq);
  auto parse_chat = [&](const json& body) {
    return parse_request(Endpoint::chat_completions, body.dump(), served, limits);
  };
  auto chat_refusal = [&](const json& body) {
    try {
      parse_chat(body);
    } catch (const RequestError& e) {
      return Refusal{e.status(), e.param(), e.code(), e.what()};
    }
    return Refusal{};
  };
  const json messages = {{{"role", "system"}, {"content", "Be brief."}},
                         {{"role", "user"}, {"content", {{{"type", "text"}, {"text", "Hi"}}}}}};
  const CompletionRequest r =
      parse_chat({{"model", "serve-chat"}, {"messages", messages}, {"max_completion_tokens", 7}, {"logprobs", true},
                  {"top_logprobs", 4}, {"response_format", {{"type", "text"}}}, {"tools", json::array()},
                  {"tool_choice", "none"}, {"seed", 2}});
  CHECK(r.endpoint == Endpoint::chat_completions);
  const std::vector<sqrtdk::ChatMessage> expected_messages = {{"system", "Be brief."}, {"user", "Hi"}};
  CHECK(r.prompt == tok.encode(sqrtdk::render_chat(tok, expected_messages, true), /*add_special=*/false));
  CHECK(r.max_tokens == 7);
  CHECK(r.logprobs);
  CHECK(r.top_logprobs == 4);
  // By default a chat runs to the end of its turn: the room left in the context.
  CHECK(parse_chat({{"messages", messages}}).max_tokens == limits.max_context - r.prompt.size());
  // "developer" is the system role.
  CHECK(parse_chat({{"messages", {{{"role", "developer"}, {"content", "Be brief."}},
                                  {{"role", "user"}, {"content", "Hi"}}}}})
            .prompt == r.prompt);

  struct Case {
    json body;
    const char* param;
  };
  const Case cases[] = {
      {json::object(), "messages"},
      {{{"messages", json::array()}}, "messages"},
      {{{"messages", {{{"role", "tool"}, {"content", "x"}}}}}, "messages"},
      {{{"messages", {{{"role", "user"}, {"content", "x"}, {"name", "bob"}}}}}, "messages"},
      {{{"messages", {{{"role", "user"}, {"content", {{{"type", "image_url"}, {"image_url", "u"}}}}}}}}, "messages"},
      {{{"messages", {{{"role", "user"}, {"content", "a"}}, {{"role", "user"}, {"content", "b"}}}}}, "messages"},
      {{{"messages", messages}, {"max_tokens", 3}, {"max_completion_tokens", 3}}, "max_tokens"},
      {{{"messages", messages}, {"max_completion_tokens", 0}}, "max_completion_tokens"},
      {{{"messages", messages}, {"top_logprobs", 2}}, "top_logprobs"},  // without logprobs
      {{{"messages", messages}, {"logprobs", true}, {"top_logprobs", 21}}, "top_logprobs"},
      {{{"messages", messages}, {"logprobs", 2}}, "logprobs"},
      {{{"messages", messages}, {"response_format", {{"type", "json_object"}}}}, "response_format"},
      {{{"messages", messages}, {"tools", {{{"type", "function"}}}}}, "tools"},
      {{{"messages", messages}, {"tool_choice", "auto"}}, "tool_choice"},
      {{{"messages", messages}, {"n", 3}}, "n"},
      {{{"messages", messages}, {"prompt", "x"}}, "prompt"},  // a completions field
      {{{"messages", messages}, {"echo", false}}, "echo"},
  };
  for (const Case& c : cases) {
    const Refusal e = chat_refusal(c.body);
    CAPTURE(c.body.dump());
    CAPTURE(e.message);
    CHECK(e.status == 400);
    CHECK(e.param == c.param);
  }
  CHECK(chat_refusal({{"messages", messages}, {"model", "other"}}).code == "model_not_found");
}

TEST_CASE("serve openai: token_logprobs is the log-softmax of the logits, top entries sorted") {
  std::mt19937 rng(3);
  std::normal_distribution<float> dist(0.0f, 3.0f);
  std::vector<float> logits(100);
  for (float& x : logits) x = dist(rng);
  logits[42] = logits[7];  // a tie: the lower id comes first
  double max_logit = -INFINITY;
  for (float x : logits) max_logit = std::max<double>(max_logit, x);
  double sum = 0;
  for (float x : logits) sum += std::exp(x - max_logit);
  const double log_normalizer = max_logit + std::log(sum);
  for (uint32_t chosen : {0u, 7u, 42u, 99u}) {
    const TokenLogprobs lp = token_logprobs(logits, chosen, 5);
    CHECK(lp.logprob == doctest::Approx(logits[chosen] - log_normalizer).epsilon(1e-6));
    CHECK(lp.logprob <= 0.0f);
    REQUIRE(lp.top.size() == 5);
    CHECK(lp.top[0].logprob == doctest::Approx(max_logit - log_normalizer).epsilon(1e-6));
    double top_mass = 0;
    for (size_t i = 0; i < lp.top.size(); ++i) {
      CHECK(lp.top[i].logprob <= 0.0f);
      CHECK(lp.top[i].logprob == doctest::Approx(logits[lp.top[i].token] - log_normalizer).epsilon(1e-6));
      if (i > 0) CHECK(lp.top[i - 1].logprob >= lp.top[i].logprob);
      top_mass += std::exp(lp.top[i].logprob);
    }
    CHECK(top_mass <= 1.0 + 1e-6);
  }
  double total = 0;
  const TokenLogprobs all = token_logprobs(logits, 0, logits.size());
  for (const TopLogprob& t : all.top) total += std::exp(t.logprob);
  CHECK(total == doctest::Approx(1.0).epsilon(1e-5));
  std::vector<float> tied = {1.0f, 2.0f, 2.0f};
  const TokenLogprobs t = token_logprobs(tied, 0, 2);
  CHECK(t.top[0].token == 1);
  CHECK(t.top[1].token == 2);
  // A logit of -Inf has probability 0: OpenAI's -9999, since JSON has no infinities.
  std::vector<float> masked = {0.0f, -INFINITY};
  CHECK(token_logprobs(masked, 1, 0).logprob == -9999.0f);
  CHECK(token_logprobs(masked, 0, 0).logprob == 0.0f);
}

TEST_CASE("serve openai: finish_reason maps the engine's stop reasons") {
  using sqrtdk::StopReason;
  CHECK(std::string(finish_reason(StopReason::eos)) == "stop");
  CHECK(std::string(finish_reason(StopReason::stop_token)) == "stop");
  CHECK(std::string(finish_reason(StopReason::stop_string)) == "stop");
  CHECK(std::string(finish_reason(StopReason::max_tokens)) == "length");
  CHECK(std::string(finish_reason(StopReason::context_full)) == "length");
}

TEST_CASE("serve openai: completion and chat responses have OpenAI's shapes") {
  CompletionResult result;
  result.tokens = {5, 6, 7};
  result.text = "abcd";
  result.text_ends = {1, 1, 4};  // the second token ends inside a character: its text comes with the third
  result.logprobs = {{-0.5f, {{5, -0.5f}, {9, -1.5f}}}, {-2.0f, {{8, -0.1f}, {9, -1.0f}}}, {-0.1f, {{7, -0.1f}}}};
  result.finish_reason = "length";
  const ResponseInfo info{"cmpl-1", 1700000000, "toy"};

  CompletionRequest request;
  request.logprobs = true;
  request.top_logprobs = 2;
  const json c = json::parse(dump(completion_response(info, request, result, 4, token_text)));
  CHECK(c["id"] == "cmpl-1");
  CHECK(c["object"] == "text_completion");
  CHECK(c["created"] == 1700000000);
  CHECK(c["model"] == "toy");
  REQUIRE(c["choices"].size() == 1);
  const json& choice = c["choices"][0];
  CHECK(choice["index"] == 0);
  CHECK(choice["text"] == "abcd");
  CHECK(choice["finish_reason"] == "length");
  CHECK(choice["tokens"] == json({5, 6, 7}));
  CHECK(c["usage"] == json({{"prompt_tokens", 4}, {"completion_tokens", 3}, {"total_tokens", 7}}));
  const json& lp = choice["logprobs"];
  CHECK(lp["tokens"] == json({"t5", "t6", "t7"}));
  CHECK(lp["token_logprobs"] == json({-0.5, -2.0, -0.1f}));
  CHECK(lp["text_offset"] == json({0, 1, 1}));
  // top_logprobs: the alternatives most likely first, and the chosen token when it is not among them.
  const std::string top1 = dump(completion_response(info, request, result, 4, token_text)["choices"][0]["logprobs"]
                                                   ["top_logprobs"][1]);
  CHECK(top1 == R"({"t8":-0.10000000149011612,"t9":-1.0,"t6":-2.0})");

  request.logprobs = false;
  CHECK(json::parse(dump(completion_response(info, request, result, 4, token_text)))["choices"][0]["logprobs"]
            .is_null());

  request.endpoint = Endpoint::chat_completions;
  request.logprobs = true;
  const json chat = json::parse(dump(completion_response({"chatcmpl-1", 1, "toy"}, request, result, 4, token_text)));
  CHECK(chat["object"] == "chat.completion");
  CHECK(chat["choices"][0]["message"] == json({{"role", "assistant"}, {"content", "abcd"}}));
  const json& content = chat["choices"][0]["logprobs"]["content"];
  REQUIRE(content.size() == 3);
  CHECK(content[0]["token"] == "t5");
  CHECK(content[0]["bytes"] == json({'t', '5'}));
  CHECK(content[1]["logprob"] == -2.0);
  CHECK(content[1]["top_logprobs"][0] == json({{"token", "t8"}, {"logprob", -0.1f}, {"bytes", {'t', '8'}}}));
  CHECK(chat["choices"][0]["logprobs"]["refusal"].is_null());
}

TEST_CASE("serve openai: stream chunks, the finish chunk, usage and DONE") {
  CompletionRequest request;
  request.stream = true;
  StreamEncoder completions({"cmpl-2", 5, "toy"}, request, token_text);
  CHECK(completions.start() == "");
  const TokenLogprobs lp{-0.25f, {}};
  // (One statement each: the operands of + are evaluated in no set order.)
  std::string sse = completions.token({3, "ab", nullptr});
  sse += completions.token({4, "c", &lp});
  sse += completions.finish("stop", 2, 2);
  std::vector<json> ev = events_of(sse);
  REQUIRE(ev.size() == 4);
  CHECK(ev[0]["object"] == "text_completion");
  CHECK(ev[0]["id"] == "cmpl-2");
  CHECK(ev[0]["choices"][0]["text"] == "ab");
  CHECK(ev[0]["choices"][0]["finish_reason"].is_null());
  CHECK(ev[0]["choices"][0]["tokens"] == json({3}));
  CHECK(ev[1]["choices"][0]["logprobs"].is_null());  // not asked for
  CHECK(ev[2]["choices"][0]["text"] == "");
  CHECK(ev[2]["choices"][0]["finish_reason"] == "stop");
  CHECK_FALSE(ev[2].contains("usage"));
  CHECK(ev[3] == "[DONE]");

  request.logprobs = true;
  request.include_usage = true;
  StreamEncoder with_usage({"cmpl-3", 5, "toy"}, request, token_text);
  sse = with_usage.token({3, "ab", &lp});
  sse += with_usage.token({4, "c", &lp});
  sse += with_usage.finish("length", 2, 2);
  ev = events_of(sse);
  REQUIRE(ev.size() == 5);
  CHECK(ev[0]["usage"].is_null());
  CHECK(ev[1]["choices"][0]["logprobs"]["text_offset"] == json({2}));  // after the first chunk's "ab"
  CHECK(ev[1]["choices"][0]["logprobs"]["token_logprobs"] == json({-0.25}));
  CHECK(ev[3]["choices"] == json::array());
  CHECK(ev[3]["usage"] == json({{"prompt_tokens", 2}, {"completion_tokens", 2}, {"total_tokens", 4}}));
  CHECK(ev[4] == "[DONE]");

  request = {};
  request.endpoint = Endpoint::chat_completions;
  request.stream = true;
  StreamEncoder chat({"chatcmpl-4", 5, "toy"}, request, token_text);
  sse = chat.start();
  sse += chat.token({3, "Hi", nullptr});
  sse += chat.finish("stop", 2, 1);
  ev = events_of(sse);
  REQUIRE(ev.size() == 4);
  for (size_t i = 0; i < 3; ++i) CHECK(ev[i]["object"] == "chat.completion.chunk");
  CHECK(ev[0]["choices"][0]["delta"] == json({{"role", "assistant"}, {"content", ""}}));
  CHECK(ev[1]["choices"][0]["delta"] == json({{"content", "Hi"}}));
  CHECK(ev[2]["choices"][0]["delta"] == json::object());
  CHECK(ev[2]["choices"][0]["finish_reason"] == "stop");
  CHECK(ev[3] == "[DONE]");

  const std::string failed = chat.fail("out of memory");
  CHECK(failed.rfind("event: error\ndata: ", 0) == 0);
  ev = events_of(failed);
  CHECK(ev[0]["error"]["message"] == "out of memory");
  CHECK(ev[0]["error"]["type"] == "server_error");
  CHECK(ev[1] == "[DONE]");
}

TEST_CASE("serve openai: models and errors") {
  const json list = json::parse(dump(models_list_json("toy", 7)));
  CHECK(list == json({{"object", "list"},
                      {"data", {{{"id", "toy"}, {"object", "model"}, {"created", 7}, {"owned_by", "sqrtdk"}}}}}));
  const json e400 = json::parse(dump(error_json(400, "bad", "max_tokens")));
  CHECK(e400 == json({{"error",
                       {{"message", "bad"},
                        {"type", "invalid_request_error"},
                        {"param", "max_tokens"},
                        {"code", nullptr}}}}));
  const json e404 = json::parse(dump(error_json(404, "no", "model", "model_not_found")));
  CHECK(e404["error"]["code"] == "model_not_found");
  const json e503 = json::parse(dump(error_json(503, "busy", "", "overloaded")));
  CHECK(e503["error"]["type"] == "server_error");
  CHECK(e503["error"]["param"].is_null());
  // A token's partial UTF-8 is replaced, never invalid JSON text.
  CHECK(dump(ordered_json("\xe2\x82")) == "\"\xef\xbf\xbd\"");
}

}  // namespace serve_openai_tests
