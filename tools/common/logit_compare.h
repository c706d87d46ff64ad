// How far one model's next-token distributions are from a reference's over the same positions: what
// `sqrtdk compare` prints and what tests/engine/test_weight_types.cpp pins for bf16 and q8 weights.
// Per position, both rows of logits become log-probabilities (log-softmax in double), then:
//   KL(ref ‖ other) = Σ_v p_ref(v)·(log p_ref(v) − log p_other(v))  (nats; what the other model loses in expectation)
//   max |Δ log p|   over the vocabulary entries the reference gives p ≥ 1e-4 (rarer entries' log-probabilities are
//                   dominated by how far below everything else they sit, which nobody samples)
//   |Δ log p(next)| of the token that actually comes next (when known), and top-1 agreement (same argmax).
// With the next tokens known, each model's cross-entropy gives bits per token (and per byte, given byte counts).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace sqrtdk::tools {

struct LogitComparison {
  size_t positions = 0;
  size_t top1_agree = 0;
  double kl_sum = 0, kl_max = 0;                // nats
  double dlogp_max = 0;                         // over entries with p_ref ≥ 1e-4
  double dnext_sum = 0, dnext_max = 0;          // |Δ log p| of the next token
  double bits_ref = 0, bits_other = 0;          // Σ −log2 p(next token)
  size_t scored = 0;                            // positions with a known next token

  double top1_rate() const { return positions ? static_cast<double>(top1_agree) / positions : 0.0; }
  double kl_mean() const { return positions ? kl_sum / positions : 0.0; }
  double dnext_mean() const { return scored ? dnext_sum / scored : 0.0; }

  // Adds one position: logits rows of n_vocab, next = the token that follows (or < 0 for none).
  void add(std::span<const float> ref, std::span<const float> other, int64_t next) {
    const std::vector<double> lr = log_softmax(ref), lo = log_softmax(other);
    double kl = 0, dmax = 0;
    size_t arg_r = 0, arg_o = 0;
    for (size_t v = 0; v < lr.size(); ++v) {
      const double p = std::exp(lr[v]);
      kl += p * (lr[v] - lo[v]);
      if (p >= 1e-4) dmax = std::max(dmax, std::fabs(lr[v] - lo[v]));
      if (lr[v] > lr[arg_r]) arg_r = v;
      if (lo[v] > lo[arg_o]) arg_o = v;
    }
    ++positions;
    top1_agree += arg_r == arg_o;
    kl_sum += std::max(0.0, kl);  // ≥ 0 mathematically; rounding can give −1e-17
    kl_max = std::max(kl_max, kl);
    dlogp_max = std::max(dlogp_max, dmax);
    if (next >= 0 && static_cast<size_t>(next) < lr.size()) {
      const double d = std::fabs(lr[next] - lo[next]);
      dnext_sum += d;
      dnext_max = std::max(dnext_max, d);
      bits_ref -= lr[next] / std::log(2.0);
      bits_other -= lo[next] / std::log(2.0);
      ++scored;
    }
  }

  static std::vector<double> log_softmax(std::span<const float> x) {
    double mx = -INFINITY;
    for (float v : x) mx = std::max(mx, static_cast<double>(v));
    double sum = 0;
    for (float v : x) sum += std::exp(static_cast<double>(v) - mx);
    const double lse = mx + std::log(sum);
    std::vector<double> out(x.size());
    for (size_t i = 0; i < x.size(); ++i) out[i] = static_cast<double>(x[i]) - lse;
    return out;
  }
};

}  // namespace sqrtdk::tools
