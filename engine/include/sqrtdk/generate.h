// Token sampling and generation on a Session.
//
// Sampling: temperature 0 is greedy (argmax, ties to the lowest id); otherwise softmax(logits / temperature),
// restricted to the top_k most likely (0 = all), then to the smallest set whose probability reaches top_p
// (1 = all), drawn with a std::mt19937_64 seeded by `seed`: the same seed gives the same tokens.
//
// Non-finite logits, the same rule in every sampler (greedy, temperature, top-k, top-p) and in token_probabilities:
//   - NaN anywhere: sqrtdk::Error "logits contain NaN at id N ...": a NaN means the model produced non-finite
//     values, and no token is a meaningful answer (greedy does not skip it either).
//   - +Inf: the +Inf entries share all the probability equally (the limit of softmax as they grow); every finite
//     entry gets 0. Greedy picks the first +Inf id; top-k keeps +Inf entries first (lowest ids first among them).
//   - -Inf: probability 0, never picked. Logits that are all -Inf are an error (no token can be picked).
#pragma once

#include <sqrtdk/session.h>

#include <cstdint>
#include <functional>
#include <random>
#include <span>
#include <string>
#include <vector>

namespace sqrtdk {

struct SamplingOptions {
  float temperature = 0.8f;
  size_t top_k = 40;
  float top_p = 0.95f;
  uint64_t seed = 42;
};

class Sampler {
 public:
  explicit Sampler(const SamplingOptions& options);
  // Picks a token id from logits [n_vocab]. Throws sqrtdk::Error on bad options, empty logits, a NaN logit or
  // logits that are all -Inf (see the rules above).
  uint32_t sample(std::span<const float> logits);

 private:
  SamplingOptions options_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, uint32_t>> candidates_;  // reused across calls
  std::vector<double> probs_;
};

// softmax(logits) in double, with the rules above for non-finite logits (NaN throws sqrtdk::Error naming the id;
// +Inf entries share the mass equally; -Inf entries get 0). `sqrtdk run` prints these.
std::vector<double> token_probabilities(std::span<const float> logits);

struct GenerateOptions {
  SamplingOptions sampling;
  size_t max_new_tokens = 64;
  // Stop after the model's end tokens: its tokenizer's stop_ids() (EOS and end-of-turn markers such as <|im_end|>),
  // or the config's eos_id when the model has no tokenizer.
  bool stop_at_eos = true;
  std::vector<uint32_t> stop_tokens;  // more ids that stop generation after being emitted (they are in `tokens`)
  // Generation stops as soon as the text contains one of these; the text is cut before it (as OpenAI's `stop`).
  // Needs a model with a tokenizer. Empty strings are an error.
  std::vector<std::string> stop_strings;
  // Called with each new token as it is produced; return false to stop early.
  std::function<bool(uint32_t token)> on_token;
  // Called with text as it becomes final: whole UTF-8 characters only, never part of a stop string (text that
  // may begin one is held back until it cannot). The pieces concatenate to GenerateResult::text. Needs a tokenizer;
  // return false to stop early.
  std::function<bool(std::string_view text)> on_text;
};

enum class StopReason {
  max_tokens,    // max_new_tokens were generated
  eos,           // the model emitted one of its end tokens (stop_at_eos)
  stop_token,    // one of GenerateOptions::stop_tokens
  stop_string,   // the text reached one of GenerateOptions::stop_strings
  context_full,  // the session's context is full
  callback,      // on_token or on_text returned false
};
const char* stop_reason_name(StopReason reason);  // "max_tokens", "eos", ... (OpenAI's finish_reason is "length"
                                                  // for max_tokens and context_full, "stop" for the others)

struct GenerateResult {
  std::vector<uint32_t> tokens;  // the generated ids, the stopping token included
  std::string text;              // their text, special tokens skipped, cut before a stop string; empty without a
                                 // tokenizer
  StopReason stop_reason = StopReason::max_tokens;
};

// Prefills `prompt` (appended to the session's context) and generates up to max_new_tokens tokens, stopping at an
// end token (by default), a stop token or string, or when the context is full. max_new_tokens = 0 only prefills
// (the prompt is checked and in the context; no token, stop_reason max_tokens).
GenerateResult generate(Session& session, std::span<const uint32_t> prompt, const GenerateOptions& options);

// The built-in byte-level tokenizer: ids 0..255 are bytes; BOS/EOS come from the model config.
std::vector<uint32_t> byte_encode(std::string_view text, uint32_t bos_id = kNoToken);
// Bytes of ids < 256; special ids are skipped. Invalid UTF-8 passes through as bytes.
std::string byte_decode(std::span<const uint32_t> ids);

}  // namespace sqrtdk
