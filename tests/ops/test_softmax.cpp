// Softmax (ops/softmax): the textbook rows, edge behaviour, exp_rr2_p5's ulp error, online softmax; every ISA the
// machine has against softmax_rows_ref.
#include <doctest/doctest.h>

#include "tests/common/close.h"

#include "ops/softmax/softmax.h"
#include "ops/softmax/softmax_kernels.h"

#include <sqrtdk/error.h>
#include <sqrtdk/isa.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
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

using test::ulp_error;  // tests/common/close.h

}  // namespace

TEST_CASE("softmax: textbook rows, every ISA") {
  for (const auto& kernel : runnable_kernels(softmax_kernels())) {
    const Isa isa = kernel.isa;
    CAPTURE(std::string(kernel.name));
    // Exact values in double; softmax.h's contract for a row of n = 3: about 4 ulp + 3 * 2^-24 relative.
    const double contract = 4 * 0x1p-23 + 3 * 0x1p-24;
    const double e1 = std::exp(-1.0), e2 = std::exp(-2.0), e10 = std::exp(-10.0), e20 = std::exp(-20.0);
    auto a = softmax_of(isa, {1, 2, 3});
    SQRTDK_CHECK_REL(a[0], e2 / (1 + e1 + e2), contract, "softmax.h accuracy, n = 3");
    SQRTDK_CHECK_REL(a[1], e1 / (1 + e1 + e2), contract, "softmax.h accuracy, n = 3");
    SQRTDK_CHECK_REL(a[2], 1 / (1 + e1 + e2), contract, "softmax.h accuracy, n = 3");
    auto b = softmax_of(isa, {10, 20, 30});
    SQRTDK_CHECK_REL(b[0], e20 / (1 + e10 + e20), contract, "softmax.h accuracy, n = 3 (tiny: relative, not 0)");
    SQRTDK_CHECK_REL(b[1], e10 / (1 + e10 + e20), contract, "softmax.h accuracy, n = 3");
    SQRTDK_CHECK_REL(b[2], 1 / (1 + e10 + e20), contract, "softmax.h accuracy, n = 3");
    // Shifted by the max: no overflow, no NaN, same as [0, 1, 2].
    auto c = softmax_of(isa, {1000, 1001, 1002});
    auto d = softmax_of(isa, {0, 1, 2});
    for (int i = 0; i < 3; ++i) CHECK(c[i] == d[i]);
    // Equal values: uniform.
    for (size_t n : {1, 7, 16, 33, 1000}) {
      auto u = softmax_of(isa, std::vector<float>(n, -3.5f));
      // Every exp is exactly 1 and the float sum of n ones is exact: only the division rounds (1 ulp).
      for (float v : u) SQRTDK_CHECK_ULP(v, 1.0 / double(n), 1, "exact sum, one rounding in the division");
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
              // softmax.h's bound: 4 ulp (exp 2, normalization) + n * 2^-24 (the sum) + (|y| + |z|) * 2^-24: the
              // float roundings of y = scale * x + mask and of z = y - max, which exp turns into a relative error
              // of its result (a probability of 1e-8 has |z| ~ 18: ~1.1e-6 relative from that term alone).
              const size_t n_valid = mode == 2 ? std::min(n_cols, mask.pos0 + r + 1) : n_cols;
              double row_max = -kInf;
              auto y_of = [&](size_t j) { return double(scale) * x[r * ld + j] + (mode == 1 ? add[r * ld + j] : 0.0); };
              for (size_t j = 0; j < n_valid; ++j) row_max = std::max(row_max, y_of(j));
              for (size_t j = 0; j < n_cols; ++j) {
                const double yj = y_of(j), zj = yj - row_max;
                const double bound = std::isfinite(zj) ? 4 * 0x1p-23 + (std::fabs(yj) + std::fabs(zj) + n_cols) * 0x1p-24 : 0;
                SQRTDK_CHECK_REL(y[r * ld + j], ref[r * ld + j], bound, "softmax.h: exp, roundings of y and z, sum");
              }
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
    // Integers: y and z are exact, so only exp (2 ulp), the sum of 5 and the division round.
    for (int j = 0; j < 5; ++j) SQRTDK_CHECK_REL(y[j], ref[j], 4 * 0x1p-23 + 5 * 0x1p-24, "exp, sum of 5, division");
  }
  std::vector<float> out(4);
  CHECK_THROWS_AS(softmax_rows(Isa::ref, 2, 4, x.data(), 3, out.data(), 4), Error);
}

TEST_CASE("softmax: 1, 2, 3 and 4 threads give the same bits, with causal and additive masks") {
  // 300 rows × 1000 columns: items of 16 rows (16 Ki floats), 19 items, the last one short; the causal mask's
  // pos0 and the additive mask's rows are offset per item.
  const size_t n_rows = 300, n_cols = 1000, ld = 1003;
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> dist(-10.0f, 10.0f);
  std::vector<float> x(n_rows * ld), additive(n_rows * ld);
  for (auto& v : x) v = dist(rng);
  for (size_t i = 0; i < additive.size(); ++i) additive[i] = i % 7 == 0 ? -kInf : 0.1f * dist(rng);
  for (const auto& kernel : runnable_kernels(softmax_kernels())) {
    const Isa isa = kernel.isa;
    CAPTURE(std::string(kernel.name));
    for (int masking = 0; masking < 2; ++masking) {
      SoftmaxMask mask;
      if (masking == 0) {
        mask.causal = true;
        mask.pos0 = 700;
      } else {
        mask.additive = additive.data();
        mask.ld = ld;
      }
      CAPTURE(masking);
      std::vector<float> one(n_rows * ld, 0.0f);
      softmax_rows(isa, n_rows, n_cols, x.data(), ld, one.data(), ld, 0.5f, mask, 1);
      for (int threads : {2, 3, 4}) {
        CAPTURE(threads);
        std::vector<float> out(n_rows * ld, 0.0f);
        softmax_rows(isa, n_rows, n_cols, x.data(), ld, out.data(), ld, 0.5f, mask, threads);
        CHECK(std::memcmp(one.data(), out.data(), out.size() * sizeof(float)) == 0);
      }
    }
  }
}

TEST_CASE("softmax: exp_rr2_p5 max ulp error over the float range (every 61st float) and special values") {
  // Below 2^-25 in magnitude exp rounds to 1; above 88.73 to inf, below -103.98 to 0: the sweep covers the whole
  // interesting range (|x| in [2^-26, 110]) at stride 61: 9.0M values, 1/61 of the floats where exp is neither
  // 0, 1 nor inf (0.21 % of all 2^32), plus every special value. The full sweep over every float is the next test
  // case (opt-in: SQRTDK_EXP_FULL_SWEEP=1, ~1 min per ISA) or `bench-softmax --exp-ulp`; its result is in
  // ops/softmax/exp_ulp_full_sweep.txt.
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
    // The contract's 2 ulp in every build: every multiply-add in exp_rr2_p5 is an explicit fma (vec_exp.h), so
    // the bits do not depend on the optimization level or -ffp-contract (measured on this sweep: 1.965 ulp at
    // x = 29.65 for g++ -O1/-O2/-O3 and clang++ -O1/-O2/-O3, contraction off, on and fast, avx2 and avx512 alike;
    // before, xsimd's avx512 fma was a separate multiply and add under g++ -O1 and clang: 2.198 ulp at x = 5.937).
    CHECK(worst <= kExpRr2P5MaxUlp);
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

TEST_CASE("softmax: exp_rr2_p5 within 2 ulp over every one of the 2^32 floats (SQRTDK_EXP_FULL_SWEEP=1 only)") {
  const char* env = std::getenv("SQRTDK_EXP_FULL_SWEEP");
  if (env == nullptr || std::string(env) != "1") return;  // ~1 min per ISA: opt-in
  std::vector<float> x(1 << 16), y(1 << 16);
  for (const auto& kernel : runnable_kernels(softmax_kernels())) {
    if (kernel.isa == Isa::ref) continue;  // std::exp in double, rounded once: 0.5 ulp by construction
    CAPTURE(std::string(kernel.name));
    double worst = 0.0;
    float worst_x = 0.0f;
    size_t nan_wrong = 0;
    for (uint32_t block = 0; block < (1u << 16); ++block) {
      for (uint32_t i = 0; i < (1u << 16); ++i) x[i] = float_from_bits(block << 16 | i);
      exp_rr2_p5(kernel.isa, x.data(), y.data(), x.size());
      for (size_t i = 0; i < x.size(); ++i) {
        if (std::isnan(x[i])) {
          nan_wrong += !std::isnan(y[i]);
          continue;
        }
        const double err = ulp_error(y[i], std::exp(double(x[i])));
        if (err > worst) worst = err, worst_x = x[i];
      }
    }
    MESSAGE(std::string(kernel.name) << ": exp max error " << worst << " ulp at x = " << worst_x
                                     << " over all 2^32 floats");
    CHECK(nan_wrong == 0);
    CHECK(worst <= kExpRr2P5MaxUlp);
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
      // Each value: exp 2 ulp, up to n / block rescales of 1 ulp each (1000 for blocks of 1), the float sum of
      // 1000 terms, the division: 1e-5 relative.
      for (size_t j = 0; j < n; ++j)
        SQRTDK_CHECK_REL(acc[j] / st.sum, ref[j], 1e-5, "exp, up to 1000 rescales, sum of 1000, division");
    }
    // Merge of two halves.
    OnlineSoftmaxState a, b;
    std::vector<float> pa(x.begin(), x.begin() + 400), pb(x.begin() + 400, x.end());
    online_softmax_update(isa, a, pa.data(), pa.size());
    online_softmax_update(isa, b, pb.data(), pb.size());
    float fa = 0, fb = 0;
    OnlineSoftmaxState m = online_softmax_merge(a, b, fa, fb);
    SQRTDK_CHECK_REL(pa[5] * fa / m.sum, ref[5], 1e-5, "exp, one rescale, two sums of <= 600, division");
    SQRTDK_CHECK_REL(pb[5] * fb / m.sum, ref[405], 1e-5, "exp, one rescale, two sums of <= 600, division");
    // All -inf block: unchanged state, zeros.
    OnlineSoftmaxState e;
    std::vector<float> masked(20, -kInf);
    CHECK(online_softmax_update(isa, e, masked.data(), masked.size()) == 1.0f);
    CHECK(e.sum == 0.0f);
    for (float v : masked) CHECK(v == 0.0f);
  }
}

TEST_CASE("softmax: online update and merge never hide a NaN, at any position of any block") {
  // The NaN goes to every position of blocks of lengths around the vector widths (x86 max drops a NaN operand, so
  // its lane decides whether the block max sees it), into the first block (state empty) and a later one, among
  // finite scores and among -inf scores. After the update the state's sum must be NaN, so the caller's
  // normalization (and any merge) is NaN; later blocks must keep it NaN.
  const float nan = std::nanf("");
  std::mt19937 rng(17);
  std::normal_distribution<float> dist(0.0f, 3.0f);
  for (const auto& kernel : runnable_kernels(softmax_kernels())) {
    const Isa isa = kernel.isa;
    CAPTURE(std::string(kernel.name));
    for (size_t n : {1, 2, 7, 8, 9, 15, 16, 17, 31, 32, 33, 48, 64, 100}) {
      for (size_t at = 0; at < n; ++at) {
        for (int filler = 0; filler < 2; ++filler) {     // 0: finite scores, 1: every other score -inf
          for (int earlier = 0; earlier < 3; ++earlier) {  // 0: first block; 1: after a block with a smaller max;
                                                          // 2: after a block with a larger max
            CAPTURE(n);
            CAPTURE(at);
            CAPTURE(filler);
            CAPTURE(earlier);
            OnlineSoftmaxState st;
            if (earlier > 0) {
              std::vector<float> first = {earlier == 1 ? -50.0f : 50.0f, 0.0f};
              online_softmax_update(isa, st, first.data(), first.size());
            }
            std::vector<float> block(n);
            for (float& v : block) v = filler ? -kInf : dist(rng);
            block[at] = nan;
            const float factor = online_softmax_update(isa, st, block.data(), n);
            CHECK(std::isnan(st.sum));
            CHECK(std::isnan(block[at]));  // the NaN score's own weight stays NaN (it reaches P·V)
            (void)factor;
            std::vector<float> later = {1.0f, 2.0f, -kInf};
            online_softmax_update(isa, st, later.data(), later.size());
            CHECK(std::isnan(st.sum));
            float fa = 0.0f, fb = 0.0f;
            OnlineSoftmaxState clean;
            std::vector<float> other = {3.0f};
            online_softmax_update(isa, clean, other.data(), other.size());
            CHECK(std::isnan(online_softmax_merge(clean, st, fa, fb).sum));
            CHECK(std::isnan(online_softmax_merge(st, clean, fa, fb).sum));
            CHECK(std::isnan(online_softmax_merge(st, OnlineSoftmaxState{}, fa, fb).sum));
          }
        }
      }
    }
  }
}
