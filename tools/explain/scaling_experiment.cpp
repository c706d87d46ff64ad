// The √d_k experiment: see scaling_experiment.h for what is measured and why the samples are independent.
#include "tools/explain/scaling_experiment.h"

#include <sqrtdk/error.h>

#include "tools/explain/svg_plot.h"
#include "ops/gemm/gemm.h"
#include "ops/softmax/softmax.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace sqrtdk {

namespace {

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// xoshiro256** with Box–Muller normals: written out (not std::normal_distribution, whose algorithm differs
// between standard libraries) so a seed gives the same numbers everywhere.
class NormalRng {
 public:
  NormalRng(uint64_t seed, uint64_t stream_a, uint64_t stream_b) {
    uint64_t st = seed ^ (stream_a * 0xD1B54A32D192ED03ull) ^ (stream_b * 0x8CB92BA72F3D8DD7ull);
    for (auto& w : s_) w = splitmix64(st);
  }
  // Uniform in (0, 1]: 53 random bits.
  double uniform() { return (static_cast<double>(next() >> 11) + 1.0) * 0x1.0p-53; }
  void fill(float* dst, size_t n) {
    size_t i = 0;
    for (; i + 1 < n; i += 2) {
      const double r = std::sqrt(-2.0 * std::log(uniform())), a = 2.0 * std::numbers::pi * uniform();
      dst[i] = static_cast<float>(r * std::cos(a));
      dst[i + 1] = static_cast<float>(r * std::sin(a));
    }
    if (i < n) dst[i] = static_cast<float>(std::sqrt(-2.0 * std::log(uniform())) * std::cos(2.0 * std::numbers::pi * uniform()));
  }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t next() {
    const uint64_t result = rotl(s_[1] * 5, 7) * 9, t = s_[1] << 17;
    s_[2] ^= s_[0], s_[3] ^= s_[1], s_[1] ^= s_[2], s_[0] ^= s_[3], s_[2] ^= t, s_[3] = rotl(s_[3], 45);
    return result;
  }
  uint64_t s_[4];
};

// Adds the row statistics of P [n_rows][m] to the running sums of `out`.
void add_row_stats(const float* P, size_t n_rows, size_t m, Sharpness& out) {
  for (size_t r = 0; r < n_rows; ++r) {
    const float* p = P + r * m;
    double mx = 0, h = 0, sq = 0;
    for (size_t j = 0; j < m; ++j) {
      const double v = p[j];
      mx = std::max(mx, v);
      if (v > 0) h -= v * std::log(v);
      sq += v * v;
    }
    out.max_prob += mx, out.entropy += h, out.saturation += 1.0 - sq;
  }
}

}  // namespace

void sample_mean_var(const std::vector<double>& v, double& mean, double& var) {
  mean = 0, var = 0;
  if (v.empty()) return;
  for (double x : v) mean += x;
  mean /= static_cast<double>(v.size());
  for (double x : v) var += (x - mean) * (x - mean);  // two passes: no cancellation at d_k = 1024
  var = v.size() > 1 ? var / static_cast<double>(v.size() - 1) : 0.0;
}

namespace {
// A block's scores S and probabilities P ([rows][m] each) at most 64 MiB apiece: up to 4096 keys a block is m
// queries (m × m scores), past that fewer queries share the m keys (each vector still in one diagonal pair).
constexpr size_t kMaxScoreFloats = size_t{1} << 24;
constexpr size_t kMaxKeyFloats = size_t{1} << 28;  // a block's keys, m × d_k: 1 GiB
}  // namespace

ScalingReport run_scaling_experiment(const ScalingConfig& config) {
  if (config.d_ks.empty() || config.n_keys.empty()) throw Error("explain-scaling: the d_k and key lists must not be empty");
  for (size_t d : config.d_ks)
    if (d == 0 || d > 65536) throw Error("explain-scaling: d_k " + std::to_string(d) + " outside [1, 65536]");
  for (size_t m : config.n_keys)
    if (m < 2 || m > 65536) throw Error("explain-scaling: key count " + std::to_string(m) + " outside [2, 65536]");
  if (config.n_samples < 2 || config.n_samples > 10'000'000)
    throw Error("explain-scaling: samples " + std::to_string(config.n_samples) + " outside [2, 10000000]");
  // A block holds m keys of d_k floats (and as many queries): checked before anything is allocated, so a large
  // pair of lists is refused with its size rather than taking the machine's memory (65536 × 65536 is 16 GiB).
  for (size_t m : config.n_keys)
    for (size_t d : config.d_ks)
      if (m * d > kMaxKeyFloats)
        throw Error("explain-scaling: " + std::to_string(m) + " keys of d_k " + std::to_string(d) + " are " +
                    std::to_string(m * d * sizeof(float) >> 20) + " MiB of keys per block, over the " +
                    std::to_string(kMaxKeyFloats * sizeof(float) >> 20) +
                    " MiB this tool holds: use fewer keys (--keys) or a smaller d_k (--dk)");

  ScalingReport rep;
  rep.config = config;
  const size_t N = config.n_samples;
  ops::GemmWorkspace gws;
  std::vector<float> Q, K, S, P;
  for (size_t mi = 0; mi < config.n_keys.size(); ++mi) {
    const size_t m = config.n_keys[mi];
    for (size_t d : config.d_ks) {
      NormalRng rng(config.seed, d, m);
      Sharpness scaled{d, m, true}, unscaled{d, m, false};
      std::vector<double> dots;
      dots.reserve(N);
      const size_t block_rows = std::clamp<size_t>(kMaxScoreFloats / m, 1, m);
      Q.resize(block_rows * d), K.resize(m * d), S.resize(block_rows * m), P.resize(block_rows * m);
      const float scale = 1.0f / std::sqrt(static_cast<float>(d));  // what the executor passes attention
      for (size_t row0 = 0; row0 < N; row0 += block_rows) {
        const size_t R = std::min(block_rows, N - row0);
        rng.fill(Q.data(), R * d);
        rng.fill(K.data(), m * d);
        // S[R][m] = Q[R][d] · K[m][d]ᵀ: one attention score row per query.
        ops::gemm_unpacked(config.isa, R, m, d, 1.0f, Q.data(), d, K.data(), d, ops::BLayout::nk, S.data(), m, gws,
                           config.n_threads);
        for (size_t r = 0; r < R; ++r) dots.push_back(S[r * m + r]);
        ops::softmax_rows(config.isa, R, m, S.data(), m, P.data(), m, scale, {}, config.n_threads);
        add_row_stats(P.data(), R, m, scaled);
        ops::softmax_rows(config.isa, R, m, S.data(), m, P.data(), m, 1.0f, {}, config.n_threads);
        add_row_stats(P.data(), R, m, unscaled);
      }
      for (Sharpness* sh : {&scaled, &unscaled}) {
        sh->max_prob /= static_cast<double>(N), sh->entropy /= static_cast<double>(N);
        sh->saturation /= static_cast<double>(N);
        rep.sharpness.push_back(*sh);
      }
      if (mi == 0) {
        DotMoments dm;
        dm.d_k = d, dm.n = N;
        sample_mean_var(dots, dm.mean, dm.var);
        const double rd = std::sqrt(static_cast<double>(d)), dd = static_cast<double>(d);
        dm.mean_scaled = dm.mean / rd, dm.var_scaled = dm.var / dd;
        dm.se_mean = std::sqrt(dd / static_cast<double>(N));
        dm.se_var = std::sqrt((2 * dd * dd + 6 * dd) / static_cast<double>(N));
        dm.se_mean_scaled = dm.se_mean / rd, dm.se_var_scaled = dm.se_var / dd;
        rep.moments.push_back(dm);
      }
    }
  }
  rep.textbook_inputs = {{1, 2, 3}, {10, 20, 30}};
  for (const auto& in : rep.textbook_inputs) {
    std::vector<float> out(in.size());
    ops::softmax_rows(config.isa, 1, in.size(), in.data(), in.size(), out.data(), out.size());
    rep.textbook_probs.push_back(out);
  }
  return rep;
}

std::string scaling_svg(const ScalingReport& rep) {
  static const char* colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"};
  LinePanel ent{"Mean softmax entropy (nats)", "d_k", "entropy (nats)", true, 0, 1, {}};
  LinePanel mx{"Mean largest probability", "d_k", "max probability", true, 0, 1, {}};
  double max_log_m = 0;
  for (size_t mi = 0; mi < rep.config.n_keys.size(); ++mi) {
    const size_t m = rep.config.n_keys[mi];
    const std::string color = colors[mi % 6], ms = " m=" + std::to_string(m);
    max_log_m = std::max(max_log_m, std::log(static_cast<double>(m)));
    for (bool scaled : {true, false}) {
      LineSeries e{(scaled ? "scaled q.k/sqrt(d_k)," : "unscaled q.k,") + ms, {}, {}, color, !scaled, true};
      LineSeries x = e;
      for (const auto& s : rep.sharpness)
        if (s.n_keys == m && s.scaled == scaled) {
          e.x.push_back(static_cast<double>(s.d_k)), e.y.push_back(s.entropy);
          x.x.push_back(static_cast<double>(s.d_k)), x.y.push_back(s.max_prob);
        }
      ent.series.push_back(e);
      mx.series.push_back(x);
    }
    LineSeries bound{"uniform bound ln " + std::to_string(m), {}, {}, color, true, false};
    for (size_t d : rep.config.d_ks)
      bound.x.push_back(static_cast<double>(d)), bound.y.push_back(std::log(static_cast<double>(m)));
    bound.color = mi == 0 ? "#9ecae1" : mi == 1 ? "#f4a3a3" : "#bbbbbb";  // lighter than the data lines
    ent.series.push_back(bound);
  }
  ent.y_max = std::ceil(max_log_m + 0.25);
  return svg_line_panels("Why divide by sqrt(d_k): softmax over m keys of q.k, q and k ~ N(0, I), N = " +
                             std::to_string(rep.config.n_samples) + " rows",
                         {ent, mx});
}

}  // namespace sqrtdk
