// OpenAI's wire format for sqrtdk-serve (see openai.h).
#include "tools/serve/openai.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace sqrtdk::serve {

namespace {

constexpr float kMinLogprob = -9999.0f;  // what OpenAI reports for a token of probability 0

float finite_logprob(double x) { return std::isfinite(x) ? static_cast<float>(x) : kMinLogprob; }

ordered_json byte_list(const std::string& s) {
  ordered_json bytes = ordered_json::array();
  for (char c : s) bytes.push_back(static_cast<unsigned char>(c));
  return bytes;
}

// Completions' logprobs for tokens [0, n) of a stream or response: tokens, token_logprobs, top_logprobs (one
// object per token: the top alternatives, most likely first, plus the chosen token if it is not among them, as
// OpenAI does) and text_offset (where each token's text starts in the completion text).
ordered_json completion_logprobs(std::span<const uint32_t> tokens, std::span<const TokenLogprobs> logprobs,
                                 std::span<const size_t> text_offsets, const TokenText& token_text) {
  ordered_json out = {{"tokens", ordered_json::array()},
                      {"token_logprobs", ordered_json::array()},
                      {"top_logprobs", ordered_json::array()},
                      {"text_offset", ordered_json::array()}};
  for (size_t i = 0; i < tokens.size(); ++i) {
    const std::string text = token_text(tokens[i]);
    out["tokens"].push_back(text);
    out["token_logprobs"].push_back(logprobs[i].logprob);
    ordered_json top = ordered_json::object();
    // Two ids with the same text (e.g. two halves of characters) share a key: the more likely one keeps it.
    for (const TopLogprob& t : logprobs[i].top) top.emplace(token_text(t.token), t.logprob);
    top.emplace(text, logprobs[i].logprob);
    out["top_logprobs"].push_back(std::move(top));
    out["text_offset"].push_back(text_offsets[i]);
  }
  return out;
}

// Chat's logprobs: {"content": [{token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}], "refusal": null}.
ordered_json chat_logprobs(std::span<const uint32_t> tokens, std::span<const TokenLogprobs> logprobs,
                           const TokenText& token_text) {
  ordered_json content = ordered_json::array();
  for (size_t i = 0; i < tokens.size(); ++i) {
    const std::string text = token_text(tokens[i]);
    ordered_json top = ordered_json::array();
    for (const TopLogprob& t : logprobs[i].top) {
      const std::string alt = token_text(t.token);
      top.push_back({{"token", alt}, {"logprob", t.logprob}, {"bytes", byte_list(alt)}});
    }
    content.push_back(
        {{"token", text}, {"logprob", logprobs[i].logprob}, {"bytes", byte_list(text)}, {"top_logprobs", top}});
  }
  return {{"content", content}, {"refusal", nullptr}};
}

const char* object_name(Endpoint endpoint, bool chunk) {
  if (endpoint == Endpoint::completions) return "text_completion";  // OpenAI's streamed chunks use it too
  return chunk ? "chat.completion.chunk" : "chat.completion";
}

}  // namespace

TokenLogprobs token_logprobs(std::span<const float> logits, uint32_t chosen, size_t n_top) {
  double max_logit = -INFINITY;
  for (float x : logits) max_logit = std::max<double>(max_logit, x);
  double sum = 0;
  for (float x : logits) sum += std::exp(static_cast<double>(x) - max_logit);
  const double log_normalizer = max_logit + std::log(sum);  // log-softmax(x) = x - log(sum(exp(x)))
  TokenLogprobs out;
  out.logprob = finite_logprob(logits[chosen] - log_normalizer);
  std::vector<uint32_t> ids(logits.size());
  std::iota(ids.begin(), ids.end(), 0u);
  n_top = std::min(n_top, ids.size());
  std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(n_top), ids.end(),
                    [&](uint32_t a, uint32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
  for (size_t i = 0; i < n_top; ++i) out.top.push_back({ids[i], finite_logprob(logits[ids[i]] - log_normalizer)});
  return out;
}

const char* finish_reason(StopReason reason) {
  switch (reason) {
    case StopReason::eos:
    case StopReason::stop_token:
    case StopReason::stop_string: return "stop";
    case StopReason::max_tokens:
    case StopReason::context_full: return "length";
    case StopReason::callback: return "cancelled";
  }
  return "stop";
}

ordered_json usage_json(size_t prompt_tokens, size_t completion_tokens) {
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens}};
}

ordered_json completion_response(const ResponseInfo& info, const CompletionRequest& request,
                                 const CompletionResult& result, size_t prompt_tokens, const TokenText& token_text) {
  ordered_json choice = {{"index", 0}};
  if (request.endpoint == Endpoint::completions) {
    choice["text"] = result.text;
    if (request.logprobs) {
      std::vector<size_t> starts(result.tokens.size(), 0);
      for (size_t i = 1; i < starts.size(); ++i) starts[i] = result.text_ends[i - 1];
      choice["logprobs"] = completion_logprobs(result.tokens, result.logprobs, starts, token_text);
    } else {
      choice["logprobs"] = nullptr;
    }
  } else {
    choice["message"] = {{"role", "assistant"}, {"content", result.text}};
    choice["logprobs"] = request.logprobs ? chat_logprobs(result.tokens, result.logprobs, token_text) : nullptr;
  }
  choice["finish_reason"] = result.finish_reason;
  choice["tokens"] = result.tokens;  // sqrtdk's extension: the ids, which carry the exact bytes
  return {{"id", info.id},
          {"object", object_name(request.endpoint, false)},
          {"created", info.created},
          {"model", info.model},
          {"choices", ordered_json::array({choice})},
          {"usage", usage_json(prompt_tokens, result.tokens.size())}};
}

StreamEncoder::StreamEncoder(ResponseInfo info, const CompletionRequest& request, TokenText token_text)
    : info_(std::move(info)),
      endpoint_(request.endpoint),
      logprobs_(request.logprobs),
      include_usage_(request.include_usage),
      token_text_(std::move(token_text)) {}

ordered_json StreamEncoder::chunk(ordered_json choice) const {
  ordered_json c = {{"id", info_.id},
                    {"object", object_name(endpoint_, true)},
                    {"created", info_.created},
                    {"model", info_.model},
                    {"choices", ordered_json::array({std::move(choice)})}};
  if (include_usage_) c["usage"] = nullptr;
  return c;
}

std::string StreamEncoder::start() {
  if (endpoint_ == Endpoint::completions) return "";
  return sse_event(chunk({{"index", 0},
                          {"delta", {{"role", "assistant"}, {"content", ""}}},
                          {"logprobs", nullptr},
                          {"finish_reason", nullptr}}));
}

std::string StreamEncoder::token(const TokenEvent& event) {
  const uint32_t id = event.token;
  ordered_json logprobs = nullptr;
  if (logprobs_ && event.logprobs) {
    const size_t offset = text_offset_;
    logprobs = endpoint_ == Endpoint::completions
                   ? completion_logprobs({&id, 1}, {event.logprobs, 1}, {&offset, 1}, token_text_)
                   : chat_logprobs({&id, 1}, {event.logprobs, 1}, token_text_);
  }
  text_offset_ += event.text.size();
  ordered_json choice = {{"index", 0}};
  if (endpoint_ == Endpoint::completions)
    choice["text"] = event.text;
  else
    choice["delta"] = {{"content", event.text}};
  choice["logprobs"] = std::move(logprobs);
  choice["finish_reason"] = nullptr;
  choice["tokens"] = {id};
  return sse_event(chunk(std::move(choice)));
}

std::string StreamEncoder::finish(const std::string& finish_reason, size_t prompt_tokens, size_t completion_tokens) {
  ordered_json choice = {{"index", 0}};
  if (endpoint_ == Endpoint::completions)
    choice["text"] = "";
  else
    choice["delta"] = ordered_json::object();
  choice["logprobs"] = nullptr;
  choice["finish_reason"] = finish_reason;
  std::string events = sse_event(chunk(std::move(choice)));
  if (include_usage_) {
    ordered_json last = chunk(nullptr);
    last["choices"] = ordered_json::array();
    last["usage"] = usage_json(prompt_tokens, completion_tokens);
    events += sse_event(last);
  }
  return events + "data: [DONE]\n\n";
}

std::string StreamEncoder::fail(const std::string& message) {
  return "event: error\n" + sse_event(error_json(500, message)) + "data: [DONE]\n\n";
}

std::string sse_event(const ordered_json& data) { return "data: " + dump(data) + "\n\n"; }

ordered_json model_json(const std::string& id, int64_t created) {
  return {{"id", id}, {"object", "model"}, {"created", created}, {"owned_by", "sqrtdk"}};
}

ordered_json models_list_json(const std::string& id, int64_t created) {
  return {{"object", "list"}, {"data", ordered_json::array({model_json(id, created)})}};
}

ordered_json error_json(int status, const std::string& message, const std::string& param, const std::string& code) {
  return {{"error",
           {{"message", message},
            {"type", status >= 500 ? "server_error" : "invalid_request_error"},
            {"param", param.empty() ? ordered_json(nullptr) : ordered_json(param)},
            {"code", code.empty() ? ordered_json(nullptr) : ordered_json(code)}}}};
}

std::string dump(const ordered_json& j) { return j.dump(-1, ' ', false, ordered_json::error_handler_t::replace); }

}  // namespace sqrtdk::serve
