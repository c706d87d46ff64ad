// Tests of the f32 GEMM's block sizes from the machine's caches (ops/gemm/gemm_blocking.h): the cache model on the
// two CPU kinds we have measured and on machines that report nothing, the SQRTDK_GEMM_BLOCKING override, and that
// any block sizes give the reference's result (every K-slice, row-block and column-block edge, with the next-panel
// prefetch crossing each), bit-identical at 1 and 2 threads.
#include "ops/gemm/gemm.h"
#include "ops/gemm/gemm_blocking.h"
#include "ops/gemm/gemm_kernels.h"
#include "tests/common/random.h"

#include <sqrtdk/error.h>
#include <sqrtdk/isa.h>

#include <doctest/doctest.h>

#include <cfloat>
#include <cmath>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

using namespace sqrtdk;
using namespace sqrtdk::ops;
using sqrtdk::test::random_vector;
using gemm_detail::BlockSizes;

namespace {

constexpr size_t KiB = 1024, MiB = 1024 * 1024;

}  // namespace

TEST_CASE("gemm blocking: the cache model gives the block sizes measured best on Zen 5") {
  // Zen 5 (48 KiB L1d, 1 MiB L2): measured 2026-11-30 (gemm_avx512.cpp): kc 768, mc 96 (102 is within the measured
  // neighbourhood: 48 and 192 were worse), nc 768; AVX2: kc 512 (its 24-column micro-panel fills the L1d).
  const roofs::CacheSizes zen5{48 * KiB, 1 * MiB, 32 * MiB};
  const BlockSizes avx512 = gemm_detail::derive_block_sizes(6, 64, zen5);
  CHECK(avx512.kc == 768);
  CHECK(avx512.mc == 102);
  CHECK(avx512.nc == 768);
  const BlockSizes avx2 = gemm_detail::derive_block_sizes(4, 24, zen5);
  CHECK(avx2.kc == 512);
}

TEST_CASE("gemm blocking: the model scales with the L2 and stays within its bounds") {
  // Emerald Rapids class (48 KiB L1d, 2 MiB L2): the 64-column micro-panel cannot live in the L1d at kc ≥ 256, so
  // a fifth of the L2: kc 1600; the A and C blocks in 30% of the L2 each.
  const BlockSizes xeon = gemm_detail::derive_block_sizes(6, 64, {48 * KiB, 2 * MiB, 0});
  CHECK(xeon.kc == 1600);
  CHECK(xeon.mc == 96);
  CHECK(xeon.nc == 1600);
  for (const roofs::CacheSizes& c : {roofs::CacheSizes{0, 0, 0}, roofs::CacheSizes{32 * KiB, 256 * KiB, 0},
                                     roofs::CacheSizes{48 * KiB, 32 * MiB, 0}, roofs::CacheSizes{1, 1, 0}}) {
    for (const std::pair<size_t, size_t>& t : {std::pair<size_t, size_t>{6, 64}, {4, 24}}) {
      const size_t mr = t.first, nr = t.second;  // not structured bindings: clang 14 cannot capture them in INFO
      const BlockSizes b = gemm_detail::derive_block_sizes(mr, nr, c);
      INFO("L1d " << c.l1d << " L2 " << c.l2 << " tile " << mr << "x" << nr);
      CHECK(b.mr == mr);
      CHECK(b.nr == nr);
      CHECK(b.kc >= gemm_detail::kMinKc);
      CHECK(b.kc <= gemm_detail::kMaxKc);
      CHECK(b.mc % mr == 0);
      CHECK(b.mc >= 2 * mr);
      CHECK(b.nc % nr == 0);
      CHECK(b.nc >= nr);
    }
  }
  // Unknown caches: the assumed 32 KiB / 1 MiB, never zero block sizes.
  const BlockSizes unknown = gemm_detail::derive_block_sizes(6, 64, {0, 0, 0});
  const BlockSizes assumed = gemm_detail::derive_block_sizes(6, 64, {gemm_detail::kAssumedL1d, gemm_detail::kAssumedL2, 0});
  CHECK(unknown.kc == assumed.kc);
  CHECK(unknown.mc == assumed.mc);
  CHECK(unknown.nc == assumed.nc);
}

TEST_CASE("gemm blocking: SQRTDK_GEMM_BLOCKING overrides any of kc, mc, nc, rounded to the tile") {
  const BlockSizes base{6, 64, 768, 96, 768};
  const BlockSizes a = gemm_detail::apply_blocking_override(base, "kc=1000,nc=200");
  CHECK(a.kc == 992);  // a multiple of 16
  CHECK(a.mc == 96);   // untouched
  CHECK(a.nc == 192);  // a multiple of nr
  const BlockSizes b = gemm_detail::apply_blocking_override(base, "mc=5");
  CHECK(b.mc == 6);  // at least one tile
  CHECK(gemm_detail::apply_blocking_override(base, "").kc == 768);
  for (const char* bad : {"kc", "kc=", "kc=0", "kc=12x", "kc=-5", "xc=64", "kc=99999999"}) {
    INFO(bad);
    try {
      (void)gemm_detail::apply_blocking_override(base, bad);
      FAIL("accepted");
    } catch (const Error& e) {
      CHECK(std::string(e.what()).find("SQRTDK_GEMM_BLOCKING") != std::string::npos);
      CHECK(e.kind() == ErrorKind::bad_input);
    }
  }
}

TEST_CASE("gemm blocking: any block sizes give the reference's product, bit-identical at 1 and 2 threads") {
  // Small blocks so that one call crosses many K slices (partial sums in dst), row blocks and column blocks, and the
  // next-panel prefetch moves to the next panel, the next K slice and the next column block.
  for (const auto& entry : runnable_kernels(gemm_detail::gemm_kernels())) {
    if (entry.isa == Isa::ref) continue;
    const BlockSizes tile = entry.kernels.bs;
    for (const BlockSizes bs : {BlockSizes{tile.mr, tile.nr, 48, 2 * tile.mr, 2 * tile.nr},
                                BlockSizes{tile.mr, tile.nr, 16, 3 * tile.mr, tile.nr},
                                BlockSizes{tile.mr, tile.nr, 200, 5 * tile.mr, 3 * tile.nr}, tile}) {
      for (const std::tuple<size_t, size_t, size_t>& shape :
           {std::tuple<size_t, size_t, size_t>{37, 3 * tile.nr + 5, 131}, {2 * tile.mr + 1, tile.nr - 3, 97},
            {70, 5 * tile.nr, 48}}) {
        const size_t M = std::get<0>(shape), N = std::get<1>(shape), K = std::get<2>(shape);
        INFO(entry.name << " kc " << bs.kc << " mc " << bs.mc << " nc " << bs.nc << " M " << M << " N " << N << " K "
                        << K);
        const auto src = random_vector(M * K, 1), w = random_vector(N * K, 2);
        std::vector<float> ref(M * N);
        gemm_ref(src.data(), M, K, w.data(), N, K, K, ref.data(), N, {});
        const PackedWeights packed = PackedWeights::pack(w.data(), N, K, K, entry.isa);
        std::vector<float> one(M * N), two(M * N);
        gemm_detail::gemm_with_block_sizes(bs, src.data(), M, K, packed, one.data(), N, 1);
        gemm_detail::gemm_with_block_sizes(bs, src.data(), M, K, packed, two.data(), N, 2);
        CHECK(one == two);  // the sum order depends on the tile grid and kc only, never on the threads
        size_t bad = 0;
        for (size_t m = 0; m < M; ++m)
          for (size_t n = 0; n < N; ++n) {
            double abs_sum = 0;
            for (size_t k = 0; k < K; ++k) abs_sum += std::fabs(double(src[m * K + k]) * w[n * K + k]);
            // float accumulation of K products: ≤ K·ε·Σ|a·w| (ε = FLT_EPSILON, twice the unit roundoff, since each
            // K slice adds its partial sum once more).
            const double tol = K * FLT_EPSILON * abs_sum + 1e-6;
            if (!(std::fabs(one[m * N + n] - ref[m * N + n]) <= tol)) ++bad;
          }
        CHECK(bad == 0);
      }
    }
  }
}

TEST_CASE("gemm blocking: the table's block sizes are this machine's, and the sweep entry point checks its input") {
  for (const auto& entry : runnable_kernels(gemm_detail::gemm_kernels())) {
    if (entry.isa == Isa::ref) continue;
    const BlockSizes& bs = entry.kernels.bs;
    const BlockSizes want = gemm_detail::machine_block_sizes(bs.mr, bs.nr);
    CHECK(bs.kc == want.kc);
    CHECK(bs.mc == want.mc);
    CHECK(bs.nc == want.nc);
    const auto w = random_vector(64 * 64, 3);
    const PackedWeights packed = PackedWeights::pack(w.data(), 64, 64, 64, entry.isa);
    std::vector<float> src(64 * 64, 1.0f), dst(64 * 64);
    BlockSizes other_tile = bs;
    other_tile.nr += 1;
    CHECK_THROWS_AS(gemm_detail::gemm_with_block_sizes(other_tile, src.data(), 64, 64, packed, dst.data(), 64, 1),
                    Error);
    BlockSizes zero_kc = bs;
    zero_kc.kc = 0;
    CHECK_THROWS_AS(gemm_detail::gemm_with_block_sizes(zero_kc, src.data(), 64, 64, packed, dst.data(), 64, 1),
                    Error);
  }
}
