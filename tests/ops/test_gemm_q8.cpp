// Tests of the q8 GEMM (gemm.h, WeightType::q8): every entry of gemm_q8_kernels() this CPU runs, through
// PackedWeights::pack_q8 + gemm(), against gemm_q8_ref (the spec: exact integer block sums, double accumulation)
// over shapes that hit every tile edge of each kernel (its MR, NR and KC from the table), all epilogues (incl. the
// in-place residual across K slices), leading dimensions above widths with sentinels past N, bitwise equality
// across thread counts and between a row alone and the same row in a batch; each kernel's prepare_src bit for bit
// against quantize_src_row_q8; quantize_row_q8 / dequantize_row_q8; the errors at the API boundary.
#include "ops/base/float16.h"
#include "ops/gemm/gemm.h"
#include "ops/gemm/gemm_typed_kernels.h"
#include "tests/common/random.h"

#include <sqrtdk/error.h>

#include <doctest/doctest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

// Named after the file: the sanitizer builds compile test files together (a unity build), and this file's
// helpers share their names with another test file's.
namespace test_gemm_q8 {

using namespace sqrtdk;
using namespace sqrtdk::ops;
using sqrtdk::test::random_vector;

namespace {

constexpr float kSentinel = -12345.0f;

// N rows of K/32 blocks (row stride ld_blocks), quantized from random floats; each row's blocks at a different
// magnitude so the block scales differ.
std::vector<Q8Block> random_weights(size_t N, size_t K, size_t ld_blocks, uint32_t seed) {
  std::vector<Q8Block> w(N * ld_blocks);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> mag(0.05f, 2.0f);
  for (size_t n = 0; n < N; ++n) {
    auto row = random_vector(K, seed * 7919 + static_cast<uint32_t>(n));
    for (size_t b = 0; b < K / kQ8BlockSize; ++b) {
      const float s = mag(rng);
      for (size_t i = 0; i < kQ8BlockSize; ++i) row[b * kQ8BlockSize + i] *= s;
    }
    quantize_row_q8(row.data(), K, w.data() + n * ld_blocks);
  }
  return w;
}

// s_a · Σ_b |s_w,b · isum_b|: the scale of the kernels' f32 rounding error for one element.
double abs_block_sum(const float* a, const Q8Block* w, size_t K) {
  std::vector<int8_t> q(K);
  float scale;
  quantize_src_row_q8(a, K, q.data(), &scale);
  double s = 0;
  for (size_t b = 0; b < K / kQ8BlockSize; ++b) {
    int32_t isum = 0;
    for (size_t i = 0; i < kQ8BlockSize; ++i) isum += int32_t{q[b * kQ8BlockSize + i]} * w[b].q[i];
    s += std::fabs(static_cast<double>(half_to_float(w[b].scale_f16)) * isum);
  }
  return s * scale;
}

// Tolerance per element. The block sums are exact integers (and exact as floats: < 2^24), so the only error is the
// f32 rounding of the K/32 fma steps over the block terms, of the final product by the row's scale, and of the
// output (~(K/32 + 3)·ε·Σ_b|s_w·isum_b|·s_a); that passes through multiply (×|multiply|) and gelu/silu (slopes
// ≤ 1.13: the factor 2); plus a few ulp of each epilogue step (bias add, a vector tanh/exp within ~4 ulp, multiply,
// residual add), as the f32 GEMM's tests allow.
double tolerance(double abs_sum, size_t K, double mul, double ref, double residual, double bias) {
  const double eps = FLT_EPSILON;
  return 2.0 * (K / kQ8BlockSize + 3) * eps * abs_sum * std::max(1.0, std::fabs(mul)) +
         16.0 * eps * (std::fabs(ref) + std::fabs(residual) + std::fabs(bias) + 1e-3);
}

struct Shape {
  size_t M, N, K;
};

// Every runnable entry against gemm_q8_ref for one shape, with lda > K, ldc > N (sentinels past N), ld_blocks > K/32.
void check_shape(const KernelEntry<gemm_detail::Q8Kernels>& entry, Shape s, const GemmEpilogue& epi_template,
                 bool with_operands, uint32_t seed, int n_threads = 1) {
  CAPTURE(std::string(entry.name));
  CAPTURE(s.M);
  CAPTURE(s.N);
  CAPTURE(s.K);
  const size_t lda = s.K + 5, ldc = s.N + 3, ld_blocks = s.K / kQ8BlockSize + 1;
  const auto src = random_vector(s.M * lda, seed);
  const auto w = random_weights(s.N, s.K, ld_blocks, seed + 1);
  const auto bias = random_vector(s.N, seed + 2);
  const auto mul = random_vector(s.M * ldc, seed + 3);
  const auto res = random_vector(s.M * ldc, seed + 4);
  GemmEpilogue epi = epi_template;
  if (with_operands) {
    epi.bias = bias.data();
    epi.multiply = mul.data();
    epi.ld_multiply = ldc;
    epi.residual = res.data();
    epi.ld_residual = ldc;
  }
  std::vector<float> ref(s.M * ldc, kSentinel), dst(s.M * ldc, kSentinel);
  gemm_q8_ref(src.data(), s.M, lda, w.data(), s.N, s.K, ld_blocks, ref.data(), ldc, epi);
  const PackedWeights packed = PackedWeights::pack_q8(w.data(), s.N, s.K, ld_blocks, entry.isa);
  REQUIRE(packed.type() == WeightType::q8);
  REQUIRE(packed.N() == s.N);
  REQUIRE(packed.K() == s.K);
  gemm(src.data(), s.M, lda, packed, dst.data(), ldc, epi, n_threads);
  size_t bad = 0;
  for (size_t m = 0; m < s.M; ++m) {
    for (size_t n = 0; n < s.N; ++n) {
      const double r = ref[m * ldc + n], got = dst[m * ldc + n];
      const double tol = tolerance(abs_block_sum(src.data() + m * lda, w.data() + n * ld_blocks, s.K), s.K,
                                   with_operands ? mul[m * ldc + n] : 1.0, r, with_operands ? res[m * ldc + n] : 0.0,
                                   with_operands ? bias[n] : 0.0);
      if (!(std::fabs(got - r) <= tol) && bad++ < 3) {
        CAPTURE(m);
        CAPTURE(n);
        CAPTURE(got);
        CAPTURE(r);
        CAPTURE(tol);
        CHECK(std::fabs(got - r) <= tol);
      }
    }
    for (size_t n = s.N; n < ldc; ++n)
      if (dst[m * ldc + n] != kSentinel && bad++ < 3) FAIL("wrote past N at row " << m << " col " << n);
  }
  CHECK(bad == 0);
}

std::vector<KernelEntry<gemm_detail::Q8Kernels>> entries() { return runnable_kernels(gemm_detail::gemm_q8_kernels()); }

// K values per kernel: one block, two, exactly one K slice, a slice and a block, several slices with a short last.
std::vector<size_t> k_values(const gemm_detail::BlockSizes& bs) {
  const size_t kc = std::max<size_t>(bs.kc, kQ8BlockSize);
  return {32, 64, kc, kc + 32, 3 * kc + 64};
}

}  // namespace

TEST_CASE("gemm q8: the table has a SIMD entry this CPU runs whenever it has AVX2") {
  const auto runnable = entries();
  REQUIRE(!runnable.empty());
  CHECK(runnable.back().isa == Isa::ref);
  if (cpu_supports(Isa::avx2)) CHECK(runnable.size() >= 2);
  for (const auto& e : runnable) CHECK(e.kernels.bs.kc % kQ8BlockSize == 0);
}

TEST_CASE("gemm q8: prepare_src gives quantize_src_row_q8's integers and scales bit for bit") {
  const size_t K = 96, lda = K + 7;
  std::vector<std::vector<float>> rows;
  rows.push_back(random_vector(K, 1));
  rows.push_back(std::vector<float>(K, 0.0f));  // all zero: scale 0, q 0
  auto huge = random_vector(K, 2, -1e-3f, 1e-3f);
  huge[37] = -3.0e30f;  // one huge value: the others round to 0
  rows.push_back(huge);
  // Ties: amax 127 makes inv exactly 1, so x.5 values must round to even (2.5 → 2, -3.5 → -4, 126.5 → 126).
  std::vector<float> ties(K);
  for (size_t k = 0; k < K; ++k) ties[k] = (k % 2 ? -1.0f : 1.0f) * (static_cast<float>(k % 127) + 0.5f);
  ties[5] = 127.0f;
  rows.push_back(ties);
  rows.push_back(random_vector(K, 3, -1e-20f, 1e-20f));  // tiny values: 127/amax is large, no overflow
  rows.push_back(random_vector(K, 4, 0.0f, 5e3f));       // one sign only
  std::vector<float> src(rows.size() * lda, 99.0f);       // lda > K: the gap must not be read
  for (size_t m = 0; m < rows.size(); ++m) std::copy(rows[m].begin(), rows[m].end(), src.begin() + m * lda);
  for (const auto& entry : entries()) {
    CAPTURE(std::string(entry.name));
    const auto& kern = entry.kernels;
    const size_t row_bytes = kern.src_row_bytes(K);
    REQUIRE(row_bytes >= K);
    std::vector<uint8_t> out(rows.size() * row_bytes + 64);
    std::vector<float> scales(rows.size(), -1.0f);
    kern.prepare_src(src.data(), lda, 0, 2, K, out.data(), scales.data());  // in two calls, as the driver's items
    kern.prepare_src(src.data(), lda, 2, rows.size(), K, out.data(), scales.data());
    for (size_t m = 0; m < rows.size(); ++m) {
      CAPTURE(m);
      std::vector<int8_t> want(K);
      float want_scale;
      quantize_src_row_q8(rows[m].data(), K, want.data(), &want_scale);
      CHECK(std::memcmp(out.data() + m * row_bytes, want.data(), K) == 0);
      CHECK(std::memcmp(&scales[m], &want_scale, sizeof(float)) == 0);
    }
  }
  // The reference itself: ties to even, the zero row, the huge value.
  std::vector<int8_t> q(K);
  float scale;
  quantize_src_row_q8(ties.data(), K, q.data(), &scale);
  CHECK(q[0] == 0);    // 0.5 → 0
  CHECK(q[1] == -2);   // -1.5 → -2
  CHECK(q[2] == 2);    // 2.5 → 2
  CHECK(q[3] == -4);   // -3.5 → -4
  CHECK(q[5] == 127);  // amax
  quantize_src_row_q8(rows[1].data(), K, q.data(), &scale);
  CHECK(scale == 0.0f);
  CHECK(std::all_of(q.begin(), q.end(), [](int8_t v) { return v == 0; }));
  quantize_src_row_q8(huge.data(), K, q.data(), &scale);
  CHECK(q[37] == -127);
  CHECK(scale == 3.0e30f / 127.0f);
}

TEST_CASE("gemm q8: every kernel against gemm_q8_ref across M, N and K tile edges") {
  for (const auto& entry : entries()) {
    const auto& bs = entry.kernels.bs;
    uint32_t seed = 100;
    // M: every row count of an edge tile, and a large M with several row blocks (mc) and a ragged end.
    for (size_t M = 1; M <= 2 * bs.mr + 1; ++M) check_shape(entry, {M, 2 * bs.nr + 5, 128}, {}, false, seed++);
    check_shape(entry, {2 * std::max<size_t>(bs.mc, 16) + 7, 3 * bs.nr + 1, 256}, {}, false, seed++);
    // N tails: below a vector, one, a panel, ±1, several panels.
    for (size_t N : {size_t{1}, size_t{7}, size_t{8}, size_t{9}, size_t{16}, size_t{17}, bs.nr - 1, bs.nr,
                     bs.nr + 1, 5 * bs.nr + 3})
      if (N >= 1) check_shape(entry, {2 * bs.mr + 1, N, 64}, {}, false, seed++);
    // K: one block, two, one slice, a slice and a block, several slices (M above MR so the slices are taken).
    for (size_t K : k_values(bs)) {
      check_shape(entry, {1, bs.nr + 3, K}, {}, false, seed++);
      check_shape(entry, {2 * bs.mr + 2, bs.nr + 3, K}, {}, false, seed++);
    }
  }
}

TEST_CASE("gemm q8: epilogues (bias, gelu_tanh, silu, multiply, residual) on the last K slice") {
  for (const auto& entry : entries()) {
    const auto& bs = entry.kernels.bs;
    const size_t K_sliced = std::max<size_t>(bs.kc, kQ8BlockSize) + 64;
    for (Activation act : {Activation::none, Activation::gelu_tanh, Activation::silu}) {
      CAPTURE(activation_name(act));
      GemmEpilogue e;
      e.activation = act;
      for (const Shape& s : {Shape{1, bs.nr + 1, 96}, Shape{2 * bs.mr + 1, 2 * bs.nr - 1, K_sliced},
                             Shape{40, 3 * bs.nr, 160}}) {
        check_shape(entry, s, e, true, 300);
        check_shape(entry, s, e, false, 301);
      }
    }
  }
}

TEST_CASE("gemm q8: residual == dst (the in-place residual add), also across K slices") {
  for (const auto& entry : entries()) {
    const auto& bs = entry.kernels.bs;
    const size_t K_sliced = std::max<size_t>(bs.kc, kQ8BlockSize) * 2 + 32;
    for (const Shape& s : {Shape{1, 70, 64}, Shape{2 * bs.mr + 1, 2 * bs.nr + 3, K_sliced}, Shape{50, 100, K_sliced}}) {
      CAPTURE(std::string(entry.name));
      CAPTURE(s.M);
      CAPTURE(s.K);
      const size_t ldc = s.N + 2, ld_blocks = s.K / kQ8BlockSize;
      const auto src = random_vector(s.M * s.K, 400);
      const auto w = random_weights(s.N, s.K, ld_blocks, 401);
      const auto bias = random_vector(s.N, 402);
      const auto residual = random_vector(s.M * ldc, 403);
      // The reference with a separate residual, then ours in place.
      GemmEpilogue e;
      e.bias = bias.data();
      e.activation = Activation::silu;
      e.residual = residual.data();
      e.ld_residual = ldc;
      std::vector<float> ref(s.M * ldc);
      gemm_q8_ref(src.data(), s.M, s.K, w.data(), s.N, s.K, ld_blocks, ref.data(), ldc, e);
      std::vector<float> dst = residual;
      e.residual = dst.data();
      const PackedWeights packed = PackedWeights::pack_q8(w.data(), s.N, s.K, ld_blocks, entry.isa);
      for (int threads : {1, 2}) {
        CAPTURE(threads);
        dst = residual;
        gemm(src.data(), s.M, s.K, packed, dst.data(), ldc, e, threads);
        size_t bad = 0;
        for (size_t m = 0; m < s.M; ++m)
          for (size_t n = 0; n < s.N; ++n) {
            const double r = ref[m * ldc + n], got = dst[m * ldc + n];
            const double tol = tolerance(abs_block_sum(src.data() + m * s.K, w.data() + n * ld_blocks, s.K), s.K,
                                         1.0, r, residual[m * ldc + n], bias[n]);
            if (!(std::fabs(got - r) <= tol) && bad++ < 3) CHECK(std::fabs(got - r) <= tol);
          }
        CHECK(bad == 0);
      }
    }
  }
}

TEST_CASE("gemm q8: 1 and 2 threads give the same bits") {
  for (const auto& entry : entries()) {
    const size_t kc = std::max<size_t>(entry.kernels.bs.kc, kQ8BlockSize);
    for (const Shape& s : {Shape{1, 3000, 256}, Shape{5, 700, 512}, Shape{16, 333, kc + 96}, Shape{150, 500, kc * 2},
                           Shape{200, 64, 64}}) {
      CAPTURE(std::string(entry.name));
      CAPTURE(s.M);
      CAPTURE(s.N);
      CAPTURE(s.K);
      const auto src = random_vector(s.M * s.K, 500);
      const auto w = random_weights(s.N, s.K, s.K / kQ8BlockSize, 501);
      const auto bias = random_vector(s.N, 502);
      const auto residual = random_vector(s.M * s.N, 503);
      const PackedWeights packed = PackedWeights::pack_q8(w.data(), s.N, s.K, s.K / kQ8BlockSize, entry.isa);
      GemmEpilogue e;
      e.bias = bias.data();
      e.activation = Activation::gelu_tanh;
      std::vector<float> one(s.M * s.N), two(s.M * s.N);
      gemm(src.data(), s.M, s.K, packed, one.data(), s.N, e, 1);
      gemm(src.data(), s.M, s.K, packed, two.data(), s.N, e, 2);
      CHECK(std::memcmp(one.data(), two.data(), one.size() * sizeof(float)) == 0);
      GemmEpilogue in_place;
      in_place.residual = one.data();
      in_place.ld_residual = s.N;
      one = residual;
      gemm(src.data(), s.M, s.K, packed, one.data(), s.N, in_place, 1);
      two = residual;
      in_place.residual = two.data();
      gemm(src.data(), s.M, s.K, packed, two.data(), s.N, in_place, 2);
      CHECK(std::memcmp(one.data(), two.data(), one.size() * sizeof(float)) == 0);
    }
  }
}

TEST_CASE("gemm q8: a row alone has the same bits as inside a batch of 13 (one sum order whatever M)") {
  for (const auto& entry : entries()) {
    const auto& bs = entry.kernels.bs;
    // K over one slice: the batch goes through partial sums in dst, the row alone takes the whole K at once.
    for (size_t K : {size_t{96}, std::max<size_t>(bs.kc, kQ8BlockSize) * 2 + 64}) {
      CAPTURE(std::string(entry.name));
      CAPTURE(K);
      const size_t M = 13, N = 2 * bs.nr + 9;
      const auto src = random_vector(M * K, 600);
      const auto w = random_weights(N, K, K / kQ8BlockSize, 601);
      const auto bias = random_vector(N, 602);
      const PackedWeights packed = PackedWeights::pack_q8(w.data(), N, K, K / kQ8BlockSize, entry.isa);
      GemmEpilogue e;
      e.bias = bias.data();
      e.activation = Activation::silu;
      for (RowOrder order : {RowOrder::fastest, RowOrder::invariant}) {
        std::vector<float> batch(M * N);
        gemm(src.data(), M, K, packed, batch.data(), N, e, 1, order);
        for (size_t m = 0; m < M; ++m) {
          CAPTURE(m);
          std::vector<float> alone(N);
          gemm(src.data() + m * K, 1, K, packed, alone.data(), N, e, 1, order);
          CHECK(std::memcmp(alone.data(), batch.data() + m * N, N * sizeof(float)) == 0);
        }
      }
    }
  }
}

TEST_CASE("gemm q8: quantize_row_q8 / dequantize_row_q8") {
  const size_t K = 128;
  auto x = random_vector(K, 700, -3.0f, 3.0f);
  for (size_t i = 32; i < 64; ++i) x[i] = 0.0f;  // an all-zero block
  for (size_t i = 64; i < 96; ++i) x[i] *= 1e-3f;  // a small one
  x[100] = 60000.0f;                                // near f16's largest finite value / 127 · 127
  std::vector<Q8Block> blocks(K / kQ8BlockSize);
  quantize_row_q8(x.data(), K, blocks.data());
  std::vector<float> deq(K);
  dequantize_row_q8(blocks.data(), K, deq.data());
  for (size_t b = 0; b < K / kQ8BlockSize; ++b) {
    CAPTURE(b);
    const float d = half_to_float(blocks[b].scale_f16);
    for (size_t i = 0; i < kQ8BlockSize; ++i) {
      const size_t k = b * kQ8BlockSize + i;
      CAPTURE(k);
      CHECK(blocks[b].q[i] >= -127);
      // Rounding to the nearest multiple of d errs by at most d/2, plus the f32 rounding of x/d and d·q (~1 ulp of
      // |x| each), while |x| ≤ 127·d: the f16 rounding of max|x|/127 may put 127·d just below max|x|, clamped then.
      const double err = std::fabs(static_cast<double>(x[k]) - deq[k]);
      const double amax_excess = std::max(0.0, std::fabs(x[k]) - 127.0 * d);
      CHECK(err <= d / 2 + amax_excess + 2 * FLT_EPSILON * std::fabs(x[k]));
      CHECK(deq[k] == d * blocks[b].q[i]);
    }
  }
  CHECK(blocks[1].scale_f16 == 0);
  CHECK(std::all_of(std::begin(blocks[1].q), std::end(blocks[1].q), [](int8_t q) { return q == 0; }));
  // NaN or Inf: an error naming the column.
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    auto y = x;
    y[77] = bad;
    CHECK_THROWS_WITH_AS(quantize_row_q8(y.data(), K, blocks.data()), doctest::Contains("column 77"), Error);
  }
  CHECK_THROWS_WITH_AS(quantize_row_q8(x.data(), 100, blocks.data()), doctest::Contains("multiple of 32"), Error);
}

TEST_CASE("gemm q8: pack_q8 refuses K not a multiple of 32, and bad strides, naming them") {
  std::vector<Q8Block> w(64);
  for (const auto& entry : entries()) {
    CAPTURE(std::string(entry.name));
    CHECK_THROWS_WITH_AS(PackedWeights::pack_q8(w.data(), 4, 48, 2, entry.isa), doctest::Contains("multiple of 32"),
                         Error);
    CHECK_THROWS_WITH_AS(PackedWeights::pack_q8(w.data(), 4, 64, 1, entry.isa), doctest::Contains("ld must be"), Error);
    CHECK_THROWS_AS(PackedWeights::pack_q8(nullptr, 4, 64, 2, entry.isa), Error);
  }
}

}  // namespace test_gemm_q8
