// Why attention divides q·k by √d_k, measured with the engine's own kernels (sqrtdk explain-scaling).
//
// For each d_k: N query vectors q and key vectors k with iid N(0, 1) components (seeded). Each query is one
// attention row: its scores against m keys are one row of S = Q·Kᵀ, computed block by block with gemm_unpacked
// (the unfused attention path's Q·Kᵀ: a block of up to m queries shares m fresh keys; fewer past 4096 keys, so a
// block's scores stay within 64 MiB), then softmax_rows turns
// each row into probabilities, once with scale 1/√d_k and once with scale 1 (unscaled).
//   Moments: the diagonal S[r][r] of every block pairs query r with key r. Every vector belongs to exactly one
//   such pair, so the N pairs are independent: their sample mean and variance (of q·k and of q·k/√d_k) are
//   compared with the theory E = 0, Var = d_k (resp. 1), with standard errors (see standard_errors below).
//   Moments come from the first key count's pass (--keys' first value).
//   Sharpness, per row, averaged over the N rows: the largest probability, the entropy −Σ p ln p (nats; the
//   uniform row has ln m) and the saturation Σ pᵢ(1 − pᵢ) = 1 − Σ pᵢ² (the trace of the softmax Jacobian
//   diag(p) − ppᵀ: it goes to 0 as a row turns one-hot, and with it the gradient through the softmax).
// Deterministic: a fixed seed gives bit-identical results for any thread count (the random streams depend on
// (seed, d_k, m) only; GEMM and softmax are deterministic).
#pragma once

#include <sqrtdk/isa.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace sqrtdk {

struct ScalingConfig {
  std::vector<size_t> d_ks = {2, 16, 64, 256, 1024};
  std::vector<size_t> n_keys = {64, 512};  // m: keys per softmax row
  size_t n_samples = 10000;                // N: rows (queries) per (d_k, m)
  uint64_t seed = 20261130;
  Isa isa = default_isa();
  int n_threads = 1;
};

struct DotMoments {
  size_t d_k = 0, n = 0;
  double mean = 0, var = 0;                // of q·k (unbiased sample variance)
  double mean_scaled = 0, var_scaled = 0;  // of q·k / √d_k
  // Standard errors under the theory (q, k iid N(0,1)): SE(mean) = √(d_k/N); SE(var) = √((μ4 − σ⁴)/N) with
  // σ² = d_k and μ4 = E(q·k)⁴ = 3d_k² + 6d_k, i.e. √((2d_k² + 6d_k)/N); scaled: divide by √d_k resp. d_k.
  double se_mean = 0, se_var = 0, se_mean_scaled = 0, se_var_scaled = 0;
};

struct Sharpness {
  size_t d_k = 0, n_keys = 0;
  bool scaled = false;
  double max_prob = 0;    // mean over rows of max_i pᵢ
  double entropy = 0;     // mean over rows of −Σ pᵢ ln pᵢ (nats); uniform: ln m
  double saturation = 0;  // mean over rows of Σ pᵢ(1 − pᵢ); uniform: 1 − 1/m; one-hot: 0
};

struct ScalingReport {
  ScalingConfig config;
  std::vector<DotMoments> moments;     // one per d_k
  std::vector<Sharpness> sharpness;    // per (m, d_k, scaled ∈ {true, false}), in that nesting order
  std::vector<std::vector<float>> textbook_inputs;  // {1,2,3} and {10,20,30}
  std::vector<std::vector<float>> textbook_probs;   // their softmax_rows output
};

// Validates the config (sqrtdk::Error: empty lists, d_k or m of 0, N < 2), then runs the experiment.
ScalingReport run_scaling_experiment(const ScalingConfig& config);

// The picture: mean entropy (with ln m) and mean largest probability against d_k (log x axis), scaled solid,
// unscaled dashed, one colour per m.
std::string scaling_svg(const ScalingReport& report);

// Moments of n doubles: mean and unbiased variance.
void sample_mean_var(const std::vector<double>& v, double& mean, double& var);

}  // namespace sqrtdk
