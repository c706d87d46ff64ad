// Sampling, generation and the byte-level tokenizer.
#include <sqrtdk/error.h>
#include <sqrtdk/generate.h>

#include <algorithm>
#include <cmath>
#include <string>

namespace sqrtdk {

Sampler::Sampler(const SamplingOptions& options) : options_(options), rng_(options.seed) {
  if (!(options.temperature >= 0) || !std::isfinite(options.temperature))
    throw Error("sampling: temperature must be >= 0 and finite (got " + std::to_string(options.temperature) + ")");
  if (!(options.top_p > 0 && options.top_p <= 1))
    throw Error("sampling: top_p must be in (0, 1] (got " + std::to_string(options.top_p) + ")");
}

uint32_t Sampler::sample(std::span<const float> logits) {
  if (logits.empty()) throw Error("sampling: empty logits");
  if (options_.temperature == 0.0f) {
    // Greedy: the first maximum (ties go to the lowest id); NaN never wins.
    size_t best = 0;
    for (size_t i = 1; i < logits.size(); ++i)
      if (logits[i] > logits[best] || std::isnan(logits[best])) best = i;
    return static_cast<uint32_t>(best);
  }
  // Candidates sorted by logit (ties by id, so the order is deterministic), cut to top_k.
  candidates_.resize(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) candidates_[i] = {logits[i], static_cast<uint32_t>(i)};
  const size_t k = options_.top_k == 0 ? logits.size() : std::min(options_.top_k, logits.size());
  auto by_logit = [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); };
  std::partial_sort(candidates_.begin(), candidates_.begin() + k, candidates_.end(), by_logit);
  candidates_.resize(k);
  // Softmax of logit / temperature over the candidates (in double: the sum must not depend on luck).
  std::vector<double>& p = probs_;
  p.resize(k);
  const double top = candidates_[0].first, inv_t = 1.0 / options_.temperature;
  double sum = 0;
  for (size_t i = 0; i < k; ++i) sum += p[i] = std::exp((candidates_[i].first - top) * inv_t);
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
    if (u < acc) return candidates_[i].second;
  }
  return candidates_[keep - 1].second;
}

std::vector<uint32_t> generate(Session& session, std::span<const uint32_t> prompt, const GenerateOptions& options) {
  Sampler sampler(options.sampling);
  std::vector<uint32_t> out;
  if (options.max_new_tokens == 0) return out;
  std::span<const float> logits = session.prefill(prompt);
  while (out.size() < options.max_new_tokens) {
    const uint32_t token = sampler.sample(logits);
    out.push_back(token);
    if (options.on_token && !options.on_token(token)) break;
    if (std::find(options.stop_tokens.begin(), options.stop_tokens.end(), token) != options.stop_tokens.end()) break;
    if (out.size() == options.max_new_tokens || session.n_past() >= session.max_context()) break;
    logits = session.decode(token);
  }
  return out;
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
