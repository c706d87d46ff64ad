// Tests of the bf16 GEMM (gemm.h, WeightType::bf16): every entry of gemm_bf16_kernels() this CPU runs, through
// PackedWeights::pack_bf16 + gemm(), against gemm_bf16_ref (double sums over the bf16 weights' exact values), over
// shapes that hit every tile edge of each entry (M = 1 .. 2·MR + 1 and larger, N around the lane width and NR, K = 1,
// odd and even K, K > KC so partial sums go through dst), leading dimensions larger than widths with sentinels past
// each row's end, every epilogue (also residual == dst), 1 vs 2 threads bitwise, a row alone vs in a batch bitwise
// (the typed kernels sum each element in one order whatever M), and bad arguments.
#include "ops/gemm/gemm.h"
#include "ops/base/float16.h"
#include "ops/gemm/gemm_typed_kernels.h"
#include "tests/common/random.h"

#include <sqrtdk/error.h>
#include <sqrtdk/isa.h>

#include <doctest/doctest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

// Named after the file: the sanitizer builds compile test files together (a unity build), and this file's
// helpers share their names with another test file's.
namespace test_gemm_bf16 {

using namespace sqrtdk;
using namespace sqrtdk::ops;
using sqrtdk::test::random_vector;

namespace {

constexpr float kSentinel = -12345.0f;

// Weights as a model file stores them: f32 values rounded to bf16.
std::vector<uint16_t> random_bf16(size_t n, uint32_t seed) {
  const auto f = random_vector(n, seed);
  std::vector<uint16_t> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = float_to_bf16(f[i]);
  return out;
}

using Entry = KernelEntry<gemm_detail::Bf16Kernels>;
std::vector<Entry> entries() { return runnable_kernels(gemm_detail::gemm_bf16_kernels()); }

// Σ_k |src[m,k]·w[n,k]|: the scale of every rounding error below.
double abs_dot(const float* a, const uint16_t* w, size_t K) {
  double s = 0;
  for (size_t k = 0; k < K; ++k) s += std::fabs(static_cast<double>(a[k]) * bf16_to_float(w[k]));
  return s;
}

// Tolerance per element against gemm_bf16_ref:
//  - every ISA: the f32 GEMM's bound (tests/ops/test_gemm.cpp): float accumulation of K products errs by at most
//    ≈ K·u·Σ|a·w| (u = FLT_EPSILON/2); we allow K·FLT_EPSILON, 2× that, for the partial sums added once more per K
//    slice and the activations' slopes (gelu_tanh ≤ 1.13, silu ≤ 1.1); scaled by |multiply| (the error passes
//    through v *= multiply); plus a few ulp of each epilogue step (bias add, vector tanh/exp within ~4 ulp,
//    multiply, residual add). The widening kernels round once per k (FMA); vdpbf16ps's products of two bf16 are
//    exact and each adds to the lane with at most one rounding per product: K roundings either way.
//  - avx512_bf16 also rounds src to bf16 (8 significant bits, round to nearest even): each a changes by at most
//    2^-8·|a| (half an ulp of an 8-bit significand is 2^-8 relative to the value, not 2^-9: the ulp of [1, 2) is
//    2^-7), so the exact sum moves by at most 2^-8·Σ|a·w| (gemm.h's stated bound), times the same activation slope
//    (≤ 1.13) and |multiply|.
double tolerance(Isa isa, double abs_sum, size_t K, double mul, double ref, double residual, double bias) {
  const double eps = FLT_EPSILON, scale = abs_sum * std::max(1.0, std::fabs(mul));
  const double src_rounding = isa == Isa::avx512_bf16 ? 1.13 * std::ldexp(1.0, -8) * scale : 0.0;
  return 2.0 * K * eps * scale + src_rounding + 16.0 * eps * (std::fabs(ref) + std::fabs(residual) + std::fabs(bias) + 1e-3);
}

struct Case {
  size_t M, N, K;
  size_t lda, ldc, ldw;
};

// One entry on one case against the reference; with_operands: bias, multiply and residual (separate buffers).
void check_case(const Entry& entry, const Case& c, const GemmEpilogue& epi_template, uint32_t seed,
                bool with_operands, int n_threads = 1) {
  const auto src = random_vector(c.M * c.lda, seed);
  const auto w = random_bf16(c.N * c.ldw, seed + 1);
  const auto bias = random_vector(c.N, seed + 2);
  const auto mul = random_vector(c.M * c.ldc, seed + 3);
  const auto res = random_vector(c.M * c.ldc, seed + 4);
  GemmEpilogue epi = epi_template;
  if (with_operands) {
    epi.bias = bias.data();
    epi.multiply = mul.data();
    epi.ld_multiply = c.ldc;
    epi.residual = res.data();
    epi.ld_residual = c.ldc;
  }
  std::vector<float> ref(c.M * c.ldc, kSentinel);
  gemm_bf16_ref(src.data(), c.M, c.lda, w.data(), c.N, c.K, c.ldw, ref.data(), c.ldc, epi);
  const PackedWeights packed = PackedWeights::pack_bf16(w.data(), c.N, c.K, c.ldw, entry.isa);
  REQUIRE(packed.N() == c.N);
  REQUIRE(packed.K() == c.K);
  REQUIRE(packed.type() == WeightType::bf16);
  std::vector<float> dst(c.M * c.ldc, kSentinel);
  gemm(src.data(), c.M, c.lda, packed, dst.data(), c.ldc, epi, n_threads);
  size_t bad = 0;
  for (size_t m = 0; m < c.M; ++m) {
    for (size_t n = 0; n < c.N; ++n) {
      const double r = ref[m * c.ldc + n], got = dst[m * c.ldc + n];
      const double tol = tolerance(entry.isa, abs_dot(src.data() + m * c.lda, w.data() + n * c.ldw, c.K), c.K,
                                   with_operands ? mul[m * c.ldc + n] : 1.0, r,
                                   with_operands ? res[m * c.ldc + n] : 0.0, with_operands ? bias[n] : 0.0);
      if (!(std::fabs(got - r) <= tol) && bad++ < 3) {
        CAPTURE(m);
        CAPTURE(n);
        CAPTURE(got);
        CAPTURE(r);
        CAPTURE(tol);
        CHECK(std::fabs(got - r) <= tol);
      }
    }
    for (size_t n = c.N; n < c.ldc; ++n)
      if (dst[m * c.ldc + n] != kSentinel && bad++ < 3) FAIL("wrote past N at row " << m << " col " << n);
  }
  CHECK(bad == 0);
}

void check_shape(const Entry& entry, size_t M, size_t N, size_t K, uint32_t seed) {
  CAPTURE(M);
  CAPTURE(N);
  CAPTURE(K);
  check_case(entry, {M, N, K, K + 3, N + 5, K + 2}, {}, seed, false);
}

// The f32 lanes of an entry's vectors (its N tails): 8 on avx2, 16 on the avx512 levels, 1 for the reference.
size_t lanes(Isa isa) { return isa == Isa::ref ? 1 : isa == Isa::avx2 ? 8 : 16; }

}  // namespace

TEST_CASE("gemm bf16: shapes across every tile edge, every runnable entry") {
  for (const Entry& entry : entries()) {
    CAPTURE(std::string(entry.name));
    const gemm_detail::BlockSizes& b = entry.kernels.bs;
    if (entry.isa == Isa::ref) {
      check_shape(entry, 5, 13, 31, 1);  // the table's own reference entry, once
      continue;
    }
    const size_t L = lanes(entry.isa);
    // M: every row count of a tile, one and two tiles plus an edge, several row blocks.
    std::vector<size_t> ms;
    for (size_t m = 1; m <= 2 * b.mr + 1; ++m) ms.push_back(m);
    for (size_t m : {b.mc + 1, size_t{200}}) ms.push_back(m);
    for (size_t M : ms) check_shape(entry, M, 2 * b.nr + L + 1, 129, 10);
    // N: around the lane width and the panel width (the masked edge, a single-vector tail, whole panels), several
    // column blocks.
    for (size_t N : {size_t{1}, L - 1, L, L + 1, 2 * L + 1, b.nr - 1, b.nr, b.nr + 1, 2 * b.nr - L + 1,
                     3 * b.nr + 5, b.nc + L + 1})
      for (size_t M : {size_t{1}, b.mr - 1, 2 * b.mr + 3}) check_shape(entry, M, N, N > b.nc ? 64 : 130, 20);
    // K: 1, odd and even (the dot-pair kernel's padded last pair), around KC, several K slices (M > mr).
    for (size_t K : {size_t{1}, size_t{2}, size_t{3}, size_t{7}, size_t{64}, b.kc - 1, b.kc, b.kc + 1,
                     2 * b.kc + 3})
      for (size_t M : {size_t{1}, size_t{3}, b.mr + 1, 2 * b.mr + 1}) check_shape(entry, M, 33, K, 30);
    // Several MC, NC and K blocks at once.
    check_shape(entry, b.mc + 4, b.nc + 32, b.kc + 144, 35);
  }
}

TEST_CASE("gemm bf16: epilogues (bias, gelu_tanh, silu, multiply, residual)") {
  for (const Entry& entry : entries()) {
    CAPTURE(std::string(entry.name));
    const size_t sliced_k = entry.kernels.bs.kc + 89;  // > kc: partial sums in dst for M > mr
    for (Activation act : {Activation::none, Activation::gelu_tanh, Activation::silu})
      for (size_t M : {1, 4, 31})
        for (size_t K : {size_t{19}, sliced_k}) {
          CAPTURE(activation_name(act));
          CAPTURE(M);
          CAPTURE(K);
          GemmEpilogue e;
          e.activation = act;
          check_case(entry, {M, 77, K, K + 1, 80, K}, e, 40, true);
          check_case(entry, {M, 77, K, K, 77, K}, e, 41, false);
        }
    // Bias alone (no multiply/residual), which takes the epilogue without operands per row.
    GemmEpilogue only_bias;
    const auto bias = random_vector(70, 45);
    only_bias.bias = bias.data();
    check_case(entry, {9, 70, 50, 50, 70, 50}, only_bias, 46, false);
  }
}

TEST_CASE("gemm bf16: residual aliasing dst (in-place residual add)") {
  // K > kc forces partial sums through dst for M > mr: the aliased residual must still be the original.
  for (const Entry& entry : entries()) {
    CAPTURE(std::string(entry.name));
    const size_t K = entry.kernels.bs.kc + 89, N = 70;
    for (size_t M : {size_t{1}, size_t{5}, size_t{31}, size_t{100}}) {
      CAPTURE(M);
      const size_t ldc = N + 3;
      const auto src = random_vector(M * K, 50);
      const auto w = random_bf16(N * K, 51);
      const auto residual = random_vector(M * ldc, 52);
      GemmEpilogue e;
      e.activation = Activation::silu;
      e.residual = residual.data();
      e.ld_residual = ldc;
      std::vector<float> ref(M * ldc, kSentinel);
      gemm_bf16_ref(src.data(), M, K, w.data(), N, K, K, ref.data(), ldc, e);
      const PackedWeights packed = PackedWeights::pack_bf16(w.data(), N, K, K, entry.isa);
      for (int threads : {1, 2}) {
        CAPTURE(threads);
        std::vector<float> dst = residual;
        GemmEpilogue in_place = e;
        in_place.residual = dst.data();
        gemm(src.data(), M, K, packed, dst.data(), ldc, in_place, threads);
        size_t bad = 0;
        for (size_t m = 0; m < M; ++m) {
          for (size_t n = 0; n < N; ++n) {
            const double r = ref[m * ldc + n], got = dst[m * ldc + n];
            const double tol = tolerance(entry.isa, abs_dot(src.data() + m * K, w.data() + n * K, K), K, 1.0, r,
                                         residual[m * ldc + n], 0.0);
            bad += !(std::fabs(got - r) <= tol);
          }
          // Columns past N keep the residual buffer's own values.
          for (size_t n = N; n < ldc; ++n) bad += dst[m * ldc + n] != residual[m * ldc + n];
        }
        CHECK(bad == 0);
      }
    }
  }
}

TEST_CASE("gemm bf16: results are bit-identical for 1 and 2 threads") {
  // One work item and many (column items for M ≤ 16, a 2D grid above), several K slices, the in-place residual.
  for (const Entry& entry : entries())
    for (const auto& shape : {std::tuple<size_t, size_t, size_t>{1, 1000, 300}, {4, 333, 64}, {16, 200, 257},
                              {100, 130, 1601}, {150, 700, 800}, {1, 4100, 64}}) {
      const size_t M = std::get<0>(shape), N = std::get<1>(shape), K = std::get<2>(shape);
      CAPTURE(std::string(entry.name));
      CAPTURE(M);
      CAPTURE(N);
      const auto src = random_vector(M * K, 60);
      const auto w = random_bf16(N * K, 61);
      const auto bias = random_vector(N, 62);
      const auto residual = random_vector(M * N, 63);
      GemmEpilogue e;
      e.bias = bias.data();
      e.activation = Activation::gelu_tanh;
      const PackedWeights packed = PackedWeights::pack_bf16(w.data(), N, K, K, entry.isa);
      std::vector<float> one(M * N), two(M * N);
      gemm(src.data(), M, K, packed, one.data(), N, e, 1);
      gemm(src.data(), M, K, packed, two.data(), N, e, 2);
      CHECK(std::memcmp(one.data(), two.data(), one.size() * sizeof(float)) == 0);
      std::vector<float> one_res = residual, two_res = residual;
      GemmEpilogue in_place;
      in_place.residual = one_res.data();
      in_place.ld_residual = N;
      gemm(src.data(), M, K, packed, one_res.data(), N, in_place, 1);
      in_place.residual = two_res.data();
      gemm(src.data(), M, K, packed, two_res.data(), N, in_place, 2);
      CHECK(std::memcmp(one_res.data(), two_res.data(), one_res.size() * sizeof(float)) == 0);
    }
}

TEST_CASE("gemm bf16: a row alone (M = 1) has the same bits as in a batch, with either RowOrder") {
  // No decode kernel with split accumulators: M = 1 runs the blocked microkernel, so a row's sum order does not
  // depend on M (one K slice at M ≤ mr, K slices through dst above: the same chain) or on RowOrder.
  for (const Entry& entry : entries())
    for (const auto& shape : {std::pair<size_t, size_t>{200, 64}, {333, 301}, {70, entry.kernels.bs.kc + 89}}) {
      const size_t N = shape.first, K = shape.second;
      CAPTURE(std::string(entry.name));
      CAPTURE(N);
      CAPTURE(K);
      const size_t max_m = 100;
      const auto src = random_vector(max_m * K, 70);
      const auto w = random_bf16(N * K, 71);
      const auto bias = random_vector(N, 72);
      const PackedWeights packed = PackedWeights::pack_bf16(w.data(), N, K, K, entry.isa);
      GemmEpilogue e;
      e.bias = bias.data();
      e.activation = Activation::silu;
      std::vector<float> alone(max_m * N);
      for (size_t m = 0; m < max_m; ++m) gemm(src.data() + m * K, 1, K, packed, alone.data() + m * N, N, e, 2);
      for (size_t M : {size_t{13}, max_m})
        for (RowOrder order : {RowOrder::fastest, RowOrder::invariant}) {
          CAPTURE(M);
          CAPTURE(order == RowOrder::fastest);
          std::vector<float> batch(M * N);
          gemm(src.data(), M, K, packed, batch.data(), N, e, 2, order);
          CHECK(std::memcmp(alone.data(), batch.data(), M * N * sizeof(float)) == 0);
        }
    }
}

TEST_CASE("gemm bf16: bad arguments throw sqrtdk::Error") {
  const size_t N = 20, K = 30;
  const auto w = random_bf16(N * K, 80);
  for (const Entry& entry : entries()) {
    CAPTURE(std::string(entry.name));
    const Isa isa = entry.isa;
    CHECK_THROWS_AS(PackedWeights::pack_bf16(nullptr, N, K, K, isa), Error);
    CHECK_THROWS_AS(PackedWeights::pack_bf16(w.data(), 0, K, K, isa), Error);
    CHECK_THROWS_AS(PackedWeights::pack_bf16(w.data(), N, 0, K, isa), Error);
    CHECK_THROWS_AS(PackedWeights::pack_bf16(w.data(), N, K, K - 1, isa), Error);
    const PackedWeights packed = PackedWeights::pack_bf16(w.data(), N, K, K, isa);
    const auto src = random_vector(4 * K, 81);
    std::vector<float> dst(4 * N);
    CHECK_THROWS_AS(gemm(src.data(), 4, K - 1, packed, dst.data(), N), Error);
    CHECK_THROWS_AS(gemm(src.data(), 4, K, packed, dst.data(), N - 1), Error);
    CHECK_THROWS_AS(gemm(nullptr, 4, K, packed, dst.data(), N), Error);
  }
}

}  // namespace test_gemm_bf16
