// Sampling, generation and the byte-level tokenizer.
#include <sqrtdk/error.h>
#include <sqrtdk/generate.h>
#include <sqrtdk/tokenizer.h>

#include "engine/src/runtime/generation.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <string>

namespace sqrtdk {

Sampler::Sampler(const SamplingOptions& options) : options_(options), rng_(options.seed) {
  if (!(options.temperature >= 0) || !std::isfinite(options.temperature))
    throw Error("sampling: temperature must be >= 0 and finite (got " + std::to_string(options.temperature) + ")");
  if (!(options.top_p > 0 && options.top_p <= 1))
    throw Error("sampling: top_p must be in (0, 1] (got " + std::to_string(options.top_p) + ")");
}

namespace {

// Throws on the first NaN, or when every logit is -Inf (the rules in generate.h); `who` prefixes the message.
void check_logits(std::span<const float> logits, const char* who) {
  if (logits.empty()) throw Error(std::string(who) + "empty logits");
  size_t n_neg_inf = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    const float x = logits[i];
    if (std::isnan(x))
      throw Error(std::string(who) + "logits contain NaN at id " + std::to_string(i) + " (of " +
                  std::to_string(logits.size()) +
                  "): the model produced non-finite values (load with check_finite / --check-finite to find a "
                  "NaN or Inf weight)");
    if (x == -std::numeric_limits<float>::infinity()) ++n_neg_inf;
  }
  if (n_neg_inf == logits.size())
    throw Error(std::string(who) + "every one of the " + std::to_string(logits.size()) +
                " logits is -Inf: no token can be picked");
}

// The unnormalised probability of `logit` given the largest logit `top` (+Inf entries share the mass; -Inf gets 0).
double weight(float logit, double top, double inv_t) {
  if (std::isinf(top)) return logit == top ? 1.0 : 0.0;  // top is +Inf: only the +Inf entries count
  if (std::isinf(logit)) return 0.0;                     // -Inf
  return std::exp((logit - top) * inv_t);
}

}  // namespace

std::vector<double> token_probabilities(std::span<const float> logits) {
  check_logits(logits, "");
  const double top = *std::max_element(logits.begin(), logits.end());
  std::vector<double> p(logits.size());
  double sum = 0;
  for (size_t i = 0; i < logits.size(); ++i) sum += p[i] = weight(logits[i], top, 1.0);
  for (double& x : p) x /= sum;
  return p;
}

uint32_t Sampler::sample(std::span<const float> logits) {
  check_logits(logits, "sampling: ");
  if (options_.temperature == 0.0f) {
    // Greedy: the first maximum (ties go to the lowest id; the first +Inf if any). No NaN reaches here.
    size_t best = 0;
    for (size_t i = 1; i < logits.size(); ++i)
      if (logits[i] > logits[best]) best = i;
    return static_cast<uint32_t>(best);
  }
  // Candidates sorted by logit (ties by id, so the order is deterministic), cut to top_k: +Inf first, -Inf last.
  candidates_.resize(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) candidates_[i] = {logits[i], static_cast<uint32_t>(i)};
  const size_t k = options_.top_k == 0 ? logits.size() : std::min(options_.top_k, logits.size());
  auto by_logit = [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); };
  std::partial_sort(candidates_.begin(), candidates_.begin() + k, candidates_.end(), by_logit);
  candidates_.resize(k);
  // Softmax of logit / temperature over the candidates (in double: the sum must not depend on luck). The first
  // candidate is never -Inf (check_logits), so the sum is > 0.
  std::vector<double>& p = probs_;
  p.resize(k);
  const double top = candidates_[0].first, inv_t = 1.0 / options_.temperature;
  double sum = 0;
  for (size_t i = 0; i < k; ++i) sum += p[i] = weight(candidates_[i].first, top, inv_t);
  // top_p: the smallest prefix whose probability reaches top_p.
  size_t keep = k;
  double cumulative = 0;
  for (size_t i = 0; i < k; ++i) {
    cumulative += p[i] / sum;
    if (cumulative >= options_.top_p) {
      keep = i + 1;
      break;
    }
  }
  double kept_sum = 0;
  for (size_t i = 0; i < keep; ++i) kept_sum += p[i];
  const double u = std::uniform_real_distribution<double>(0.0, kept_sum)(rng_);
  double acc = 0;
  for (size_t i = 0; i < keep; ++i) {
    acc += p[i];
    if (u < acc) return candidates_[i].second;  // strict: a zero-probability (-Inf) entry is never picked
  }
  // u rounded up to kept_sum: the last kept candidate that has probability.
  for (size_t i = keep; i-- > 0;)
    if (p[i] > 0) return candidates_[i].second;
  return candidates_[0].second;
}

const char* stop_reason_name(StopReason reason) {
  switch (reason) {
    case StopReason::max_tokens: return "max_tokens";
    case StopReason::eos: return "eos";
    case StopReason::stop_token: return "stop_token";
    case StopReason::stop_string: return "stop_string";
    case StopReason::context_full: return "context_full";
    case StopReason::callback: return "callback";
  }
  return "unknown";
}

GenerateResult generate(Session& session, std::span<const uint32_t> prompt, const GenerateOptions& options) {
  Generation gen(session.model(), options);
  // The prompt is prefilled (validated, and in the context) even when no token is wanted, as the contract says: it
  // returned before the prefill, so max_new_tokens = 0 skipped the prompt's checks and left the session as it was.
  std::span<const float> logits = session.prefill(prompt);
  if (options.max_new_tokens == 0) return gen.finish();
  bool done = false;
  while (!done) {
    done = gen.next(logits, session.n_past() >= session.max_context(), options.on_token);
    if (gen.has_text() && options.on_text && !options.on_text(gen.take_text(done))) {
      gen.result().stop_reason = StopReason::callback;
      break;
    }
    if (!done) logits = session.decode(gen.last_token());
  }
  return gen.finish();
}

std::vector<uint32_t> byte_encode(std::string_view text, uint32_t bos_id) {
  std::vector<uint32_t> ids;
  ids.reserve(text.size() + 1);
  if (bos_id != kNoToken) ids.push_back(bos_id);
  for (unsigned char ch : text) ids.push_back(ch);
  return ids;
}

std::string byte_decode(std::span<const uint32_t> ids) {
  std::string out;
  for (uint32_t id : ids)
    if (id < 256) out.push_back(static_cast<char>(id));
  return out;
}

}  // namespace sqrtdk
