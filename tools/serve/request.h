// Request parsing and validation for sqrtdk-serve's POST /v1/completions: JSON text in, a checked
// CompletionRequest out, or a RequestError carrying the HTTP status (400) and a message naming the field.
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

// A rejected request: `status` is the HTTP status to answer with, what() the message for the client.
class RequestError : public std::runtime_error {
 public:
  RequestError(int status, const std::string& message) : std::runtime_error(message), status_(status) {}
  int status() const { return status_; }

 private:
  int status_;
};

struct CompletionRequest {
  std::vector<uint32_t> prompt;         // token ids to prefill (byte-level prompts get the model's BOS first)
  size_t max_tokens = 16;               // new tokens at most, 1..context - prompt length
  float temperature = 1.0f;             // 0 = greedy
  float top_p = 1.0f;                   // (0, 1]
  size_t top_k = 0;                     // 0 = all
  uint64_t seed = 0;                    // same seed, same tokens
  std::vector<std::string> stop_texts;  // generation stops when the text ends with one (it is not returned)
  std::vector<uint32_t> stop_tokens;    // generation stops at one of these ids (not returned); EOS always stops
  bool stream = false;                  // Server-Sent Events, one per token
};

// Limits the parser enforces beside the model's own.
struct RequestLimits {
  size_t max_context = 0;      // the sessions' context length (prompt + new tokens must fit)
  size_t max_stop = 16;        // stop entries at most
  size_t max_stop_bytes = 256;  // bytes per stop string at most
};

// Parses and validates a /v1/completions body. Fields: prompt (string) or tokens (array of ids), max_tokens,
// temperature, top_p, top_k, seed, stop (array of strings and/or ids, or one string), stream. Unknown fields
// are ignored (clients often send more). Throws RequestError(400, "...") naming the field on any problem.
// `tokenizer` (the model's; may be null): encodes a text prompt; without one only the byte-level config can take
// text.
CompletionRequest parse_completion_request(std::string_view body, const ModelConfig& config,
                                           const RequestLimits& limits, const Tokenizer* tokenizer = nullptr);

}  // namespace sqrtdk::serve
