// OpenAI's wire format for sqrtdk-serve: the JSON of completions, chat completions, their stream chunks, models and
// errors, as pure functions of a parsed request (request.h) and what the executor reports (TokenEvent per token,
// CompletionResult at the end). No sockets, no engine: the server frames these, the tests read them directly.
//
// The executor behind the events can change (a session pool today, a batching scheduler later) without touching
// anything here; what it owes this layer is the TokenEvent/CompletionResult contract below.
#pragma once

#include "tools/serve/request.h"

#include <sqrtdk/generate.h>

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace sqrtdk::serve {

using ordered_json = nlohmann::ordered_json;  // keeps OpenAI's field order, and top_logprobs most likely first

// ---- what the executor reports ----

struct TopLogprob {
  uint32_t token = 0;
  float logprob = 0;
};

// One step's log-probabilities under the model: log-softmax of the raw logits (before temperature, top-k and
// top-p, as OpenAI reports them). -Inf (a logit of -Inf) is reported as -9999, as OpenAI does, since JSON has no
// infinities.
struct TokenLogprobs {
  float logprob = 0;            // the chosen token's
  std::vector<TopLogprob> top;  // the n_top most likely, most likely first (ties: lower id first)
};
TokenLogprobs token_logprobs(std::span<const float> logits, uint32_t chosen, size_t n_top);

// OpenAI's finish_reason for the engine's stop reasons: "stop" for eos, stop_token and stop_string; "length" for
// max_tokens and context_full; "cancelled" for callback (the client left; no one reads it).
const char* finish_reason(StopReason reason);

// One generated token, reported once it is certain not to be part of a stop string.
struct TokenEvent {
  uint32_t token = 0;
  std::string_view text;                    // the text it completes (whole UTF-8; may be empty)
  const TokenLogprobs* logprobs = nullptr;  // null unless the request asked for logprobs
};

struct CompletionResult {
  std::vector<uint32_t> tokens;
  std::string text;
  std::vector<size_t> text_ends;        // per token: where its text ends in `text`
  std::vector<TokenLogprobs> logprobs;  // per token, when the request asked
  // finish_reason() of the engine's reason, or "time_limit" (sqrtdk's: --request-timeout stopped it).
  std::string finish_reason = "length";
};

// The bytes of one token's piece (for logprobs' `tokens`, `token` and `bytes`; may be part of a UTF-8 character).
using TokenText = std::function<std::string(uint32_t token)>;

// What every response and chunk of one request carries.
struct ResponseInfo {
  std::string id;       // "cmpl-..." or "chatcmpl-..."
  int64_t created = 0;  // Unix seconds
  std::string model;    // the served model's id
};

// ---- responses ----

ordered_json usage_json(size_t prompt_tokens, size_t completion_tokens);

// The whole (non-streamed) response: "text_completion" or "chat.completion" by request.endpoint.
ordered_json completion_response(const ResponseInfo& info, const CompletionRequest& request,
                                 const CompletionResult& result, size_t prompt_tokens, const TokenText& token_text);

// A stream's Server-Sent Events, in order: start(), token() per event, then finish() (or fail()).
// Completions: one "text_completion" chunk per token, then one with the finish_reason. Chat: a first chunk whose
// delta carries the role, one per token with delta.content, then one with an empty delta and the finish_reason.
// With include_usage, every chunk has "usage": null and a last chunk carries the usage with no choices. Then
// "data: [DONE]".
class StreamEncoder {
 public:
  StreamEncoder(ResponseInfo info, const CompletionRequest& request, TokenText token_text);
  std::string start();
  std::string token(const TokenEvent& event);
  std::string finish(const std::string& finish_reason, size_t prompt_tokens, size_t completion_tokens);
  // The engine failed mid-stream: an "error" event (the OpenAI SDKs throw it), then [DONE].
  std::string fail(const std::string& message);

 private:
  ordered_json chunk(ordered_json choice) const;
  ResponseInfo info_;
  Endpoint endpoint_;
  bool logprobs_;
  bool include_usage_;
  TokenText token_text_;
  size_t text_offset_ = 0;  // bytes of text sent so far (completions' logprobs.text_offset)
};

std::string sse_event(const ordered_json& data);  // "data: {...}\n\n"

// ---- models and errors ----

ordered_json model_json(const std::string& id, int64_t created);
ordered_json models_list_json(const std::string& id, int64_t created);

// {"error": {"message", "type", "param", "code"}}: type "invalid_request_error" for 4xx, "server_error" for 5xx;
// param and code null when empty.
ordered_json error_json(int status, const std::string& message, const std::string& param = "",
                        const std::string& code = "");

// JSON text as the server sends it: invalid UTF-8 (a token's partial character) replaced by U+FFFD.
std::string dump(const ordered_json& j);

}  // namespace sqrtdk::serve
