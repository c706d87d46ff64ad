// Parsing and validation of /v1/completions bodies (see request.h).
#include "tools/serve/request.h"

#include <sqrtdk/generate.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <limits>

namespace sqrtdk::serve {

namespace {

using nlohmann::json;

[[noreturn]] void bad(const std::string& message) { throw RequestError(400, message); }

const char* type_name(const json& v) { return v.type_name(); }

// Deeply nested arrays cost stack and time in any JSON library; no valid request nests more than 3 deep.
void check_nesting(std::string_view body, int max_depth) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < body.size(); ++i) {
    const char c = body[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) bad("JSON nested deeper than " + std::to_string(max_depth) + " levels");
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
}

// An unsigned integer field in [lo, hi]; JSON floats with an integral value (e.g. 16.0) are refused: types matter.
uint64_t get_uint(const json& v, const char* field, uint64_t lo, uint64_t hi) {
  if (v.is_number_unsigned()) {
    const uint64_t x = v.get<uint64_t>();
    if (x < lo || x > hi)
      bad(std::string("'") + field + "' is " + std::to_string(x) + ", expected " + std::to_string(lo) + ".." +
          std::to_string(hi));
    return x;
  }
  if (v.is_number_integer())  // negative
    bad(std::string("'") + field + "' is " + std::to_string(v.get<int64_t>()) + ", expected " +
        std::to_string(lo) + ".." + std::to_string(hi));
  bad(std::string("'") + field + "' must be an integer, got " + type_name(v));
}

float get_float(const json& v, const char* field, double lo, double hi, bool lo_open) {
  if (!v.is_number()) bad(std::string("'") + field + "' must be a number, got " + type_name(v));
  const double x = v.get<double>();
  if (!std::isfinite(x) || x > hi || x < lo || (lo_open && x == lo)) {
    std::string range = (lo_open ? "(" : "[") + json(lo).dump() + ", " + json(hi).dump() + "]";
    bad(std::string("'") + field + "' is " + json(x).dump() + ", expected a number in " + range);
  }
  return static_cast<float>(x);
}

uint32_t get_token(const json& v, const char* field, const ModelConfig& config) {
  if (!v.is_number_integer())
    bad(std::string("'") + field + "' must hold integer token ids, got " + type_name(v));
  if (v.is_number_unsigned() && v.get<uint64_t>() < config.n_vocab) return static_cast<uint32_t>(v.get<uint64_t>());
  bad(std::string("'") + field + "' holds token id " + v.dump() + ", out of range: the vocabulary has " +
      std::to_string(config.n_vocab) + " ids (0.." + std::to_string(config.n_vocab - 1) + ")");
}

}  // namespace

CompletionRequest parse_completion_request(std::string_view body, const ModelConfig& config,
                                           const RequestLimits& limits, const Tokenizer* tokenizer) {
  check_nesting(body, 8);
  json j;
  try {
    j = json::parse(body.begin(), body.end());
  } catch (const json::exception& e) {  // the message gives the byte position of the first error
    bad(std::string("malformed JSON: ") + e.what());
  }
  if (!j.is_object()) bad(std::string("the body must be a JSON object, got ") + type_name(j));

  CompletionRequest r;
  const size_t context = limits.max_context;

  const bool has_prompt = j.contains("prompt") && !j["prompt"].is_null();
  const bool has_tokens = j.contains("tokens") && !j["tokens"].is_null();
  if (has_prompt == has_tokens) bad("give exactly one of 'prompt' (a string) or 'tokens' (an array of ids)");
  if (has_prompt) {
    const json& p = j["prompt"];
    if (!p.is_string()) bad(std::string("'prompt' must be a string, got ") + type_name(p));
    if (!tokenizer && config.tokenizer != TokenizerKind::byte_level)
      bad("this model has no tokenizer: send 'tokens' (an array of ids) instead of 'prompt'");
    const std::string& text = p.get_ref<const std::string&>();
    if (text.empty() && config.bos_id == kNoToken) bad("'prompt' is empty");
    if (!tokenizer) {
      // Checked before encoding so a huge prompt costs nothing more.
      if (text.size() + 1 > context)
        bad("'prompt' is too long for the context: " + std::to_string(text.size()) + " bytes, the context holds " +
            std::to_string(context) + " tokens");
      r.prompt = byte_encode(text, config.bos_id);
    } else {
      // (The body size limit bounds the work: encoding runs at over 20 MB/s.)
      r.prompt = tokenizer->encode(text, /*add_special=*/true);
      if (r.prompt.empty()) bad("'prompt' is empty");
      if (r.prompt.size() > context)
        bad("'prompt' is too long for the context: " + std::to_string(r.prompt.size()) + " tokens, the context holds " +
            std::to_string(context));
    }
  } else {
    const json& t = j["tokens"];
    if (!t.is_array()) bad(std::string("'tokens' must be an array of token ids, got ") + type_name(t));
    if (t.empty()) bad("'tokens' is empty");
    if (t.size() > context)
      bad("'tokens' is too long for the context: " + std::to_string(t.size()) + " tokens, the context holds " +
          std::to_string(context));
    r.prompt.reserve(t.size());
    for (const json& v : t) r.prompt.push_back(get_token(v, "tokens", config));
  }
  if (r.prompt.size() >= context)
    bad("the prompt is too long for the context: " + std::to_string(r.prompt.size()) +
        " tokens leave no room for a new one (the context holds " + std::to_string(context) + ")");

  const size_t room = context - r.prompt.size();
  if (j.contains("max_tokens") && !j["max_tokens"].is_null()) {
    const json& v = j["max_tokens"];
    if (v.is_number_unsigned() && v.get<uint64_t>() > room && v.get<uint64_t>() <= context)
      bad("'max_tokens' is " + v.dump() + " but the prompt's " + std::to_string(r.prompt.size()) +
          " tokens leave room for " + std::to_string(room) + " in the context of " + std::to_string(context));
    r.max_tokens = get_uint(v, "max_tokens", 1, room);
  } else {
    r.max_tokens = std::min<size_t>(16, room);
  }
  if (j.contains("temperature") && !j["temperature"].is_null())
    r.temperature = get_float(j["temperature"], "temperature", 0.0, 100.0, false);
  if (j.contains("top_p") && !j["top_p"].is_null()) r.top_p = get_float(j["top_p"], "top_p", 0.0, 1.0, true);
  if (j.contains("top_k") && !j["top_k"].is_null())
    r.top_k = get_uint(j["top_k"], "top_k", 0, config.n_vocab);
  if (j.contains("seed") && !j["seed"].is_null())
    r.seed = get_uint(j["seed"], "seed", 0, std::numeric_limits<uint64_t>::max());
  if (j.contains("stream") && !j["stream"].is_null()) {
    if (!j["stream"].is_boolean()) bad(std::string("'stream' must be true or false, got ") + type_name(j["stream"]));
    r.stream = j["stream"].get<bool>();
  }
  if (j.contains("stop") && !j["stop"].is_null()) {
    json stop = j["stop"];
    if (stop.is_string() || stop.is_number()) stop = json::array({stop});
    if (!stop.is_array()) bad(std::string("'stop' must be an array of strings or token ids, got ") + type_name(stop));
    if (stop.size() > limits.max_stop)
      bad("'stop' has " + std::to_string(stop.size()) + " entries, at most " + std::to_string(limits.max_stop));
    for (const json& s : stop) {
      if (s.is_string()) {
        const std::string& text = s.get_ref<const std::string&>();
        if (text.empty()) bad("'stop' holds an empty string");
        if (text.size() > limits.max_stop_bytes)
          bad("'stop' holds a string of " + std::to_string(text.size()) + " bytes, at most " +
              std::to_string(limits.max_stop_bytes));
        r.stop_texts.push_back(text);
      } else if (s.is_number()) {
        r.stop_tokens.push_back(get_token(s, "stop", config));
      } else {
        bad(std::string("'stop' must hold strings or token ids, got ") + type_name(s));
      }
    }
  }
  return r;
}

}  // namespace sqrtdk::serve
