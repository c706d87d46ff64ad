// Activations (ops/activation): every ISA against the double reference over lengths that hit every vector tail,
// over the input range a transformer produces and beyond (exp overflow / underflow), plus special values.
#include <doctest/doctest.h>

#include "tests/common/close.h"

#include "ops/activation/activation.h"
#include "ops/activation/activation_kernels.h"

#include <sqrtdk/error.h>
#include <sqrtdk/isa.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <vector>

using namespace sqrtdk;

namespace {

const size_t kLengths[] = {1, 7, 8, 9, 15, 16, 17, 31, 33, 64, 768, 1000};

// Tolerance: |simd - ref| <= kActRelTol * |ref| + kActAbsTol.
// The SIMD path forms exp's argument a = -2 sqrt(2/pi) x (1 + 0.044715 x^2) in float (2-3 roundings), and
// e^a turns an absolute argument error into a relative result error: up to ~3 * 2^-24 * |a|, i.e. 1.6e-5 as |a|
// nears 88 (exp's overflow), where gelu's result is below 1e-30. exp_rr2_p5 itself is at most 2 ulp
// (ops/base/vec_exp.h). clang and g++ contract the FMAs differently, so the bound is set for the worst case, not
// for one compiler's rounding.
// kActAbsTol: once exp's argument passes ln(FLT_MAX) = 88.72 it returns +inf and x / (1 + inf) = -0, where the
// true value is below |x| e^-88.72 = 3e-39 |x| (<= 4e-37 here).
// Measured with exp_rr2_p5 (SQRTDK_VERBOSE=1 prints it; Xeon, Emerald Rapids class, 2026-11-30, g++ 12, avx2 and
// avx512 alike): max abs error gelu_tanh 4.8e-7, silu 1.9e-6, swiglu 3.8e-6 (all half an ulp of outputs near 100);
// max relative error where |ref| >= 1e-6: gelu_tanh 1.4e-6, silu 2.1e-7, swiglu 2.4e-7. With the former
// Cephes-style exp (about 1 ulp): silu 1.3e-7, swiglu 1.4e-7; clang 14 reached 1.6e-6 on gelu_tanh and 1.5e-5 on
// gelu results near 1e-30.
constexpr double kActRelTol = 3e-5;
constexpr double kActAbsTol = 1e-36;

std::vector<float> make_input(size_t n, uint32_t seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> x(n);
  for (float& v : x) v = dist(rng);
  return x;
}

struct ErrStats {
  double max_abs = 0.0, max_rel = 0.0;  // rel over |ref| >= 1e-6
  bool ok = true;
  void add(double got, double want) {
    const double err = std::abs(got - want);
    max_abs = std::max(max_abs, err);
    if (std::abs(want) >= 1e-6) max_rel = std::max(max_rel, err / std::abs(want));
    if (!(err <= kActRelTol * std::abs(want) + kActAbsTol)) {
      if (ok) MESSAGE("first failure: got " << got << ", want " << want);
      ok = false;
    }
  }
};

void report(const char* op, const char* kernel, const ErrStats& s) {
  if (verbose()) std::printf("%s %s: max abs err %.3g, max rel err (|ref| >= 1e-6) %.3g\n", op, kernel,
                             s.max_abs, s.max_rel);
}

}  // namespace

TEST_CASE("activation: gelu_tanh and silu, every ISA against the reference, every tail") {
  for (const auto& kernel : ops::runnable_kernels(ops::activation_kernels())) {
    const Isa isa = kernel.isa;
    CAPTURE(std::string(kernel.name));
    ErrStats gelu_err, silu_err;
    for (size_t n : kLengths) {
      CAPTURE(n);
      // [-12, 12] covers pre-activations of real models; [-120, 120] drives exp past overflow and underflow.
      for (float range : {12.0f, 120.0f}) {
        const std::vector<float> x = make_input(n, static_cast<uint32_t>(n), -range, range);
        std::vector<float> want = x, got = x;
        ops::gelu_tanh_ref(want.data(), n);
        ops::gelu_tanh(isa, got.data(), n);
        for (size_t i = 0; i < n; ++i) gelu_err.add(got[i], want[i]);
        std::vector<float> out_of_place(n);
        ops::gelu_tanh(isa, x.data(), out_of_place.data(), n);
        CHECK(out_of_place == got);
        want = x;
        got = x;
        ops::silu_ref(want.data(), n);
        ops::silu(isa, got.data(), n);
        for (size_t i = 0; i < n; ++i) silu_err.add(got[i], want[i]);
        ops::silu(isa, x.data(), out_of_place.data(), n);
        CHECK(out_of_place == got);
      }
    }
    CHECK(gelu_err.ok);
    CHECK(silu_err.ok);
    report("gelu_tanh", kernel.name, gelu_err);
    report("silu", kernel.name, silu_err);
  }
}

TEST_CASE("activation: special values (0, +-inf, NaN, huge, tiny)") {
  const float inf = std::numeric_limits<float>::infinity();
  for (const auto& kernel : ops::runnable_kernels(ops::activation_kernels())) {
    const Isa isa = kernel.isa;
    CAPTURE(std::string(kernel.name));
    std::vector<float> x = {0.0f, -0.0f, inf, -inf, 1e30f, -1e30f, 1e-30f, -1e-30f, 88.8f, -88.8f, 200.0f, -200.0f,
                            std::numeric_limits<float>::quiet_NaN(), 1.0f, -1.0f, 0.5f, 3.0f};
    std::vector<float> g = x, s = x;
    ops::gelu_tanh(isa, g.data(), g.size());
    ops::silu(isa, s.data(), s.size());
    CHECK(g[0] == 0.0f);
    CHECK(g[2] == inf);
    CHECK(std::isnan(g[3]));  // -inf * 0, as the reference and PyTorch
    CHECK(g[4] == 1e30f);
    CHECK(g[5] == 0.0f);
    // gelu(x) = x/2 (1 + tanh(~0.8 x)) ~ x/2 for tiny x: 0.5e-30 up to the float rounding of 1e-30 and of x/2.
    SQRTDK_CHECK_ULP(g[6], 0.5 * double(1e-30f), 2, "x/2 for tiny x");
    CHECK(g[10] == 200.0f);
    CHECK(g[11] == 0.0f);
    CHECK(std::isnan(g[12]));
    CHECK(s[2] == inf);
    CHECK(std::isnan(s[3]));  // -inf * sigmoid(-inf) = -inf * 0, as PyTorch
    CHECK(s[4] == 1e30f);
    CHECK(s[10] == 200.0f);
    CHECK(std::isnan(s[12]));
    // gelu_tanh(1) = 0.8411919906082768 (0.5 (1 + tanh(sqrt(2/pi) 1.044715))); silu(1) = 1 / (1 + e^-1).
    SQRTDK_CHECK_REL(g[13], 0.8411919906082768, 2e-7, "activation.h accuracy at x = 1 (~3 ulp)");
    SQRTDK_CHECK_REL(s[13], 0.7310585786300049, 2e-7, "activation.h accuracy at x = 1 (~3 ulp)");
  }
}

TEST_CASE("activation: swiglu and add, every ISA, every tail; add is exact") {
  for (const auto& kernel : ops::runnable_kernels(ops::activation_kernels())) {
    const Isa isa = kernel.isa;
    CAPTURE(std::string(kernel.name));
    ErrStats swiglu_err;
    for (size_t n : kLengths) {
      CAPTURE(n);
      const std::vector<float> gate = make_input(n, static_cast<uint32_t>(n), -12.0f, 12.0f);
      const std::vector<float> up = make_input(n, static_cast<uint32_t>(n + 1), -3.0f, 3.0f);
      std::vector<float> want(n), got(n);
      ops::swiglu_ref(gate.data(), up.data(), want.data(), n);
      ops::swiglu(isa, gate.data(), up.data(), got.data(), n);
      for (size_t i = 0; i < n; ++i) swiglu_err.add(got[i], want[i]);
      // In place over gate.
      std::vector<float> inplace = gate;
      ops::swiglu(isa, inplace.data(), up.data(), inplace.data(), n);
      CHECK(inplace == got);
      // add: one float rounding, the same in every ISA.
      ops::add_ref(gate.data(), up.data(), want.data(), n);
      ops::add(isa, gate.data(), up.data(), got.data(), n);
      CHECK(got == want);
    }
    CHECK(swiglu_err.ok);
    report("swiglu", kernel.name, swiglu_err);
  }
}

TEST_CASE("activation: 1, 2, 3 and 4 threads give the same bits; null pointers are errors") {
  const size_t n = 100003;  // 7 items of 16 Ki floats, the last with a tail
  const std::vector<float> x = make_input(n, 5, -8.0f, 8.0f), y = make_input(n, 6, -8.0f, 8.0f);
  for (const auto& kernel : ops::runnable_kernels(ops::activation_kernels())) {
    const Isa isa = kernel.isa;
    CAPTURE(std::string(kernel.name));
    std::vector<float> gelu1 = x, silu1(n), swiglu1(n), add1(n);
    ops::gelu_tanh(isa, gelu1.data(), n, 1);
    ops::silu(isa, x.data(), silu1.data(), n, 1);
    ops::swiglu(isa, x.data(), y.data(), swiglu1.data(), n, 1);
    ops::add(isa, x.data(), y.data(), add1.data(), n, 1);
    for (int threads : {2, 3, 4}) {
      CAPTURE(threads);
      std::vector<float> out = x;
      ops::gelu_tanh(isa, out.data(), n, threads);
      CHECK(out == gelu1);
      ops::silu(isa, x.data(), out.data(), n, threads);
      CHECK(out == silu1);
      ops::swiglu(isa, x.data(), y.data(), out.data(), n, threads);
      CHECK(out == swiglu1);
      ops::add(isa, x.data(), y.data(), out.data(), n, threads);
      CHECK(out == add1);
    }
  }
  CHECK_THROWS_AS(ops::silu(default_isa(), nullptr, 4), Error);
  CHECK_NOTHROW(ops::silu(default_isa(), nullptr, 0));
}
