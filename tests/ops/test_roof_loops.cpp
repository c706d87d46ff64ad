// The bandwidth probes' loops (ops/base/roofs_<isa>.cpp) do the work they are timed for: every ISA's read-and-write
// loops write exactly -src and a + b, in place and not, over lengths that hit each vector loop's tail; the
// multi-stream read loop sums each element once at every stream count; and measure_access_gbs and
// measure_dram_read_gbs run every pattern at one and two threads. A loop that skipped its tail or wrote
// nothing would time less work than it counts, and its roof would read high.
#include "ops/base/aligned_buffer.h"
#include "ops/base/roofs.h"

#include <doctest/doctest.h>

#include <cmath>
#include <cstddef>
#include <random>

using namespace sqrtdk;

namespace {

// 0, shorter than one vector, each ISA's round (4 x 16 floats on avx512, 4 x 8 on avx2) and one past it, and a
// length with every tail at once.
constexpr size_t kLengths[] = {0, 1, 7, 8, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 1000};

void fill(AlignedBuffer<float>& v, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-3.0f, 3.0f);
  for (size_t i = 0; i < v.size(); ++i) v[i] = dist(rng);
}

}  // namespace

TEST_CASE("roof loops: read_write and read2_write write exactly what they read, tails included, every ISA") {
  for (const auto& entry : roofs::roof_kernels()) {
    if (!cpu_supports(entry.isa)) continue;
    const roofs::RoofKernels& k = entry.kernels;
    for (const size_t n : kLengths) {
      CAPTURE(entry.name);
      CAPTURE(n);
      // One float past the end is a guard: a loop that overruns its length writes it.
      AlignedBuffer<float> a(n + 1), b(n + 1), dst(n + 1);
      fill(a, 1);
      fill(b, 2);
      dst.zero();
      const float guard = 12345.0f;
      dst[n] = guard;

      k.read_write_loop(a.data(), dst.data(), n);
      for (size_t i = 0; i < n; ++i) REQUIRE(dst[i] == -a[i]);  // a sign flip is exact
      CHECK(dst[n] == guard);

      k.read_write_loop(dst.data(), dst.data(), n);  // in place: back to a
      for (size_t i = 0; i < n; ++i) REQUIRE(dst[i] == a[i]);
      CHECK(dst[n] == guard);

      k.read2_write_loop(a.data(), b.data(), dst.data(), n);
      for (size_t i = 0; i < n; ++i) REQUIRE(dst[i] == a[i] + b[i]);  // one rounding, the same in every ISA
      CHECK(dst[n] == guard);

      // The read loop sums in its own order per ISA: within the bound of any float summation order,
      // (n - 1) u sum |a_i| with u = 2^-24, and a missed tail element (|a_i| up to 3) would almost surely break it.
      double exact = 0, magnitude = 0;
      for (size_t i = 0; i < n; ++i) {
        exact += a[i];
        magnitude += std::fabs(a[i]);
      }
      const double bound = static_cast<double>(n) * std::ldexp(1.0, -24) * magnitude;
      CHECK(std::fabs(k.read_loop(a.data(), n) - exact) <= bound);
    }
  }
}

TEST_CASE("roof loops: read_streams_loop sums every element once, at every stream count and tail, every ISA") {
  // Lengths that leave each stream count's parts a remainder: below one round of all streams (the whole array is
  // then the tail), one float short of and past 8 streams x 2 zmm, and uneven lengths.
  constexpr size_t kStreamLengths[] = {0, 1, 31, 255, 256, 257, 511, 512, 513, 1000, 4099};
  for (const auto& entry : roofs::roof_kernels()) {
    if (!cpu_supports(entry.isa)) continue;
    for (const size_t n : kStreamLengths)
      for (const int streams : {1, 2, 3, 4, 8, 9}) {  // 3 and 9: not a supported count, read as one stream
        CAPTURE(entry.name);
        CAPTURE(n);
        CAPTURE(streams);
        // Small integers: every partial sum is exact in float (below 2^24), so any order gives the same sum and
        // an element read twice or missed shows as an exact mismatch.
        AlignedBuffer<float> a(n);
        for (size_t i = 0; i < n; ++i) a[i] = static_cast<float>((i * 7) % 13) + 1.0f;
        double exact = 0;
        for (size_t i = 0; i < n; ++i) exact += a[i];
        CHECK(entry.kernels.read_streams_loop(a.data(), n, streams) == exact);
      }
  }
}

TEST_CASE("measure_dram_read_gbs: every stream count gives a finite, positive rate at 1 and 2 threads") {
  for (const int threads : {1, 2}) {
    CAPTURE(threads);
    for (const int streams : roofs::kDramReadStreams) {
      const double gbs = roofs::measure_read_streams_gbs(threads, size_t{1} << 20, 2, streams);
      CHECK(std::isfinite(gbs));
      CHECK(gbs > 0);
    }
    const double best = roofs::measure_dram_read_gbs(threads, size_t{1} << 20, 1);
    CHECK(std::isfinite(best));
    CHECK(best > 0);
  }
}

TEST_CASE("measure_access_gbs: every access pattern gives a finite, positive rate at 1 and 2 threads") {
  for (const roofs::Access access : roofs::kAccesses) {
    CAPTURE(roofs::access_name(access));
    CHECK(roofs::access_arrays(access) >= 1);
    CHECK(roofs::access_touches(access) >= roofs::access_arrays(access));  // each array is read at least once
    for (const int threads : {1, 2}) {
      const double gbs = roofs::measure_access_gbs(access, threads, size_t{1} << 20, 2, 2);
      CHECK(std::isfinite(gbs));
      CHECK(gbs > 0);
    }
  }
}
