// Parsing and validation of /v1/completions and /v1/chat/completions bodies (see request.h).
#include "tools/serve/request.h"

#include <sqrtdk/chat.h>
#include <sqrtdk/error.h>
#include <sqrtdk/generate.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

namespace sqrtdk::serve {

namespace {

using nlohmann::json;

[[noreturn]] void bad(const std::string& message, const std::string& param = "") {
  throw RequestError(400, message, param);
}

const char* type_name(const json& v) { return v.type_name(); }

// Deeply nested arrays cost stack and time in any JSON library; no valid request nests more than 4 deep.
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

// The top-level fields each endpoint knows. Anything else is refused by name: a field this server does not know
// may be one the client expects to change the output.
constexpr std::array kCompletionFields = {"model",  "prompt", "tokens", "max_tokens", "temperature", "top_p",
                                          "top_k",  "seed",   "stop",   "stream",     "stream_options", "n",
                                          "best_of", "logprobs", "echo", "suffix", "presence_penalty",
                                          "frequency_penalty", "logit_bias", "user"};
constexpr std::array kChatFields = {"model", "messages", "max_tokens", "max_completion_tokens", "temperature",
                                    "top_p", "top_k", "seed", "stop", "stream", "stream_options", "n", "logprobs",
                                    "top_logprobs", "presence_penalty", "frequency_penalty", "logit_bias", "user",
                                    "response_format", "tools", "tool_choice", "parallel_tool_calls"};

template <size_t N>
void check_fields(const json& j, const std::array<const char*, N>& known) {
  for (const auto& item : j.items()) {
    const std::string& key = item.key();
    if (std::find(known.begin(), known.end(), std::string_view(key)) != known.end()) continue;
    std::string list;
    for (const char* k : known) list.append(list.empty() ? "" : ", ").append(k);
    bad("unknown field '" + key + "' (this endpoint takes: " + list + ")", key);
  }
}

// The field's value, or null when absent (OpenAI's clients send null for "unset").
const json& field(const json& j, const char* name) {
  static const json null_value;
  const auto it = j.find(name);
  return it == j.end() ? null_value : *it;
}

// An unsigned integer field in [lo, hi]; JSON floats with an integral value (e.g. 16.0) are refused: types matter.
uint64_t get_uint(const json& v, const char* name, uint64_t lo, uint64_t hi) {
  if (v.is_number_unsigned()) {
    const uint64_t x = v.get<uint64_t>();
    if (x < lo || x > hi)
      bad(std::string("'") + name + "' is " + std::to_string(x) + ", expected " + std::to_string(lo) + ".." +
              std::to_string(hi),
          name);
    return x;
  }
  if (v.is_number_integer())  // negative
    bad(std::string("'") + name + "' is " + std::to_string(v.get<int64_t>()) + ", expected " + std::to_string(lo) +
            ".." + std::to_string(hi),
        name);
  bad(std::string("'") + name + "' must be an integer, got " + type_name(v), name);
}

float get_float(const json& v, const char* name, double lo, double hi, bool lo_open) {
  if (!v.is_number()) bad(std::string("'") + name + "' must be a number, got " + type_name(v), name);
  const double x = v.get<double>();
  if (!std::isfinite(x) || x > hi || x < lo || (lo_open && x == lo)) {
    std::string range = (lo_open ? "(" : "[") + json(lo).dump() + ", " + json(hi).dump() + "]";
    bad(std::string("'") + name + "' is " + json(x).dump() + ", expected a number in " + range, name);
  }
  return static_cast<float>(x);
}

bool get_bool(const json& v, const char* name) {
  if (!v.is_boolean()) bad(std::string("'") + name + "' must be true or false, got " + type_name(v), name);
  return v.get<bool>();
}

uint32_t get_token(const json& v, const char* name, const ModelConfig& config) {
  if (!v.is_number_integer()) bad(std::string("'") + name + "' must hold integer token ids, got " + type_name(v), name);
  if (v.is_number_unsigned() && v.get<uint64_t>() < config.n_vocab) return static_cast<uint32_t>(v.get<uint64_t>());
  bad(std::string("'") + name + "' holds token id " + v.dump() + ", out of range: the vocabulary has " +
          std::to_string(config.n_vocab) + " ids (0.." + std::to_string(config.n_vocab - 1) + ")",
      name);
}

std::vector<uint32_t> get_tokens(const json& t, const char* name, const ModelConfig& config, size_t context) {
  if (t.empty()) bad(std::string("'") + name + "' is empty", name);
  if (t.size() > context)
    bad(std::string("'") + name + "' is too long for the context: " + std::to_string(t.size()) +
            " tokens, the context holds " + std::to_string(context),
        name);
  std::vector<uint32_t> ids;
  ids.reserve(t.size());
  for (const json& v : t) ids.push_back(get_token(v, name, config));
  return ids;
}

// A field accepted only at the value that changes nothing: present with another value, it is a 400 saying so.
void require_neutral(const json& j, const char* name, bool neutral, const std::string& why) {
  if (!field(j, name).is_null() && !neutral) bad("'" + std::string(name) + "' " + why, name);
}

std::vector<uint32_t> text_prompt(const std::string& text, const ServedModel& model, size_t context) {
  const ModelConfig& config = model.config;
  if (!model.tokenizer && config.tokenizer != TokenizerKind::byte_level)
    bad("this model has no tokenizer: send 'tokens' (an array of ids) instead of 'prompt'", "prompt");
  if (text.empty() && config.bos_id == kNoToken) bad("'prompt' is empty", "prompt");
  std::vector<uint32_t> ids;
  if (!model.tokenizer) {
    // Checked before encoding so a huge prompt costs nothing more.
    if (text.size() + 1 > context)
      bad("'prompt' is too long for the context: " + std::to_string(text.size()) + " bytes, the context holds " +
              std::to_string(context) + " tokens",
          "prompt");
    return byte_encode(text, config.bos_id);
  }
  // (The body size limit bounds the work: encoding runs at over 20 MB/s.)
  ids = model.tokenizer->encode(text, /*add_special=*/true);
  if (ids.empty()) bad("'prompt' is empty", "prompt");
  if (ids.size() > context)
    bad("'prompt' is too long for the context: " + std::to_string(ids.size()) + " tokens, the context holds " +
            std::to_string(context),
        "prompt");
  return ids;
}

// /v1/completions' prompt: a string, token ids, or a list of one of either. One prompt per request: several would
// be several completions (choices), which this server does not batch (send one request per prompt).
std::vector<uint32_t> completion_prompt(const json& j, const ServedModel& model, size_t context) {
  const json& prompt = field(j, "prompt");
  const json& tokens = field(j, "tokens");
  if (prompt.is_null() == tokens.is_null())
    bad("give exactly one of 'prompt' (a string) or 'tokens' (an array of ids)", "prompt");
  if (!tokens.is_null()) {
    if (!tokens.is_array())
      bad(std::string("'tokens' must be an array of token ids, got ") + type_name(tokens), "tokens");
    return get_tokens(tokens, "tokens", model.config, context);
  }
  if (prompt.is_string()) return text_prompt(prompt.get_ref<const std::string&>(), model, context);
  if (!prompt.is_array())
    bad(std::string("'prompt' must be a string, got ") + type_name(prompt) +
            " (an array of token ids, or a list of one prompt, works too)",
        "prompt");
  if (prompt.empty()) bad("'prompt' is empty", "prompt");
  if (prompt[0].is_number()) return get_tokens(prompt, "prompt", model.config, context);
  if (prompt.size() > 1)
    bad("'prompt' holds " + std::to_string(prompt.size()) +
            " prompts; this server answers one prompt per request (send one request each)",
        "prompt");
  if (prompt[0].is_string()) return text_prompt(prompt[0].get_ref<const std::string&>(), model, context);
  if (prompt[0].is_array()) return get_tokens(prompt[0], "prompt", model.config, context);
  bad(std::string("'prompt' must hold strings or token ids, got ") + type_name(prompt[0]), "prompt");
}

// A message's content: a string, or OpenAI's array of parts of which only {"type": "text"} ones are supported.
std::string message_content(const json& content, const std::string& where, bool may_be_null) {
  if (content.is_string()) return content.get<std::string>();
  if (content.is_null() && may_be_null) return "";
  if (!content.is_array())
    bad("'" + where + ".content' must be a string or an array of text parts, got " + type_name(content), "messages");
  std::string text;
  for (const json& part : content) {
    if (!part.is_object() || field(part, "type") != "text" || !field(part, "text").is_string() || part.size() != 2)
      bad("'" + where + ".content' may only hold {\"type\": \"text\", \"text\": \"...\"} parts (images, audio and "
              "files are not supported)",
          "messages");
    text += part["text"].get<std::string>();
  }
  return text;
}

std::vector<ChatMessage> chat_messages(const json& messages, const RequestLimits& limits) {
  if (messages.is_null()) bad("'messages' is required", "messages");
  if (!messages.is_array()) bad(std::string("'messages' must be an array, got ") + type_name(messages), "messages");
  if (messages.empty()) bad("'messages' is empty", "messages");
  if (messages.size() > limits.max_messages)
    bad("'messages' has " + std::to_string(messages.size()) + " entries, at most " +
            std::to_string(limits.max_messages),
        "messages");
  std::vector<ChatMessage> out;
  for (size_t i = 0; i < messages.size(); ++i) {
    const json& m = messages[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) bad("'" + where + "' must be an object, got " + type_name(m), "messages");
    for (const auto& item : m.items())
      if (item.key() != "role" && item.key() != "content")
        bad("'" + where + "." + item.key() + "' is not supported (messages take 'role' and 'content')", "messages");
    const json& role = field(m, "role");
    if (!role.is_string()) bad("'" + where + ".role' must be a string", "messages");
    std::string r = role.get<std::string>();
    if (r == "developer") r = "system";  // OpenAI's newer name for the system role
    if (r != "system" && r != "user" && r != "assistant")
      bad("'" + where + ".role' is '" + role.get<std::string>() +
              "'; supported roles: system (or developer), user, assistant",
          "messages");
    out.push_back({r, message_content(field(m, "content"), where, r == "assistant")});
  }
  return out;
}

std::vector<uint32_t> chat_prompt(const json& j, const ServedModel& model, const RequestLimits& limits) {
  const std::vector<ChatMessage> messages = chat_messages(field(j, "messages"), limits);
  if (!model.tokenizer || model.tokenizer->chat_template() == ChatTemplateKind::none)
    bad(std::string("this model has ") + (model.tokenizer ? "no chat template" : "no tokenizer") +
            ": /v1/chat/completions cannot render messages for it; use /v1/completions with a prompt",
        "messages");
  std::string rendered;
  try {
    rendered = render_chat(*model.tokenizer, messages, /*add_generation_prompt=*/true);
  } catch (const Error& e) {  // e.g. Llama 2's roles that do not alternate
    bad(std::string("'messages' cannot be rendered with this model's chat template: ") + e.what(), "messages");
  }
  std::vector<uint32_t> ids = model.tokenizer->encode(rendered, /*add_special=*/false);  // the template writes BOS
  if (ids.empty()) bad("'messages' render to an empty prompt", "messages");
  if (ids.size() > limits.max_context)
    bad("'messages' are too long for the context: " + std::to_string(ids.size()) + " tokens, the context holds " +
            std::to_string(limits.max_context),
        "messages");
  return ids;
}

void parse_stop(const json& stop_field, const ModelConfig& config, const RequestLimits& limits,
                CompletionRequest& r) {
  if (stop_field.is_null()) return;
  json stop = stop_field;
  if (stop.is_string() || stop.is_number()) stop = json::array({stop});
  if (!stop.is_array())
    bad(std::string("'stop' must be an array of strings (or one string), got ") + type_name(stop), "stop");
  if (stop.size() > limits.max_stop)
    bad("'stop' has " + std::to_string(stop.size()) + " entries, at most " + std::to_string(limits.max_stop), "stop");
  for (const json& s : stop) {
    if (s.is_string()) {
      const std::string& text = s.get_ref<const std::string&>();
      if (text.empty()) bad("'stop' holds an empty string", "stop");
      if (text.size() > limits.max_stop_bytes)
        bad("'stop' holds a string of " + std::to_string(text.size()) + " bytes, at most " +
                std::to_string(limits.max_stop_bytes),
            "stop");
      r.stop_texts.push_back(text);
    } else if (s.is_number()) {  // a token id: an extension
      r.stop_tokens.push_back(get_token(s, "stop", config));
    } else {
      bad(std::string("'stop' must hold strings or token ids, got ") + type_name(s), "stop");
    }
  }
}

}  // namespace

CompletionRequest parse_request(Endpoint endpoint, std::string_view body, const ServedModel& model,
                                const RequestLimits& limits) {
  check_nesting(body, 8);
  json j;
  try {
    j = json::parse(body.begin(), body.end());
  } catch (const json::exception& e) {  // the message gives the byte position of the first error
    bad(std::string("malformed JSON: ") + e.what());
  }
  if (!j.is_object()) bad(std::string("the body must be a JSON object, got ") + type_name(j));
  const bool chat = endpoint == Endpoint::chat_completions;
  if (chat)
    check_fields(j, kChatFields);
  else
    check_fields(j, kCompletionFields);

  // `model` is optional (one model is served); when given it must be that one.
  if (const json& m = field(j, "model"); !m.is_null()) {
    if (!m.is_string()) bad(std::string("'model' must be a string, got ") + type_name(m), "model");
    if (!model.id.empty() && m.get<std::string>() != model.id)
      throw RequestError(404, "The model '" + m.get<std::string>() + "' does not exist; this server serves '" +
                                  model.id + "' (GET /v1/models)",
                         "model", "model_not_found");
  }

  CompletionRequest r;
  r.endpoint = endpoint;
  const size_t context = limits.max_context;
  r.prompt = chat ? chat_prompt(j, model, limits) : completion_prompt(j, model, context);
  if (r.prompt.size() >= context)
    bad("the prompt is too long for the context: " + std::to_string(r.prompt.size()) +
            " tokens leave no room for a new one (the context holds " + std::to_string(context) + ")",
        chat ? "messages" : "prompt");

  const size_t room = context - r.prompt.size();
  const char* max_name = "max_tokens";
  if (chat && !field(j, "max_completion_tokens").is_null()) {
    if (!field(j, "max_tokens").is_null())
      bad("give one of 'max_tokens' and 'max_completion_tokens', not both", "max_tokens");
    max_name = "max_completion_tokens";
  }
  if (const json& v = field(j, max_name); !v.is_null()) {
    if (v.is_number_unsigned() && v.get<uint64_t>() > room && v.get<uint64_t>() <= context)
      bad("'" + std::string(max_name) + "' is " + v.dump() + " but the prompt's " + std::to_string(r.prompt.size()) +
              " tokens leave room for " + std::to_string(room) + " in the context of " + std::to_string(context),
          max_name);
    r.max_tokens = get_uint(v, max_name, 1, room);
  } else {
    r.max_tokens = chat ? room : std::min<size_t>(16, room);  // OpenAI's defaults: chat runs to the end of the turn
  }
  if (const json& v = field(j, "temperature"); !v.is_null())
    r.temperature = get_float(v, "temperature", 0.0, 100.0, false);
  if (const json& v = field(j, "top_p"); !v.is_null()) r.top_p = get_float(v, "top_p", 0.0, 1.0, true);
  if (const json& v = field(j, "top_k"); !v.is_null()) r.top_k = get_uint(v, "top_k", 0, model.config.n_vocab);
  if (const json& v = field(j, "seed"); !v.is_null())
    r.seed = get_uint(v, "seed", 0, std::numeric_limits<uint64_t>::max());
  if (const json& v = field(j, "stream"); !v.is_null()) r.stream = get_bool(v, "stream");
  if (const json& v = field(j, "stream_options"); !v.is_null()) {
    if (!r.stream) bad("'stream_options' is only allowed when 'stream' is true", "stream_options");
    if (!v.is_object()) bad(std::string("'stream_options' must be an object, got ") + type_name(v), "stream_options");
    for (const auto& item : v.items()) {
      if (item.key() != "include_usage")
        bad("'stream_options." + item.key() + "' is not supported (only 'include_usage')", "stream_options");
      if (!item.value().is_boolean()) bad("'stream_options.include_usage' must be true or false", "stream_options");
      r.include_usage = item.value().get<bool>();
    }
  }
  parse_stop(field(j, "stop"), model.config, limits, r);

  if (const json& v = field(j, "logprobs"); !v.is_null()) {
    if (chat) {
      r.logprobs = get_bool(v, "logprobs");
    } else {
      r.logprobs = true;
      r.top_logprobs = get_uint(v, "logprobs", 0, 5);
    }
  }
  if (chat) {
    if (const json& v = field(j, "top_logprobs"); !v.is_null()) {
      r.top_logprobs = get_uint(v, "top_logprobs", 0, 20);
      if (!r.logprobs) bad("'top_logprobs' needs 'logprobs': true", "top_logprobs");
    }
  }

  // Accepted only at the value that changes nothing.
  if (const json& v = field(j, "n"); !v.is_null() && !(v.is_number_unsigned() && v.get<uint64_t>() == 1))
    bad("'n' must be 1: this server returns one choice per request (send n requests with different seeds)", "n");
  require_neutral(j, "best_of", field(j, "best_of") == 1, "must be 1: best-of sampling is not supported");
  const auto zero = [](const json& v) { return v.is_number() && v.get<double>() == 0.0; };
  require_neutral(j, "presence_penalty", zero(field(j, "presence_penalty")), "must be 0: penalties are not supported");
  require_neutral(j, "frequency_penalty", zero(field(j, "frequency_penalty")),
                  "must be 0: penalties are not supported");
  require_neutral(j, "logit_bias", field(j, "logit_bias").is_object() && field(j, "logit_bias").empty(),
                  "is not supported (only an empty object)");
  if (const json& v = field(j, "user"); !v.is_null() && !v.is_string())
    bad(std::string("'user' must be a string, got ") + type_name(v), "user");
  if (chat) {
    require_neutral(j, "response_format",
                    field(j, "response_format") == json{{"type", "text"}},
                    "is not supported: only {\"type\": \"text\"} (no JSON mode or schemas)");
    require_neutral(j, "tools", field(j, "tools").is_array() && field(j, "tools").empty(),
                    "is not supported: no tool calling (only an empty list)");
    require_neutral(j, "tool_choice", field(j, "tool_choice") == "none",
                    "is not supported: no tool calling (only \"none\")");
    require_neutral(j, "parallel_tool_calls", field(j, "parallel_tool_calls").is_boolean(),
                    "must be true or false (there is no tool calling)");
  } else {
    require_neutral(j, "echo", field(j, "echo") == false, "must be false: echoing the prompt is not supported");
    require_neutral(j, "suffix", field(j, "suffix") == "",
                    "is not supported (insertion needs a fill-in-the-middle model)");
  }
  return r;
}

CompletionRequest parse_completion_request(std::string_view body, const ModelConfig& config,
                                           const RequestLimits& limits, const Tokenizer* tokenizer) {
  return parse_request(Endpoint::completions, body, ServedModel{config, tokenizer, ""}, limits);
}

}  // namespace sqrtdk::serve
