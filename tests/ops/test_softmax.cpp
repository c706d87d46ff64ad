// Softmax (ops/softmax): the textbook rows, edge behaviour, exp_rr2_p5's ulp error, online softmax; every ISA the
// machine has against softmax_rows_ref.
#include <doctest/doctest.h>

#include "ops/softmax/softmax.h"
#include "ops/softmax/softmax_kernels.h"

#include <sqrtdk/error.h>
#include <sqrtdk/isa.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

using namespace sqrtdk;
using namespace sqrtdk::ops;

namespace {

const float kInf = std::numeric_limits<float>::infinity();

std::vector<float> softmax_of(Isa isa, std::vector<float> row, float scale = 1.0f, const SoftmaxMask& mask = {}) {
  std::vector<float> out(row.size());
  softmax_rows(isa, 1, row.size(), row.data(), row.size(), out.data(), out.size(), scale, mask);
  return out;
}

float float_from_bits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

// Error of y against the exact value e in units of the last place of e (as a float; subnormal ulp 2^-149).
double ulp_error(float y, double e) {
  if (std::isinf(e) || e > std::numeric_limits<float>::max()) return std::isinf(y) ? 0.0 : 1e9;
  int exp2 = 0;
  std::frexp(e, &exp2);  // e = m * 2^exp2, m in [0.5, 1)
  const double ulp = std::ldexp(1.0, std::max(exp2 - 24, -149));
  return std::fabs(double(y) - e) / ulp;
}

}  // namespace

TEST_CASE("softmax: textbook rows, every ISA") {
  for (const auto& kernel : runnable_kernels(softmax_kernels())) {
    const Isa isa = kernel.isa;
    CAPTURE(std::string(kernel.name));
    auto a = softmax_of(isa, {1, 2, 3});
    CHECK(a[0] == doctest::Approx(0.0900306).epsilon(1e-5));
    CHECK(a[1] == doctest::Approx(0.2447285).epsilon(1e-5));
    CHECK(a[2] == doctest::Approx(0.6652410).epsilon(1e-5));
    auto b = softmax_of(isa, {10, 20, 30});
    CHECK(b[0] == doctest::Approx(2.0610600e-9).epsilon(1e-5));
    CHECK(b[1] == doctest::Approx(4.5397868e-5).epsilon(1e-5));
    CHECK(b[2] == doctest::Approx(0.9999546).epsilon(1e-6));
    // Shifted by the max: no overflow, no NaN, same as [0, 1, 2].
    auto c = softmax_of(isa, {1000, 1001, 1002});
    auto d = softmax_of(isa, {0, 1, 2});
    for (int i = 0; i < 3; ++i) CHECK(c[i] == d[i]);
    // Equal values: uniform.
    for (size_t n : {1, 7, 16, 33, 1000}) {
      auto u = softmax_of(isa, std::vector<float>(n, -3.5f));
      for (float v : u) CHECK(v == doctest::Approx(1.0 / n).epsilon(1e-6));
    }
  }
}

TEST_CASE("softmax: fully masked rows give zeros, NaN propagates, +inf gives NaN") {
  for (const auto& kernel : runnable_kernels(softmax_kernels())) {
    const Isa isa = kernel.isa;
    CAPTURE(std::string(kernel.name));
    for (size_t n : {1, 5, 16, 17, 100}) {
      CAPTURE(n);
      for (float v : softmax_of(isa, std::vector<float>(n, -kInf))) CHECK(v == 0.0f);
      // Additive mask of all -inf over finite scores: zeros too.
      std::vector<float> mask(n, -kInf);
      for (float v : softmax_of(isa, std::vector<float>(n, 2.0f), 1.0f, {mask.data(), n, false, 0})) CHECK(v == 0.0f);
      // One NaN anywhere: the whole row is NaN (also when every other value is -inf).
      for (size_t at : {size_t{0}, n / 2, n - 1}) {
        std::vector<float> row(n, 1.0f);
        row[at] = std::nanf("");
        for (float v : softmax_of(isa, row)) CHECK(std::isnan(v));
        std::vector<float> masked(n, -kInf);
        masked[at] = std::nanf("");
        for (float v : softmax_of(isa, masked)) CHECK(std::isnan(v));
      }
    }
    auto p = softmax_of(isa, {1.0f, kInf, 2.0f});
    for (float v : p) CHECK(std::isnan(v));
  }
}

TEST_CASE("softmax: rows of 1 .. 100000 sum to 1 within 1e-6, and match the reference") {
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 4.0f);
  for (size_t n : {1, 2, 7, 8, 9, 15, 16, 17, 31, 33, 64, 100, 1000, 4099, 32768, 100000}) {
    std::vector<float> x(n);
    for (float& v : x) v = dist(rng);
    std::vector<float> ref(n);
    softmax_rows_ref(1, n, x.data(), n, ref.data(), n);
    for (const auto& kernel : runnable_kernels(softmax_kernels())) {
      const Isa isa = kernel.isa;
      CAPTURE(std::string(kernel.name));
      CAPTURE(n);
      auto y = softmax_of(isa, x);
      double sum = 0.0;
      for (float v : y) sum += v;
      CHECK(std::fabs(sum - 1.0) < 1e-6);
      // Each value: exp within 2 ulp, the float sum within n*2^-24 relative (|max error| found ~ n*6e-8 worst),
      // normalization 1 ulp; compare relative to the value plus 1e-12 absolute for tiny probabilities.
      double worst = 0.0;
      for (size_t j = 0; j < n; ++j)
        worst = std::max(worst, std::fabs(double(y[j]) - ref[j]) / (std::fabs(double(ref[j])) + 1e-30));
      CHECK(worst < 4 * 0x1p-23 + double(n) * 0x1p-24);
    }
  }
}

TEST_CASE("softmax: scale, additive mask, causal mask and strides against the reference") {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> dist(-5.0f, 5.0f);
  for (size_t n_cols : {1, 9, 16, 31, 64, 129}) {
    const size_t n_rows = 13, ld = n_cols + 3;
    std::vector<float> x(n_rows * ld), add(n_rows * ld);
    for (float& v : x) v = dist(rng);
    for (float& v : add) v = (rng() % 5 == 0) ? -kInf : dist(rng);
    for (float scale : {1.0f, 0.125f, -2.0f}) {
      for (int mode = 0; mode < 3; ++mode) {
        SoftmaxMask mask;
        if (mode == 1) mask = {add.data(), ld, false, 0};
        if (mode == 2) mask = {nullptr, 0, true, 2};
        std::vector<float> ref(n_rows * ld, 7.0f), y(n_rows * ld, 7.0f);
        softmax_rows_ref(n_rows, n_cols, x.data(), ld, ref.data(), ld, scale, mask);
        for (const auto& kernel : runnable_kernels(softmax_kernels())) {
          const Isa isa = kernel.isa;
          CAPTURE(std::string(kernel.name));
          for (int threads : {1, 2}) {
            if (threads == 2 && scale != 0.125f) continue;  // the row split is tested once per shape (keeps it fast)
            CAPTURE(n_cols);
            CAPTURE(mode);
            softmax_rows(isa, n_rows, n_cols, x.data(), ld, y.data(), ld, scale, mask, threads);
            for (size_t r = 0; r < n_rows; ++r) {
              for (size_t j = 0; j < n_cols; ++j)  // 4 ulp-ish: exp 2 ulp + sum + division
                CHECK(y[r * ld + j] == doctest::Approx(ref[r * ld + j]).epsilon(1e-6));
              for (size_t j = n_cols; j < ld; ++j) CHECK(y[r * ld + j] == 7.0f);  // padding untouched
            }
          }
        }
      }
    }
  }
  // In place.
  std::vector<float> x = {3, 1, 2, 5, 4};
  std::vector<float> ref(5);
  softmax_rows_ref(1, 5, x.data(), 5, ref.data(), 5);
  for (const auto& kernel : runnable_kernels(softmax_kernels())) {
    const Isa isa = kernel.isa;
    CAPTURE(std::string(kernel.name));
    auto y = x;
    softmax_rows(isa, 1, 5, y.data(), 5, y.data(), 5);
    for (int j = 0; j < 5; ++j) CHECK(y[j] == doctest::Approx(ref[j]).epsilon(1e-6));
  }
  std::vector<float> out(4);
  CHECK_THROWS_AS(softmax_rows(Isa::ref, 2, 4, x.data(), 3, out.data(), 4), Error);
}

TEST_CASE("softmax: exp_rr2_p5 max ulp error over the float range (every 61st float) and special values") {
  // Below 2^-25 in magnitude exp rounds to 1; above 88.73 to inf, below -103.98 to 0: the sweep covers the whole
  // interesting range (|x| in [2^-26, 110]) at stride 61 (8.4M values), plus every special value. The full sweep
  // over every float is `bench-softmax --exp-ulp`.
  const uint32_t lo = 0x32800000u, hi = 0x42DC0000u;  // 2^-26 .. 110
  const uint32_t stride = 61;
  std::vector<float> x;
  x.reserve(2 * (hi - lo) / stride + 64);
  for (uint32_t b = lo; b < hi; b += stride) {
    x.push_back(float_from_bits(b));
    x.push_back(-float_from_bits(b));
  }
  const float specials[] = {0.0f, -0.0f, 1e-30f, -1e-30f, 88.72283f, 88.72284f, 88.7229f, 89.0f, 100.0f, 1e30f,
                            -87.33654f, -87.34f, -100.0f, -103.97f, -103.98f, -104.0f, -1e30f, kInf, -kInf,
                            std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::max(),
                            -std::numeric_limits<float>::max()};
  for (float s : specials) x.push_back(s);
  std::vector<float> y(x.size());
  for (const auto& kernel : runnable_kernels(softmax_kernels())) {
    const Isa isa = kernel.isa;
    CAPTURE(std::string(kernel.name));
    exp_rr2_p5(isa, x.data(), y.data(), x.size());
    double worst = 0.0;
    float worst_x = 0.0f;
    for (size_t i = 0; i < x.size(); ++i) {
      const double e = std::exp(double(x[i]));
      const double err = ulp_error(y[i], e);
      if (err > worst) worst = err, worst_x = x[i];
    }
    CAPTURE(worst_x);
    MESSAGE(std::string(kernel.name) << ": exp max error " << worst << " ulp at x = " << worst_x);
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    // The sanitizer presets build with -O2 (RelWithDebInfo), where GCC evaluates the avx512 polynomial in another
    // order: measured 2.198 ulp at x = 5.937 there (release -O3: 1.965 on this sweep, 1.981 over all floats). The
    // 2-ulp bound documented in softmax.h is the release build's; this build is held to what it measured.
    const double bound = 2.25;
#else
    const double bound = kExpRr2P5MaxUlp;
#endif
    CHECK(worst <= bound);
    float nan_in = std::nanf(""), nan_out = 0.0f;
    exp_rr2_p5(isa, &nan_in, &nan_out, 1);
    CHECK(std::isnan(nan_out));
    float big[2] = {kInf, 1000.0f}, big_out[2];
    exp_rr2_p5(isa, big, big_out, 2);
    CHECK(std::isinf(big_out[0]));
    CHECK(std::isinf(big_out[1]));
    float small[2] = {-kInf, -1000.0f}, small_out[2] = {1, 1};
    exp_rr2_p5(isa, small, small_out, 2);
    CHECK(small_out[0] == 0.0f);
    CHECK(small_out[1] == 0.0f);
  }
}

TEST_CASE("softmax: online (streaming) state over blocks equals the one-pass softmax") {
  std::mt19937 rng(3);
  std::normal_distribution<float> dist(0.0f, 3.0f);
  const size_t n = 1000;
  std::vector<float> x(n);
  for (float& v : x) v = dist(rng);
  std::vector<float> ref(n);
  softmax_rows_ref(1, n, x.data(), n, ref.data(), n);
  for (const auto& kernel : runnable_kernels(softmax_kernels())) {
    const Isa isa = kernel.isa;
    CAPTURE(std::string(kernel.name));
    // Stream in blocks of 1, 17, 64, 333: keep a rescaled copy of all exps so far (the "accumulator").
    for (size_t block : {1, 17, 64, 333}) {
      OnlineSoftmaxState st;
      std::vector<float> acc(n);
      for (size_t b = 0; b < n; b += block) {
        const size_t len = std::min(block, n - b);
        std::copy(x.begin() + b, x.begin() + b + len, acc.begin() + b);
        const float f = online_softmax_update(isa, st, acc.data() + b, len);
        for (size_t j = 0; j < b; ++j) acc[j] *= f;
      }
      for (size_t j = 0; j < n; ++j) CHECK(acc[j] / st.sum == doctest::Approx(ref[j]).epsilon(1e-5));
    }
    // Merge of two halves.
    OnlineSoftmaxState a, b;
    std::vector<float> pa(x.begin(), x.begin() + 400), pb(x.begin() + 400, x.end());
    online_softmax_update(isa, a, pa.data(), pa.size());
    online_softmax_update(isa, b, pb.data(), pb.size());
    float fa = 0, fb = 0;
    OnlineSoftmaxState m = online_softmax_merge(a, b, fa, fb);
    CHECK(pa[5] * fa / m.sum == doctest::Approx(ref[5]).epsilon(1e-5));
    CHECK(pb[5] * fb / m.sum == doctest::Approx(ref[405]).epsilon(1e-5));
    // All -inf block: unchanged state, zeros.
    OnlineSoftmaxState e;
    std::vector<float> masked(20, -kInf);
    CHECK(online_softmax_update(isa, e, masked.data(), masked.size()) == 1.0f);
    CHECK(e.sum == 0.0f);
    for (float v : masked) CHECK(v == 0.0f);
  }
}
