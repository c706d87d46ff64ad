// Tests of ops/gemm: every kernel of gemm_kernels() this CPU runs, and oneDNN's matmul as a cross-check (the peer
// library perf/common/onednn_peer.h, not part of libsqrtdk), against gemm_ref (double accumulation) over shapes that
// hit every tile edge of both SIMD kernels (each kernel's MR, NR, KC, MC, NC from gemm_blocking), with leading
// dimensions larger than widths and sentinels past each row's end; epilogues (incl. residual aliasing dst, and
// operands that partly overlap dst, which are refused); gemm_unpacked in both B layouts and with K = 0; bitwise
// equality across thread counts; bad arguments.
#include "ops/gemm/gemm.h"
#include "ops/activation/activation.h"
#include "ops/gemm/gemm_kernels.h"
#include "perf/common/onednn_peer.h"
#include "tests/common/close.h"
#include "tests/common/random.h"

#include <sqrtdk/error.h>
#include <sqrtdk/isa.h>

#include <doctest/doctest.h>
#include <omp.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

using namespace sqrtdk;
using namespace sqrtdk::ops;
using sqrtdk::test::random_vector;

namespace {

constexpr float kSentinel = -12345.0f;

struct Case {
  size_t M, N, K;
  size_t lda, ldc, ldw;
};

// One GEMM under test: an entry of our kernel table, or oneDNN's matmul (the peer, a cross-check of the reference).
struct Backend {
  Isa isa;
  bool onednn;
  const char* kernel;  // the table entry's name, or "onednn"
  std::string name() const { return kernel; }
};

std::vector<Backend> all_backends(bool with_onednn = true) {
  std::vector<Backend> out;
  for (const auto& kernel : runnable_kernels(gemm_detail::gemm_kernels()))
    out.push_back({kernel.isa, false, kernel.name});
  if (with_onednn) out.push_back({best_isa(), true, "onednn"});
  return out;
}

// dst = epilogue(src · wᵀ) by backend b: ours packs the weights and calls gemm(); oneDNN plans a primitive for the
// call and runs it.
void run_gemm(const Backend& b, const float* src, size_t M, size_t lda, const float* w, size_t N, size_t K,
              size_t ldw, float* dst, size_t ldc, const GemmEpilogue& e, int n_threads) {
  if (b.onednn) {
    perf::onednn_gemm(src, M, lda, w, N, K, ldw, dst, ldc, e, n_threads);
    return;
  }
  const PackedWeights packed = PackedWeights::pack(w, N, K, ldw, b.isa);
  REQUIRE(packed.N() == N);
  REQUIRE(packed.K() == K);
  gemm(src, M, lda, packed, dst, ldc, e, n_threads);
}

// Σ_k |src[m,k]·w[n,k]|: the scale of the rounding error of a float dot product.
double abs_dot(const float* a, const float* w, size_t K) {
  double s = 0;
  for (size_t k = 0; k < K; ++k) s += std::fabs(static_cast<double>(a[k]) * w[k]);
  return s;
}

// Tolerance per element: float accumulation of K products errs by at most ≈ K·u·Σ|a·b| (u = FLT_EPSILON/2; we
// allow K·FLT_EPSILON, 2× that, since blocked sums add partial sums once more per K slice), scaled by |multiply|
// (the error passes through v *= multiply; gelu/silu have slopes ≤ 1.13 and are allowed the factor 2 below), plus
// a few ulp of each epilogue step (bias add, a vector tanh/exp within ~4 ulp, multiply, residual add).
double tolerance(double abs_sum, size_t K, double mul, double ref, double residual, double bias) {
  const double eps = FLT_EPSILON;
  return 2.0 * K * eps * abs_sum * std::max(1.0, std::fabs(mul)) +
         16.0 * eps * (std::fabs(ref) + std::fabs(residual) + std::fabs(bias) + 1e-3);
}

void check_case(const Case& c, const GemmEpilogue& epi_template, uint32_t seed, bool with_operands,
                bool with_onednn = true) {
  const auto src = random_vector(c.M * c.lda, seed);
  const auto w = random_vector(c.N * c.ldw, seed + 1);
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
  gemm_ref(src.data(), c.M, c.lda, w.data(), c.N, c.K, c.ldw, ref.data(), c.ldc, epi);
  for (const Backend& b : all_backends(with_onednn)) {
    CAPTURE(b.name());
    std::vector<float> dst(c.M * c.ldc, kSentinel);
    run_gemm(b, src.data(), c.M, c.lda, w.data(), c.N, c.K, c.ldw, dst.data(), c.ldc, epi, 1);
    size_t bad = 0;
    for (size_t m = 0; m < c.M; ++m) {
      for (size_t n = 0; n < c.N; ++n) {
        const double r = ref[m * c.ldc + n], got = dst[m * c.ldc + n];
        const double tol = tolerance(abs_dot(src.data() + m * c.lda, w.data() + n * c.ldw, c.K), c.K,
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
}

// with_onednn: the oneDNN cross-check costs a weight reorder and a primitive per shape, so it runs on the M sweep
// and the multi-block shape only.
void check_shape(size_t M, size_t N, size_t K, uint32_t seed, bool with_onednn = false) {
  CAPTURE(M);
  CAPTURE(N);
  CAPTURE(K);
  check_case({M, N, K, K + 3, N + 5, K + 2}, {}, seed, false, with_onednn);
}

// A K larger than every SIMD kernel's KC (and not a multiple of any): blocked products then keep partial sums in
// dst between K slices, the path epilogue operands aliasing dst must survive.
size_t sliced_k() {
  size_t kc = 1;
  for (const auto& kernel : runnable_kernels(gemm_detail::gemm_kernels())) kc = std::max(kc, kernel.kernels.bs.kc);
  return kc + 88;
}

}  // namespace

TEST_CASE("gemm: shapes across every tile edge, every ISA, cross-checked with oneDNN") {
  // The edges of each SIMD kernel's own blocking (avx512 6×64, avx2 4×24, their KC, MC, NC), every shape checked
  // on every ISA and oneDNN.
  for (const auto& kernel : runnable_kernels(gemm_detail::gemm_kernels())) {
    const Isa isa = kernel.isa;
    CAPTURE(std::string(kernel.name));
    if (isa == Isa::ref) continue;
    const gemm_detail::BlockSizes& b = kernel.kernels.bs;
    // M: 1 .. mr + 1, 2·mr + 1 .. 2·mr + mr/2 + 1 (tails up to mr/2 share the last two tiles evenly, e.g. 6 + 2 ->
    // 4 + 4; the next tail does not), mc + 1, 513.
    std::vector<size_t> ms;
    for (size_t m = 1; m <= b.mr + 1; ++m) ms.push_back(m);
    for (size_t m = 2 * b.mr + 1; m <= 2 * b.mr + b.mr / 2 + 1; ++m) ms.push_back(m);
    for (size_t m : {b.mc + 1, size_t{513}}) ms.push_back(m);
    for (size_t M : ms) check_shape(M, 33, 385, 10, true);
    // N: 1, nr − 1, nr, nr + 1, 3·nr + 5, nc + 1, 3072.
    for (size_t N : {size_t{1}, b.nr - 1, b.nr, b.nr + 1, 3 * b.nr + 5, b.nc + 1, size_t{3072}})
      for (size_t M : {size_t{1}, b.mr - 1, 2 * b.mr + 3}) check_shape(M, N, N > b.nc ? 64 : 256, 20);
    // K: 1, 7, kc − 1, kc, kc + 1, 3072 (several K slices; M ≤ mr takes one slice of the whole K).
    for (size_t K : {size_t{1}, size_t{7}, b.kc - 1, b.kc, b.kc + 1, size_t{3072}})
      for (size_t M : {size_t{1}, size_t{3}, b.mr + 1, 2 * b.mr + 1}) check_shape(M, 33, K, 30);
    // Several MC, NC and K blocks at once.
    check_shape(b.mc + 4, b.nc + 32, b.kc + 144, 35, true);
  }
}

TEST_CASE("gemm: epilogues (bias, gelu_tanh, silu, multiply, residual)") {
  for (Activation act : {Activation::none, Activation::gelu_tanh, Activation::silu})
    for (size_t M : {1, 4, 31})
      for (size_t K : {size_t{19}, sliced_k()}) {
        CAPTURE(activation_name(act));
        CAPTURE(M);
        CAPTURE(K);
        GemmEpilogue e;
        e.activation = act;
        check_case({M, 77, K, K + 1, 80, K}, e, 40, true);
        check_case({M, 77, K, K, 77, K}, e, 41, false);
      }
}

TEST_CASE("gemm: residual aliasing dst (in-place residual add)") {
  // K > kc forces partial sums through dst for M > mr: the aliased residual must still be the original.
  for (const Backend& b : all_backends())
    for (size_t M : {1, 3, 40})
      for (size_t K : {size_t{20}, sliced_k()}) {
        CAPTURE(b.name());
        CAPTURE(M);
        CAPTURE(K);
        const size_t N = 70, ldc = 72;
        const auto src = random_vector(M * K, 50);
        const auto w = random_vector(N * K, 51);
        const auto bias = random_vector(N, 52);
        const auto res = random_vector(M * ldc, 53);
        GemmEpilogue e;
        e.bias = bias.data();
        e.activation = Activation::silu;
        e.residual = res.data();
        e.ld_residual = ldc;
        std::vector<float> ref(M * ldc, 0.0f);
        gemm_ref(src.data(), M, K, w.data(), N, K, K, ref.data(), ldc, e);
        std::vector<float> dst = res;  // dst holds the residual stream
        e.residual = dst.data();
        run_gemm(b, src.data(), M, K, w.data(), N, K, K, dst.data(), ldc, e, 2);
        for (size_t m = 0; m < M; ++m)
          for (size_t n = 0; n < N; ++n) {
            const double tol = tolerance(abs_dot(src.data() + m * K, w.data() + n * K, K), K, 1.0,
                                         ref[m * ldc + n], res[m * ldc + n], bias[n]);
            if (!(std::fabs(dst[m * ldc + n] - ref[m * ldc + n]) <= tol)) {
              CAPTURE(m);
              CAPTURE(n);
              REQUIRE(std::fabs(dst[m * ldc + n] - ref[m * ldc + n]) <= tol);
            }
          }
      }
}

TEST_CASE("gemm: multiply/residual that partly overlap dst are refused (threads would race)") {
  // Each thread copies the operand elements of its own region, then writes that region of dst: an operand shifted
  // against dst would read elements another thread is writing (issue 13). gemm() must refuse it at entry, on every
  // ISA, whatever the thread count or K; being dst itself (same stride) stays allowed (tested above).
  const size_t M = 40, N = 70, ldc = 72;
  for (const auto& kernel : runnable_kernels(gemm_detail::gemm_kernels()))
    for (size_t K : {size_t{20}, sliced_k()}) {
      CAPTURE(std::string(kernel.name));
      CAPTURE(K);
      const auto src = random_vector(M * K, 80);
      const auto w = random_vector(N * K, 81);
      const PackedWeights packed = PackedWeights::pack(w.data(), N, K, K, kernel.isa);
      std::vector<float> buffer(2 * M * ldc + 8, 0.5f);
      float* dst = buffer.data() + ldc;  // room before dst for shifts backwards
      // (pointer offset from dst in floats, stride): each shares elements with dst [M, N] (stride ldc) partially.
      const std::vector<std::pair<ptrdiff_t, size_t>> partial = {
          {1, ldc},                                       // one column right
          {-1, ldc},                                      // one column left
          {static_cast<ptrdiff_t>(ldc), ldc},             // one row down
          {-static_cast<ptrdiff_t>(ldc) + 3, ldc},        // a row up and 3 columns right
          {static_cast<ptrdiff_t>(N) - 1, ldc},           // its first column is dst's last
          {static_cast<ptrdiff_t>((M - 1) * ldc), ldc},   // its first row is dst's last
          {0, ldc + 1},                                   // same start, another stride
          {0, N},                                         // same start, the dense stride
      };
      for (const auto& overlap : partial)  // no structured binding: clang 14 cannot CAPTURE it
        for (bool residual : {false, true})
          for (int threads : {1, 2}) {
            const ptrdiff_t offset = overlap.first;
            const size_t ld = overlap.second;
            CAPTURE(offset);
            CAPTURE(ld);
            CAPTURE(residual);
            CAPTURE(threads);
            GemmEpilogue e;
            (residual ? e.residual : e.multiply) = dst + offset;
            (residual ? e.ld_residual : e.ld_multiply) = ld;
            CHECK_THROWS_AS(gemm(src.data(), M, K, packed, dst, ldc, e, threads), Error);
          }
    }
}

TEST_CASE("gemm: multiply/residual in the same buffer as dst but sharing no element are exact") {
  // dst = columns [0, N) of a [M, 3N] buffer, multiply = columns [N, 2N), residual = columns [2N, 3N), all with the
  // buffer's stride: address spans interleave, elements never coincide (the layout of a fused gate/up buffer).
  // Also multiply == dst (same stride): v *= the old dst. Every ISA, 1 and 2 threads, one and several K slices.
  const size_t M = 40, N = 70, ld = 3 * N;
  for (const auto& kernel : runnable_kernels(gemm_detail::gemm_kernels()))
    for (size_t K : {size_t{20}, sliced_k()})
      for (bool multiply_is_dst : {false, true})
        for (int threads : {1, 2}) {
          CAPTURE(std::string(kernel.name));
          CAPTURE(K);
          CAPTURE(multiply_is_dst);
          CAPTURE(threads);
          const auto src = random_vector(M * K, 90);
          const auto w = random_vector(N * K, 91);
          const auto start = random_vector(M * ld, 92);
          GemmEpilogue e;
          e.activation = Activation::silu;
          e.ld_multiply = ld;
          e.residual = start.data() + 2 * N;
          e.ld_residual = ld;
          e.multiply = multiply_is_dst ? start.data() : start.data() + N;
          std::vector<float> ref(M * ld, kSentinel);
          gemm_ref(src.data(), M, K, w.data(), N, K, K, ref.data(), ld, e);
          std::vector<float> buffer = start;
          e.residual = buffer.data() + 2 * N;
          e.multiply = multiply_is_dst ? buffer.data() : buffer.data() + N;
          const PackedWeights packed = PackedWeights::pack(w.data(), N, K, K, kernel.isa);
          REQUIRE_NOTHROW(gemm(src.data(), M, K, packed, buffer.data(), ld, e, threads));
          for (size_t m = 0; m < M; ++m) {
            for (size_t n = 0; n < N; ++n) {
              const double mul = start[m * ld + (multiply_is_dst ? 0 : N) + n];
              const double tol = tolerance(abs_dot(src.data() + m * K, w.data() + n * K, K), K, mul,
                                           ref[m * ld + n], start[m * ld + 2 * N + n], 0.0);
              if (!(std::fabs(buffer[m * ld + n] - ref[m * ld + n]) <= tol)) {
                CAPTURE(m);
                CAPTURE(n);
                REQUIRE(std::fabs(buffer[m * ld + n] - ref[m * ld + n]) <= tol);
              }
            }
            // The operands' columns are untouched.
            REQUIRE(std::memcmp(buffer.data() + m * ld + N, start.data() + m * ld + N, 2 * N * sizeof(float)) == 0);
          }
        }
}

TEST_CASE("gemm: results are bit-identical for 1, 2, 3 and 4 threads") {
  // Shapes with one work item and with many (decode panels, small-M column items, a 2D grid of row × column
  // blocks), with several K slices (K > kc) and the in-place residual (each item copies its own operand region).
  for (const auto& kernel : runnable_kernels(gemm_detail::gemm_kernels()))
    for (const auto& shape : {std::tuple<size_t, size_t, size_t>{1, 1000, 300}, {4, 333, 64}, {16, 200, 257},
                              {100, 130, 520}, {200, 64, 40}, {150, 700, 800}, {1, 4100, 64}}) {
      const size_t M = std::get<0>(shape), N = std::get<1>(shape), K = std::get<2>(shape);
      CAPTURE(std::string(kernel.name));
      CAPTURE(M);
      CAPTURE(N);
      const auto src = random_vector(M * K, 60);
      const auto w = random_vector(N * K, 61);
      const auto bias = random_vector(N, 62);
      const auto residual = random_vector(M * N, 63);
      GemmEpilogue e;
      e.bias = bias.data();
      e.activation = Activation::gelu_tanh;
      const PackedWeights packed = PackedWeights::pack(w.data(), N, K, K, kernel.isa);
      std::vector<float> one(M * N);
      gemm(src.data(), M, K, packed, one.data(), N, e, 1);
      std::vector<float> one_residual = residual;  // residual == dst: the in-place add of the residual stream
      GemmEpilogue in_place;
      in_place.residual = one_residual.data();
      in_place.ld_residual = N;
      gemm(src.data(), M, K, packed, one_residual.data(), N, in_place, 1);
      for (int threads : {2, 3, 4}) {
        CAPTURE(threads);
        std::vector<float> out(M * N);
        gemm(src.data(), M, K, packed, out.data(), N, e, threads);
        CHECK(std::memcmp(one.data(), out.data(), one.size() * sizeof(float)) == 0);
        out = residual;
        in_place.residual = out.data();
        gemm(src.data(), M, K, packed, out.data(), N, in_place, threads);
        CHECK(std::memcmp(one_residual.data(), out.data(), out.size() * sizeof(float)) == 0);
      }
    }
}

TEST_CASE("gemm: work items cover dst once on the tile grid, balanced, equal and even where the shape allows") {
  // The split decides how two threads share a GEMM (they claim items from both ends, thread_pool.h): items of
  // unequal size leave one thread idle while the other's last item runs. The 134M Llama's QKV at T = 128 (N = 2304
  // = 36 panels of 64, two row blocks) was cut into column blocks of 5 panels and a last one of 1: 16 items, one
  // thread running 37 units of work where its share was 36, and that GEMM scaled 1.83x to two threads where the
  // others did 1.87-1.93x (Zen 5, 2026-12-06). Block sizes are Zen 5's AVX-512 ones (derive_block_sizes on its
  // caches: mr 6, nr 64, kc 768, mc 102, nc 768), and AVX2's tile (4 x 24) with the same cache-derived kc/mc/nc.
  for (const gemm_detail::BlockSizes bs : {gemm_detail::BlockSizes{6, 64, 768, 102, 768},
                                           gemm_detail::BlockSizes{4, 24, 512, 100, 768}}) {
    for (const auto& shape :
         {std::tuple<size_t, size_t, size_t>{1, 768, 768}, {1, 32000, 768}, {4, 3072, 768}, {16, 1000, 300},
          {17, 70, 300}, {32, 2304, 768}, {128, 2304, 768}, {512, 2304, 768}, {128, 768, 2048}, {512, 3072, 3072},
          {100, 4100, 64}, {333, 1001, 513}, {7, 7, 7}}) {
      const size_t M = std::get<0>(shape), N = std::get<1>(shape), K = std::get<2>(shape);
      CAPTURE(bs.nr);
      CAPTURE(M);
      CAPTURE(N);
      const std::vector<gemm_detail::WorkItem> items = gemm_detail::work_items(M, N, K, bs);
      REQUIRE(!items.empty());
      std::vector<int> covered(M * N, 0);
      size_t min_rows = M, max_rows = 0, min_cols = N, max_cols = 0;
      for (const auto& it : items) {
        REQUIRE((it.m0 < it.m1 && it.m1 <= M && it.n0 < it.n1 && it.n1 <= N));
        CHECK(it.m0 % bs.mr == 0);  // every tile whole: the same kernel computes each element whatever the split
        CHECK(it.n0 % bs.nr == 0);
        for (size_t m = it.m0; m < it.m1; ++m)
          for (size_t n = it.n0; n < it.n1; ++n) ++covered[m * N + n];
        min_rows = std::min(min_rows, it.m1 - it.m0), max_rows = std::max(max_rows, it.m1 - it.m0);
        min_cols = std::min(min_cols, it.n1 - it.n0), max_cols = std::max(max_cols, it.n1 - it.n0);
      }
      CHECK(std::all_of(covered.begin(), covered.end(), [](int c) { return c == 1; }));
      // Balanced: blocks differ by at most one tile or panel (the last may be shorter by the shape's own tail).
      CHECK(max_rows - min_rows < 2 * bs.mr);
      CHECK(max_cols - min_cols < 2 * bs.nr);
      const size_t n_panels = (N + bs.nr - 1) / bs.nr;
      if (M > 16 && N % bs.nr == 0 && (n_panels % 2 == 0 || n_panels % 3 == 0)) {
        // A panel count with small divisors: every item equally wide and an even item count.
        CHECK(min_cols == max_cols);
        CHECK(items.size() % 2 == 0);
      }
    }
  }
  // The case that motivated the rule, pinned: 18 items of 4 panels (before: 14 of 5 and 2 of 1).
  const auto qkv = gemm_detail::work_items(128, 2304, 768, gemm_detail::BlockSizes{6, 64, 768, 102, 768});
  CHECK(qkv.size() == 18);
  CHECK(std::all_of(qkv.begin(), qkv.end(), [](const gemm_detail::WorkItem& it) { return it.n1 - it.n0 == 256; }));
}

TEST_CASE("gemm: RowOrder::invariant gives each row the same bits whatever M and the rows beside it") {
  // Continuous batching's guarantee (engine/include/sqrtdk/batch.h): a row computed alone (M = 1), in a small batch
  // (M ≤ 16: column items) and in a large one (M > 16: row blocks, K slices through dst) is bit-identical. K values
  // cover one K slice and several (K > kc), with the fused epilogue on the last slice.
  for (const auto& kernel : runnable_kernels(gemm_detail::gemm_kernels()))
    for (const auto& shape : {std::pair<size_t, size_t>{200, 64}, {333, 300}, {70, 1100}}) {
      const size_t N = shape.first, K = shape.second;
      CAPTURE(std::string(kernel.name));
      CAPTURE(N);
      CAPTURE(K);
      const size_t max_m = 150;
      const auto src = random_vector(max_m * K, 70);
      const auto w = random_vector(N * K, 71);
      const auto bias = random_vector(N, 72);
      const auto residual = random_vector(max_m * N, 73);
      const PackedWeights packed = PackedWeights::pack(w.data(), N, K, K, kernel.isa);
      GemmEpilogue e;
      e.bias = bias.data();
      e.activation = Activation::silu;
      // Every row alone, in place over its residual row (as the residual stream is updated).
      std::vector<float> alone = residual;
      for (size_t m = 0; m < max_m; ++m) {
        GemmEpilogue row = e;
        row.residual = alone.data() + m * N;
        row.ld_residual = N;
        gemm(src.data() + m * K, 1, K, packed, alone.data() + m * N, N, row, 2, RowOrder::invariant);
      }
      for (size_t M : {size_t{2}, size_t{7}, size_t{16}, size_t{17}, size_t{64}, max_m}) {
        CAPTURE(M);
        std::vector<float> batch = residual;
        GemmEpilogue in_place = e;
        in_place.residual = batch.data();
        in_place.ld_residual = N;
        gemm(src.data(), M, K, packed, batch.data(), N, in_place, 2, RowOrder::invariant);
        CHECK(std::memcmp(alone.data(), batch.data(), M * N * sizeof(float)) == 0);
      }
      // The control: RowOrder::fastest takes the decode kernel at M = 1, whose split accumulators add in another
      // order, so on the SIMD ISAs some row alone differs from the same row in a batch (why batches need invariant).
      if (kernel.isa != Isa::ref) {
        std::vector<float> fast = residual;
        size_t differing = 0;
        for (size_t m = 0; m < max_m; ++m) {
          GemmEpilogue row = e;
          row.residual = fast.data() + m * N;
          row.ld_residual = N;
          gemm(src.data() + m * K, 1, K, packed, fast.data() + m * N, N, row, 2, RowOrder::fastest);
          differing += std::memcmp(fast.data() + m * N, alone.data() + m * N, N * sizeof(float)) != 0;
        }
        CHECK(differing > 0);
      }
    }
}

TEST_CASE("gemm_unpacked: both B layouts, every ISA, 1 vs 2, 3 and 4 threads bitwise") {
  GemmWorkspace ws;
  for (const auto& kernel : runnable_kernels(gemm_detail::gemm_kernels()))
    for (BLayout layout : {BLayout::nk, BLayout::kn})
      for (size_t M : {1, 4, 5, 17})  // ≤ 4: direct kernels; > 4: packed B
        for (size_t N : {1, 17, 100})
          for (size_t K : {1, 7, 300}) {
            CAPTURE(std::string(kernel.name));
            CAPTURE(layout == BLayout::nk ? "nk" : "kn");
            CAPTURE(M);
            CAPTURE(N);
            CAPTURE(K);
            const bool kn = layout == BLayout::kn;
            const size_t lda = K + 1, ldb = (kn ? N : K) + 3, ldc = N + 2;
            const auto A = random_vector(M * lda, 70);
            const auto B = random_vector((kn ? K : N) * ldb, 71);
            const float alpha = 0.125f;
            std::vector<float> ref(M * ldc, kSentinel), c1(M * ldc, kSentinel), c2(M * ldc, kSentinel);
            gemm_unpacked_ref(M, N, K, alpha, A.data(), lda, B.data(), ldb, layout, ref.data(), ldc);
            gemm_unpacked(kernel.isa, M, N, K, alpha, A.data(), lda, B.data(), ldb, layout, c1.data(), ldc, ws, 1);
            for (int threads : {2, 3, 4}) {
              CAPTURE(threads);
              gemm_unpacked(kernel.isa, M, N, K, alpha, A.data(), lda, B.data(), ldb, layout, c2.data(), ldc, ws,
                            threads);
              REQUIRE(std::memcmp(c1.data(), c2.data(), c1.size() * sizeof(float)) == 0);
            }
            for (size_t m = 0; m < M; ++m) {
              for (size_t n = 0; n < N; ++n) {
                double s = 0;
                for (size_t k = 0; k < K; ++k)
                  s += std::fabs(static_cast<double>(A[m * lda + k]) * (kn ? B[k * ldb + n] : B[n * ldb + k]));
                // alpha is a power of two: exact; same K·ε bound as gemm.
                const double tol = 2.0 * K * FLT_EPSILON * s * alpha + 1e-30;
                if (!(std::fabs(c1[m * ldc + n] - ref[m * ldc + n]) <= tol)) {
                  CAPTURE(m);
                  CAPTURE(n);
                  REQUIRE(std::fabs(c1[m * ldc + n] - ref[m * ldc + n]) <= tol);
                }
              }
              for (size_t n = N; n < ldc; ++n) REQUIRE(c1[m * ldc + n] == kSentinel);
            }
          }
}

TEST_CASE("gemm_unpacked: K = 0 writes alpha · (an empty sum) = 0, and nothing past N") {
  // An empty product is exactly 0 whatever C held before (NaN included: C is written, not accumulated into) and
  // whatever alpha is; A and B may be null since no element of them exists. Every ISA, both B layouts, the direct
  // (M ≤ 4) and packed sizes, 1 and 2 threads.
  GemmWorkspace ws;
  for (const auto& kernel : runnable_kernels(gemm_detail::gemm_kernels()))
    for (BLayout layout : {BLayout::nk, BLayout::kn})
      for (size_t M : {1, 4, 5, 17})
        for (size_t N : {1, 17, 100})
          for (int threads : {1, 2})
            for (bool null_operands : {false, true}) {
              CAPTURE(std::string(kernel.name));
              CAPTURE(layout == BLayout::nk ? "nk" : "kn");
              CAPTURE(M);
              CAPTURE(N);
              CAPTURE(threads);
              CAPTURE(null_operands);
              const size_t ldc = N + 2;
              const std::vector<float> A(M * 3, 1.0f), B(N * 3, 1.0f);
              std::vector<float> C(M * ldc, kSentinel);
              for (size_t m = 0; m < M; ++m) std::fill(C.begin() + m * ldc, C.begin() + m * ldc + N, NAN);
              const float* a = null_operands ? nullptr : A.data();
              const float* b = null_operands ? nullptr : B.data();
              gemm_unpacked(kernel.isa, M, N, 0, 0.125f, a, 1, b, layout == BLayout::kn ? N : 1, layout, C.data(),
                            ldc, ws, threads);
              for (size_t m = 0; m < M; ++m) {
                for (size_t n = 0; n < N; ++n) REQUIRE(C[m * ldc + n] == 0.0f);
                for (size_t n = N; n < ldc; ++n) REQUIRE(C[m * ldc + n] == kSentinel);
              }
              std::vector<float> ref(M * ldc, kSentinel);
              gemm_unpacked_ref(M, N, 0, 0.125f, a, 1, b, layout == BLayout::kn ? N : 1, layout, ref.data(), ldc);
              REQUIRE(std::memcmp(ref.data(), C.data(), C.size() * sizeof(float)) == 0);
            }
}

TEST_CASE("onednn peer: the OpenMP thread count is restored after a call, also when it throws") {
  // oneDNN takes its thread count from the calling thread's OpenMP state; the peer sets it per call and must give
  // the caller's back on every exit (bench-gemm and the cross-checks above rely on it).
  const int before = omp_get_max_threads();
  omp_set_num_threads(3);
  const size_t M = 2, N = 16, K = 8;
  const auto src = random_vector(M * K, 100), w = random_vector(N * K, 101);
  std::vector<float> dst(M * N);
  perf::onednn_gemm(src.data(), M, K, w.data(), N, K, K, dst.data(), N, {}, 1);
  CHECK(omp_get_max_threads() == 3);
  perf::OnednnMatmul matmul(w.data(), N, K, K, M, K, N, {}, nullptr, 2);
  CHECK(omp_get_max_threads() == 3);
  GemmEpilogue with_bias;
  with_bias.bias = w.data();
  CHECK_THROWS_AS(matmul.run(src.data(), dst.data(), with_bias, 2), Error);  // not the epilogue it was made for
  CHECK(omp_get_max_threads() == 3);
  try {
    const perf::ScopedOmpThreads scoped(1);
    CHECK(omp_get_max_threads() == 1);
    throw Error("thrown while the peer's thread count is in effect");
  } catch (const Error&) {
  }
  CHECK(omp_get_max_threads() == 3);
  omp_set_num_threads(before);
}

TEST_CASE("gemm: bad arguments throw sqrtdk::Error") {
  const size_t M = 4, N = 8, K = 16;
  std::vector<float> src(M * K, 1.0f), w(N * K, 1.0f), dst(M * N);
  const Isa isa = best_isa();
  CHECK_THROWS_AS(PackedWeights::pack(w.data(), 0, K, K, isa), Error);
  CHECK_THROWS_AS(PackedWeights::pack(w.data(), N, 0, K, isa), Error);
  CHECK_THROWS_AS(PackedWeights::pack(nullptr, N, K, K, isa), Error);
  CHECK_THROWS_AS(PackedWeights::pack(w.data(), N, K, K - 1, isa), Error);
  const PackedWeights packed = PackedWeights::pack(w.data(), N, K, K, isa);
  CHECK(packed.bytes() >= N * K * sizeof(float));
  CHECK_THROWS_AS(gemm(nullptr, M, K, packed, dst.data(), N), Error);
  CHECK_THROWS_AS(gemm(src.data(), M, K, packed, nullptr, N), Error);
  CHECK_THROWS_AS(gemm(src.data(), M, K - 1, packed, dst.data(), N), Error);
  CHECK_THROWS_AS(gemm(src.data(), M, K, packed, dst.data(), N - 1), Error);
  CHECK_THROWS_AS(gemm(src.data(), M, K, packed, src.data(), N), Error);  // src overlaps dst
  CHECK_THROWS_AS(gemm(src.data(), M, K, PackedWeights{}, dst.data(), N), Error);
  CHECK_THROWS_AS(gemm(src.data(), M, K, packed, dst.data(), N, {}, -1), Error);
  GemmEpilogue e;
  e.residual = dst.data();
  e.ld_residual = N - 1;
  CHECK_THROWS_AS(gemm(src.data(), M, K, packed, dst.data(), N, e), Error);
  e = {};
  e.multiply = dst.data();
  e.ld_multiply = 0;
  CHECK_THROWS_AS(gemm(src.data(), M, K, packed, dst.data(), N, e), Error);
  GemmWorkspace ws;
  CHECK_THROWS_AS(gemm_unpacked(isa, M, N, K, 1.0f, src.data(), K, w.data(), K - 1, BLayout::nk, dst.data(), N, ws),
                  Error);
  CHECK_THROWS_AS(gemm_unpacked(isa, M, N, K, 1.0f, src.data(), K, w.data(), N - 1, BLayout::kn, dst.data(), N, ws),
                  Error);
  CHECK_THROWS_AS(gemm_unpacked(isa, M, N, K, 1.0f, src.data(), K - 1, w.data(), K, BLayout::nk, dst.data(), N, ws),
                  Error);
  CHECK_NOTHROW(gemm(src.data(), 0, K, packed, dst.data(), N));  // M = 0: nothing to do
}

TEST_CASE("gemm: activation references") {
  CHECK(gelu_tanh_ref(0.0f) == 0.0f);
  // The scalar refs compute in double and round once: within 1 ulp of the exact values (computed in double with
  // Python's math module).
  SQRTDK_CHECK_ULP(gelu_tanh_ref(1.0f), 0.8411919906082768, 1, "double evaluation rounded once to float");
  SQRTDK_CHECK_ULP(gelu_tanh_ref(-3.0f), -0.0036373920817729943, 1, "double evaluation rounded once to float");
  CHECK(silu_ref(0.0f) == 0.0f);
  SQRTDK_CHECK_ULP(silu_ref(1.0f), 0.7310585786300049, 1, "double evaluation rounded once to float");
  SQRTDK_CHECK_ULP(silu_ref(-100.0f), -3.720075976020836e-42, 1, "a subnormal: ulp 2^-149, no flush to zero");
}

TEST_CASE("gemm: the fused activations are ops/activation's, bit for bit") {
  // K = 1 with weights 1: the product is exactly src, so the epilogue's output is the activation alone, which must
  // equal the standalone op's (one implementation: ops/activation/activation_simd.h on ops/base/vec_exp.h).
  const size_t M = 3, N = 100;
  std::vector<float> src(M), w(N, 1.0f);
  for (size_t m = 0; m < M; ++m) src[m] = -9.0f + 4.5f * m;
  for (const auto& kernel : runnable_kernels(gemm_detail::gemm_kernels())) {
    if (kernel.isa == Isa::ref) continue;  // the double references differ by design (tanh form vs exp form)
    CAPTURE(std::string(kernel.name));
    const PackedWeights packed = PackedWeights::pack(w.data(), N, 1, 1, kernel.isa);
    // The bias (0.01 n) makes every lane's input different: v = src[m] + bias[n].
    std::vector<float> bias(N);
    for (size_t n = 0; n < N; ++n) bias[n] = 0.01f * static_cast<float>(n);
    for (Activation act : {Activation::gelu_tanh, Activation::silu}) {
      CAPTURE(activation_name(act));
      GemmEpilogue e;
      e.bias = bias.data();
      e.activation = act;
      std::vector<float> fused(M * N), pre(M * N), alone(M * N);
      for (size_t i = 0; i < pre.size(); ++i) pre[i] = src[i / N] + bias[i % N];
      gemm(src.data(), M, 1, packed, fused.data(), N, e, 1);
      if (act == Activation::gelu_tanh)
        ops::gelu_tanh(kernel.isa, pre.data(), alone.data(), pre.size());
      else
        ops::silu(kernel.isa, pre.data(), alone.data(), pre.size());
      CHECK(std::memcmp(fused.data(), alone.data(), fused.size() * sizeof(float)) == 0);
    }
  }
}
