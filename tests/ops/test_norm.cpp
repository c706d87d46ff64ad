// LayerNorm / RMSNorm (ops/norm): every ISA against the double-statistics reference, over widths that hit every
// vector tail, with strided rows, in place, and across thread counts.
#include <doctest/doctest.h>

#include "tests/common/close.h"

#include "ops/norm/norm.h"
#include "ops/norm/norm_kernels.h"

#include <sqrtdk/error.h>
#include <sqrtdk/isa.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

using namespace sqrtdk;

namespace {

const size_t kWidths[] = {1, 7, 8, 9, 15, 16, 17, 31, 33, 64, 768, 1000};

// Tolerance: |simd - ref| <= kNormTol * (1 + |ref|). The SIMD kernels keep float accumulators (4 partial sums per
// lane) where ref uses double: for d <= 1000 and inputs of mean 3, spread 2, the mean and variance carry a relative
// error near 1e-6 at worst, rstd half of that, and the output adds ~2 float roundings. Measured (SQRTDK_VERBOSE=1
// prints it; Zen 5, 2026-11-30): layer_norm 2.6e-7, rms_norm 1.4e-7 on avx2 and avx512.
constexpr double kNormTol = 2e-5;

struct NormCase {
  size_t n_rows, d, ld_src, ld_dst;
  std::vector<float> src, weight, bias;
};

NormCase make_case(size_t n_rows, size_t d, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> x_dist(3.0f, 2.0f);  // a non-zero mean exercises the centering
  std::uniform_real_distribution<float> w_dist(0.5f, 1.5f), b_dist(-1.0f, 1.0f);
  NormCase c{n_rows, d, d + 5, d + 3, {}, {}, {}};
  c.src.resize(n_rows * c.ld_src);
  for (float& v : c.src) v = x_dist(rng);
  c.weight.resize(d);
  c.bias.resize(d);
  for (float& v : c.weight) v = w_dist(rng);
  for (float& v : c.bias) v = b_dist(rng);
  return c;
}

double max_rel_err(const std::vector<float>& got, const std::vector<float>& want, size_t n_rows, size_t d, size_t ld) {
  double worst = 0.0;
  for (size_t r = 0; r < n_rows; ++r)
    for (size_t i = 0; i < d; ++i) {
      const double g = got[r * ld + i], w = want[r * ld + i];
      worst = std::max(worst, std::abs(g - w) / (1.0 + std::abs(w)));
    }
  return worst;
}

}  // namespace

TEST_CASE("norm: layer_norm every ISA matches the reference over every tail") {
  for (const auto& kernel : ops::runnable_kernels(ops::norm_kernels())) {
    const Isa isa = kernel.isa;
    CAPTURE(std::string(kernel.name));
    double worst = 0.0;
    for (size_t d : kWidths) {
      CAPTURE(d);
      NormCase c = make_case(3, d, static_cast<uint32_t>(d));
      std::vector<float> want(c.n_rows * c.ld_dst, -7.0f), got(c.n_rows * c.ld_dst, -7.0f);
      ops::layer_norm_ref(c.src.data(), c.n_rows, d, c.ld_src, c.weight.data(), c.bias.data(), 1e-5f, want.data(),
                          c.ld_dst);
      ops::layer_norm(isa, c.src.data(), c.n_rows, d, c.ld_src, c.weight.data(), c.bias.data(), 1e-5f, got.data(),
                      c.ld_dst);
      const double err = max_rel_err(got, want, c.n_rows, d, c.ld_dst);
      CHECK(err <= kNormTol);
      worst = std::max(worst, err);
      // Padding between rows is never written.
      for (size_t r = 0; r < c.n_rows; ++r)
        for (size_t i = d; i < c.ld_dst; ++i) CHECK(got[r * c.ld_dst + i] == -7.0f);
      // No bias = zero bias.
      ops::layer_norm(isa, c.src.data(), c.n_rows, d, c.ld_src, c.weight.data(), nullptr, 1e-5f, got.data(), c.ld_dst);
      ops::layer_norm_ref(c.src.data(), c.n_rows, d, c.ld_src, c.weight.data(), nullptr, 1e-5f, want.data(), c.ld_dst);
      CHECK(max_rel_err(got, want, c.n_rows, d, c.ld_dst) <= kNormTol);
    }
    if (verbose()) std::printf("layer_norm %s: max |simd - ref| / (1 + |ref|) = %.3g\n", kernel.name, worst);
  }
}

TEST_CASE("norm: rms_norm every ISA matches the reference over every tail") {
  for (const auto& kernel : ops::runnable_kernels(ops::norm_kernels())) {
    const Isa isa = kernel.isa;
    CAPTURE(std::string(kernel.name));
    double worst = 0.0;
    for (size_t d : kWidths) {
      CAPTURE(d);
      NormCase c = make_case(3, d, static_cast<uint32_t>(100 + d));
      std::vector<float> want(c.n_rows * c.ld_dst), got(c.n_rows * c.ld_dst);
      ops::rms_norm_ref(c.src.data(), c.n_rows, d, c.ld_src, c.weight.data(), 1e-6f, want.data(), c.ld_dst);
      ops::rms_norm(isa, c.src.data(), c.n_rows, d, c.ld_src, c.weight.data(), 1e-6f, got.data(), c.ld_dst);
      const double err = max_rel_err(got, want, c.n_rows, d, c.ld_dst);
      CHECK(err <= kNormTol);
      worst = std::max(worst, err);
    }
    if (verbose()) std::printf("rms_norm %s: max |simd - ref| / (1 + |ref|) = %.3g\n", kernel.name, worst);
  }
}

TEST_CASE("norm: reference matches the formulas on a hand-checked row") {
  // x = [1, 2, 3, 4]: mean 2.5, biased var 1.25; mean(x^2) = 7.5.
  const float x[4] = {1, 2, 3, 4}, w[4] = {1, 1, 2, 1}, b[4] = {0, 0, 0, 1};
  float y[4];
  ops::layer_norm_ref(x, 1, 4, 4, w, b, 1e-5f, y, 4);
  const double rstd = 1.0 / std::sqrt(1.25 + 1e-5);
  // The reference accumulates in double and rounds once to float; eps = 1e-5f is not exactly 1e-5 (relative
  // difference 2.5e-8 of eps, 2e-13 of the variance): within 1 ulp of the exact value.
  SQRTDK_CHECK_ULP(y[0], -1.5 * rstd, 1, "double reference, one rounding");
  SQRTDK_CHECK_ULP(y[2], 2 * 0.5 * rstd, 1, "double reference, one rounding");
  SQRTDK_CHECK_ULP(y[3], 1.5 * rstd + 1, 1, "double reference, one rounding");
  ops::rms_norm_ref(x, 1, 4, 4, w, 1e-5f, y, 4);
  SQRTDK_CHECK_ULP(y[1], 2.0 / std::sqrt(7.5 + 1e-5), 1, "double reference, one rounding");
}

TEST_CASE("norm: in place equals out of place, any thread count gives the same bits, constant rows are finite") {
  for (const auto& kernel : ops::runnable_kernels(ops::norm_kernels())) {
    const Isa isa = kernel.isa;
    CAPTURE(std::string(kernel.name));
    // 97 rows x 768 = 74 496 elements: above the 2^16 under which the op stays on one thread, so threads split.
    const size_t rows = 97;
    NormCase c = make_case(rows, 768, 7);
    std::vector<float> out1(rows * c.ld_src), out2(rows * c.ld_src), inplace = c.src;
    ops::layer_norm(isa, c.src.data(), rows, 768, c.ld_src, c.weight.data(), c.bias.data(), 1e-5f, out1.data(), c.ld_src, 1);
    for (int threads : {2, 3, 4}) {  // items of 21 rows (16 Ki floats): 5 items, more than threads
      CAPTURE(threads);
      inplace = c.src;
      ops::layer_norm(isa, c.src.data(), rows, 768, c.ld_src, c.weight.data(), c.bias.data(), 1e-5f, out2.data(),
                      c.ld_src, threads);
      ops::layer_norm(isa, inplace.data(), rows, 768, c.ld_src, c.weight.data(), c.bias.data(), 1e-5f,
                      inplace.data(), c.ld_src, threads);
      for (size_t r = 0; r < rows; ++r)
        for (size_t i = 0; i < 768; ++i) {
          REQUIRE(out1[r * c.ld_src + i] == out2[r * c.ld_src + i]);
          REQUIRE(out1[r * c.ld_src + i] == inplace[r * c.ld_src + i]);
        }
    }
    ops::rms_norm(isa, c.src.data(), rows, 768, c.ld_src, c.weight.data(), 1e-5f, out1.data(), c.ld_src, 1);
    for (int threads : {2, 3, 4}) {
      CAPTURE(threads);
      ops::rms_norm(isa, c.src.data(), rows, 768, c.ld_src, c.weight.data(), 1e-5f, out2.data(), c.ld_src, threads);
      for (size_t i = 0; i < out1.size(); ++i) REQUIRE(out1[i] == out2[i]);
    }

    // A constant row has variance 0: LayerNorm gives the bias exactly (x - mean = 0), RMSNorm of zeros gives 0.
    std::vector<float> constant(33, 4.25f), y(33);
    ops::layer_norm(isa, constant.data(), 1, 33, 33, c.weight.data(), c.bias.data(), 1e-5f, y.data(), 33);
    for (size_t i = 0; i < 33; ++i) CHECK(y[i] == c.bias[i]);
    std::vector<float> zeros(33, 0.0f);
    ops::rms_norm(isa, zeros.data(), 1, 33, 33, c.weight.data(), 1e-5f, y.data(), 33);
    for (size_t i = 0; i < 33; ++i) CHECK(y[i] == 0.0f);
  }
}

TEST_CASE("norm: bad arguments are errors naming the problem") {
  std::vector<float> x(16, 1.0f), w(16, 1.0f), y(16);
  const Isa isa = default_isa();
  CHECK_THROWS_WITH_AS(ops::layer_norm(isa, x.data(), 1, 0, 16, w.data(), nullptr, 1e-5f, y.data(), 16),
                       doctest::Contains("d must be >= 1"), Error);
  CHECK_THROWS_WITH_AS(ops::rms_norm(isa, x.data(), 1, 16, 8, w.data(), 1e-5f, y.data(), 16),
                       doctest::Contains("ld_src 8"), Error);
  CHECK_THROWS_WITH_AS(ops::rms_norm(isa, x.data(), 1, 16, 16, w.data(), 0.0f, y.data(), 16),
                       doctest::Contains("eps must be"), Error);
  CHECK_THROWS_AS(ops::rms_norm(isa, x.data(), 1, 16, 16, nullptr, 1e-5f, y.data(), 16), Error);
  CHECK_NOTHROW(ops::rms_norm(isa, nullptr, 0, 16, 16, nullptr, 1e-5f, nullptr, 16));  // no rows: nothing to do
}
