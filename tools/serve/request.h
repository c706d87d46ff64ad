// Request parsing and validation for sqrtdk-serve's POST /v1/completions and /v1/chat/completions: JSON text in, a
// checked CompletionRequest out (what the executor runs: prompt ids, sampling, stop rules, what to report), or a
// RequestError carrying the HTTP status, a message naming the field, and OpenAI's `param` and `code`.
//
// The fields are OpenAI's; every one is either honoured, accepted at the value that changes nothing (e.g.
// presence_penalty 0, echo false), or refused with 400 naming it: an unknown top-level field is a 400 too, never
// ignored. The full list, with what each does here, is in the README's sqrtdk-serve section.
//
// Pure functions with no I/O, so tests and fuzz targets call them directly on hostile bodies.
#pragma once

#include <sqrtdk/format.h>
#include <sqrtdk/tokenizer.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace sqrtdk::serve {

// A rejected request: `status` is the HTTP status to answer with, what() the message for the client, param() the
// request field at fault ("" if none) and code() OpenAI's error code ("" for null; e.g. "model_not_found").
class RequestError : public std::runtime_error {
 public:
  RequestError(int status, const std::string& message, std::string param = "", std::string code = "")
      : std::runtime_error(message), status_(status), param_(std::move(param)), code_(std::move(code)) {}
  int status() const { return status_; }
  const std::string& param() const { return param_; }
  const std::string& code() const { return code_; }

 private:
  int status_;
  std::string param_;
  std::string code_;
};

enum class Endpoint { completions, chat_completions };

struct CompletionRequest {
  Endpoint endpoint = Endpoint::completions;
  std::vector<uint32_t> prompt;         // token ids to prefill (text prompts get the tokenizer's BOS first)
  size_t max_tokens = 16;               // new tokens at most, 1..context - prompt length
  float temperature = 1.0f;             // 0 = greedy
  float top_p = 1.0f;                   // (0, 1]
  size_t top_k = 0;                     // 0 = all
  uint64_t seed = 0;                    // same seed, same tokens
  std::vector<std::string> stop_texts;  // generation stops when the text ends with one (it is not returned)
  std::vector<uint32_t> stop_tokens;    // generation stops at one of these ids (not returned); EOS always stops
  bool stream = false;                  // Server-Sent Events, one per token
  bool include_usage = false;           // stream_options.include_usage: a last chunk with usage and no choices
  bool logprobs = false;                // report each token's log-probability
  size_t top_logprobs = 0;              // ... and the most likely alternatives at each step
};

// Limits the parser enforces beside the model's own.
struct RequestLimits {
  size_t max_context = 0;      // the sessions' context length (prompt + new tokens must fit)
  size_t max_stop = 16;        // stop entries at most
  size_t max_stop_bytes = 256;  // bytes per stop string at most
  size_t max_messages = 256;   // chat messages at most
};

// The model a request runs on.
struct ServedModel {
  const ModelConfig& config;
  const Tokenizer* tokenizer = nullptr;  // the model's (may be null): encodes text; without one only the
                                         // byte-level config can take text, and chat needs one with a template
  std::string id;                        // the name clients give as `model` (404 model_not_found for another);
                                         // empty: any name is accepted
};

// Parses and validates a body for `endpoint`. Throws RequestError (400, or 404 for another model) naming the field.
CompletionRequest parse_request(Endpoint endpoint, std::string_view body, const ServedModel& model,
                                const RequestLimits& limits);

// parse_request(Endpoint::completions, ...) for a model whose name is not checked.
CompletionRequest parse_completion_request(std::string_view body, const ModelConfig& config,
                                           const RequestLimits& limits, const Tokenizer* tokenizer = nullptr);

}  // namespace sqrtdk::serve
