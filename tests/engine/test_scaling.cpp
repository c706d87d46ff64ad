// The √d_k experiment (engine/src/scaling_experiment.*): dot-product moments against theory, softmax sharpness
// with and without the scale, determinism, the textbook rows, the plot.
#include <doctest/doctest.h>

#include "tests/common/isas.h"

#include "tests/common/close.h"

#include <sqrtdk/error.h>

#include "tools/explain/scaling_experiment.h"
#include "tests/common/xml_check.h"

#include <cmath>
#include <string>

using namespace sqrtdk;

namespace {

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t i = s.find(what); i != std::string::npos; i = s.find(what, i + 1)) ++n;
  return n;
}

}  // namespace

// Standard errors (the bound below).
// q, k have iid N(0, 1) components; q·k = Σ_{i=1..d} Y_i with Y_i = q_i k_i iid, E Y = 0, E Y² = E q² E k² = 1,
// E Y⁴ = E q⁴ E k⁴ = 3 · 3 = 9. Hence E[q·k] = 0, σ² = Var(q·k) = d, and the fourth moment of the sum of d iid
// zero-mean terms is μ4 = d E Y⁴ + 3 d(d − 1) (E Y²)² = 9d + 3d² − 3d = 3d² + 6d.
// For N iid samples: SE(mean) = σ/√N = √(d/N); the sample variance s² has Var(s²) = (μ4 − σ⁴ (N − 3)/(N − 1))/N
// ≈ (μ4 − σ⁴)/N = (2d² + 6d)/N, so SE(s²) = √((2d² + 6d)/N) (d = 1024, N = 10⁴: 14.5, i.e. 1.4 %).
// Scaled by 1/√d: SE(mean) = √(1/N), SE(s²) = √((2 + 6/d)/N).
// The N pairs are independent: each query and each key vector enters exactly one pair (the diagonal of its
// block of S = Q·Kᵀ). |sample − theory| < 5 SE fails by chance with probability ≈ 6e-7 per check (normal
// approximation; 20 checks here); the seed is fixed anyway, so the test is deterministic.
TEST_CASE("scaling: dot-product mean and variance within 5 standard errors of theory (0, d_k; 0, 1)") {
  ScalingConfig c;
  c.n_keys = {64};
  c.n_samples = 10000;
  const ScalingReport r = run_scaling_experiment(c);
  REQUIRE(r.moments.size() == c.d_ks.size());
  for (const DotMoments& m : r.moments) {
    CAPTURE(m.d_k);
    const double d = static_cast<double>(m.d_k), N = static_cast<double>(m.n);
    CHECK(m.n == 10000);
    // The report computes the same formula in double (a few roundings): 1e-12 relative.
    SQRTDK_CHECK_REL(m.se_var, std::sqrt((2 * d * d + 6 * d) / N), 1e-12, "same formula in double");
    SQRTDK_CHECK_REL(m.se_var_scaled, std::sqrt((2 + 6 / d) / N), 1e-12, "same formula in double");
    CHECK(std::fabs(m.mean) < 5 * std::sqrt(d / N));
    CHECK(std::fabs(m.var - d) < 5 * m.se_var);
    CHECK(std::fabs(m.mean_scaled) < 5 * std::sqrt(1 / N));
    CHECK(std::fabs(m.var_scaled - 1) < 5 * m.se_var_scaled);
  }
}

TEST_CASE("scaling: scaled softmax entropy stays near constant across d_k while the unscaled one falls") {
  ScalingConfig c;
  c.n_keys = {64};
  c.n_samples = 2000;
  const ScalingReport r = run_scaling_experiment(c);
  REQUIRE(r.sharpness.size() == 2 * c.d_ks.size());
  const double log_m = std::log(64.0);
  double lo = 1e9, hi = -1e9;
  for (size_t i = 0; i < c.d_ks.size(); ++i) {
    const Sharpness& s = r.sharpness[2 * i];
    const Sharpness& u = r.sharpness[2 * i + 1];
    CAPTURE(s.d_k);
    REQUIRE(s.scaled);
    REQUIRE(!u.scaled);
    lo = std::min(lo, s.entropy), hi = std::max(hi, s.entropy);
    CHECK(s.entropy < log_m);
    CHECK(u.entropy <= s.entropy + 1e-12);
    if (i > 0) {  // unscaled: every step up in d_k sharpens the rows
      const Sharpness& prev = r.sharpness[2 * (i - 1) + 1];
      CHECK(u.entropy < prev.entropy);
      CHECK(u.max_prob > prev.max_prob);
      CHECK(u.saturation < prev.saturation);
    }
  }
  // Scaled scores have variance 1 for every d_k; only their shape changes (a sum of d_k products is heavier-tailed
  // than normal at small d_k), so the entropy moves by a few percent of ln m, not by a factor (measured, N = 10⁴:
  // 3.684 .. 3.719 nats of ln 64 = 4.159, while unscaled falls from 3.39 to 0.13).
  CHECK(hi - lo < 0.1 * log_m);
  // At d_k = 1024 the unscaled scores have standard deviation 32: rows are nearly one-hot.
  const Sharpness& u_last = r.sharpness.back();
  CHECK(u_last.entropy < 0.3);
  CHECK(u_last.max_prob > 0.9);
  CHECK(u_last.saturation < 0.15);
}

TEST_CASE("scaling: deterministic for a seed and any thread count; another seed differs") {
  ScalingConfig c;
  c.d_ks = {3, 64};
  c.n_keys = {17, 40};  // 120 rows: partial last blocks of rows (few blocks: each is an OpenMP region at 2 threads)
  c.n_samples = 120;
  c.n_threads = 1;
  const ScalingReport a = run_scaling_experiment(c);
  c.n_threads = 2;
  const ScalingReport b = run_scaling_experiment(c);
  c.seed += 1;
  const ScalingReport other = run_scaling_experiment(c);
  REQUIRE(a.moments.size() == 2);
  REQUIRE(a.sharpness.size() == 8);
  for (size_t i = 0; i < a.moments.size(); ++i) {
    CHECK(a.moments[i].mean == b.moments[i].mean);  // bit-identical
    CHECK(a.moments[i].var == b.moments[i].var);
    CHECK(a.moments[i].var != other.moments[i].var);
  }
  for (size_t i = 0; i < a.sharpness.size(); ++i) {
    CHECK(a.sharpness[i].entropy == b.sharpness[i].entropy);
    CHECK(a.sharpness[i].max_prob == b.sharpness[i].max_prob);
    CHECK(a.sharpness[i].saturation == b.sharpness[i].saturation);
  }
}

TEST_CASE("scaling: textbook rows softmax([1,2,3]) and softmax([10,20,30]) on every ISA") {
  for (Isa isa : test::f32_isas()) {
    CAPTURE(isa_name(isa));
    ScalingConfig c;
    c.d_ks = {2};
    c.n_keys = {2};
    c.n_samples = 2;
    c.isa = isa;
    const ScalingReport r = run_scaling_experiment(c);
    REQUIRE(r.textbook_probs.size() == 2);
    const auto& p = r.textbook_probs[0];
    const auto& q = r.textbook_probs[1];
    // The figures as quoted (4 decimals / 3 significant digits)...
    CHECK(std::fabs(p[0] - 0.0900) < 5e-5);
    CHECK(std::fabs(p[1] - 0.2447) < 5e-5);
    CHECK(std::fabs(p[2] - 0.6652) < 5e-5);
    CHECK(std::fabs(q[0] - 2.06e-9) < 5e-12);
    CHECK(std::fabs(q[1] - 4.54e-5) < 5e-8);
    CHECK(std::fabs(q[2] - 0.99995) < 5e-6);
    // ...and exactly, within softmax_rows' accuracy (4 ulp + n·2^-24 relative, see softmax.h): 1e-6 relative.
    const double z1 = 1 + std::exp(-1.0) + std::exp(-2.0), z2 = 1 + std::exp(-10.0) + std::exp(-20.0);
    const double want_p[3] = {std::exp(-2.0) / z1, std::exp(-1.0) / z1, 1 / z1};
    const double want_q[3] = {std::exp(-20.0) / z2, std::exp(-10.0) / z2, 1 / z2};
    for (int i = 0; i < 3; ++i) {
      CHECK(std::fabs(p[i] - want_p[i]) <= 1e-6 * want_p[i]);
      CHECK(std::fabs(q[i] - want_q[i]) <= 1e-6 * want_q[i]);
    }
  }
}

TEST_CASE("scaling: the plot is well-formed SVG with a line per series") {
  ScalingConfig c;
  c.d_ks = {2, 16, 64};
  c.n_keys = {8, 32};
  c.n_samples = 100;
  const std::string svg = scaling_svg(run_scaling_experiment(c));
  std::string why;
  CHECK_MESSAGE(test::xml_well_formed(svg, &why), why);
  CHECK(count(svg, "<g class=\"panel\"") == 2);
  // Entropy panel: scaled + unscaled + ln m bound per m; max-probability panel: scaled + unscaled per m.
  CHECK(count(svg, "<polyline class=\"series\"") == 3 * 2 + 2 * 2);
  CHECK(svg.find("log scale") != std::string::npos);
}

TEST_CASE("scaling: bad configurations throw sqrtdk::Error") {
  ScalingConfig c;
  c.n_samples = 10;
  c.d_ks = {};
  CHECK_THROWS_AS(run_scaling_experiment(c), Error);
  c.d_ks = {0};
  CHECK_THROWS_AS(run_scaling_experiment(c), Error);
  c.d_ks = {4};
  c.n_keys = {1};
  CHECK_THROWS_AS(run_scaling_experiment(c), Error);
  c.n_keys = {4};
  c.n_samples = 1;
  CHECK_THROWS_AS(run_scaling_experiment(c), Error);
}
