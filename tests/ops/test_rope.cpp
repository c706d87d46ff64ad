// RoPE (ops/rope): the table against double math, every ISA against the reference for both layouts over head
// widths whose halves hit every vector tail, and the properties that pin the semantics down (position 0 is the
// identity, a rotation keeps each pair's length, interleaved = rotate-half up to a permutation of the head).
#include <doctest/doctest.h>

#include "tests/common/close.h"

#include "ops/rope/rope.h"
#include "ops/rope/rope_kernels.h"

#include <sqrtdk/error.h>
#include <sqrtdk/isa.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

using namespace sqrtdk;

namespace {

// head_dim / 2 = 1, 7, 8, 9, 15, 16, 17, 31, 32, 33, 40 (head_dim 80), 64.
const size_t kHeadDims[] = {2, 14, 16, 18, 30, 32, 34, 62, 64, 66, 80, 128};

std::vector<float> make_rows(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  std::vector<float> x(n);
  for (float& v : x) v = dist(rng);
  return x;
}

}  // namespace

TEST_CASE("rope: table entries are cos/sin of pos * theta^(-2i/D) rounded once") {
  const ops::RopeTable table(64, 80, 10000.0f);
  double worst = 0.0;
  for (size_t pos = 0; pos < 64; ++pos)
    for (size_t i = 0; i < 40; ++i) {
      const double angle = static_cast<double>(pos) * std::pow(10000.0, -2.0 * i / 80.0);
      worst = std::max(worst, std::abs(table.cos_half(pos)[i] - std::cos(angle)));
      worst = std::max(worst, std::abs(table.sin_half(pos)[i] - std::sin(angle)));
      CHECK(table.cos_pairs(pos)[2 * i] == table.cos_half(pos)[i]);
      CHECK(table.cos_pairs(pos)[2 * i + 1] == table.cos_half(pos)[i]);
      CHECK(table.sin_pairs(pos)[2 * i] == -table.sin_half(pos)[i]);
      CHECK(table.sin_pairs(pos)[2 * i + 1] == table.sin_half(pos)[i]);
    }
  CHECK(worst <= 6e-8);  // half an ulp of values <= 1: 2^-25 = 3e-8, rounded once
}

TEST_CASE("rope: every ISA matches the reference for both layouts over every tail") {
  const size_t n_tokens = 5, n_heads = 3, pos0 = 9;
  for (size_t head_dim : kHeadDims) {
    const ops::RopeTable table(32, head_dim, 10000.0f);
    const size_t ld = n_heads * head_dim + 4;  // strided rows, e.g. q inside a fused qkv row
    const std::vector<float> x = make_rows(n_tokens * ld, static_cast<uint32_t>(head_dim));
    for (auto layout : {ops::RopeLayout::rotate_half, ops::RopeLayout::interleaved}) {
      std::vector<float> want = x;
      ops::rope_ref(table, layout, want.data(), n_tokens, ld, n_heads, head_dim, pos0);
      for (const auto& kernel : ops::runnable_kernels(ops::rope_kernels())) {
        const Isa isa = kernel.isa;
        CAPTURE(std::string(kernel.name));
        CAPTURE(head_dim);
        CAPTURE(static_cast<int>(layout));
        std::vector<float> got = x;
        ops::rope(isa, table, layout, got.data(), n_tokens, ld, n_heads, head_dim, pos0);
        // Tolerance 1e-6: inputs are in [-2, 2]; the SIMD path rounds x1*sin before a fused multiply-add, about
        // 1.5 ulp of 2 (2.4e-7 each) against the reference's single rounding.
        double worst = 0.0;
        for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(double(got[i]) - want[i]));
        CHECK(worst <= 1e-6);
        // Padding past n_heads * head_dim untouched.
        for (size_t t = 0; t < n_tokens; ++t)
          for (size_t i = n_heads * head_dim; i < ld; ++i) CHECK(got[t * ld + i] == x[t * ld + i]);
      }
    }
  }
}

TEST_CASE("rope: position 0 is the identity, pair lengths are kept, interleaved is rotate-half permuted") {
  const size_t head_dim = 80, half = 40, n_heads = 2, n_tokens = 7, ld = n_heads * head_dim;
  const ops::RopeTable table(64, head_dim, 500000.0f);
  const std::vector<float> x = make_rows(n_tokens * ld, 3);
  for (const auto& kernel : ops::runnable_kernels(ops::rope_kernels())) {
    const Isa isa = kernel.isa;
    CAPTURE(std::string(kernel.name));
    std::vector<float> y = x;
    ops::rope(isa, table, ops::RopeLayout::rotate_half, y.data(), 1, ld, n_heads, head_dim, 0);
    for (size_t i = 0; i < ld; ++i) CHECK(y[i] == x[i]);

    y = x;
    ops::rope(isa, table, ops::RopeLayout::rotate_half, y.data(), n_tokens, ld, n_heads, head_dim, 50);
    for (size_t t = 0; t < n_tokens; ++t)
      for (size_t h = 0; h < n_heads; ++h)
        for (size_t i = 0; i < half; ++i) {
          const size_t base = t * ld + h * head_dim;
          const double before = std::hypot(x[base + i], x[base + half + i]);
          const double after = std::hypot(y[base + i], y[base + half + i]);
          // A rotation keeps the pair's length: cos/sin from the table (float) and two float FMAs per output.
          SQRTDK_CHECK_REL(after, before, 1e-6, "rotation: float cos/sin and FMAs, a few ulp of the length");
        }

    // Moving element (i, i + half) to (2i, 2i + 1) turns rotate-half into interleaved: the same float operations
    // run in both layouts, so the results are bit-identical.
    std::vector<float> perm(x.size());
    for (size_t t = 0; t < n_tokens; ++t)
      for (size_t h = 0; h < n_heads; ++h)
        for (size_t i = 0; i < half; ++i) {
          const size_t base = t * ld + h * head_dim;
          perm[base + 2 * i] = x[base + i];
          perm[base + 2 * i + 1] = x[base + half + i];
        }
    ops::rope(isa, table, ops::RopeLayout::interleaved, perm.data(), n_tokens, ld, n_heads, head_dim, 50);
    for (size_t t = 0; t < n_tokens; ++t)
      for (size_t h = 0; h < n_heads; ++h)
        for (size_t i = 0; i < half; ++i) {
          const size_t base = t * ld + h * head_dim;
          REQUIRE(perm[base + 2 * i] == y[base + i]);
          REQUIRE(perm[base + 2 * i + 1] == y[base + half + i]);
        }
  }
}

TEST_CASE("rope: bad arguments are errors") {
  CHECK_THROWS_AS(ops::RopeTable(16, 7, 10000.0f), Error);
  CHECK_THROWS_AS(ops::RopeTable(0, 8, 10000.0f), Error);
  CHECK_THROWS_AS(ops::RopeTable(16, 8, 0.0f), Error);
  const ops::RopeTable table(16, 8, 10000.0f);
  std::vector<float> x(4 * 16);
  const Isa isa = default_isa();
  CHECK_THROWS_WITH_AS(ops::rope(isa, table, ops::RopeLayout::rotate_half, x.data(), 4, 16, 2, 8, 13),
                       doctest::Contains("exceed the table's max_seq 16"), Error);
  CHECK_THROWS_WITH_AS(ops::rope(isa, table, ops::RopeLayout::rotate_half, x.data(), 4, 16, 2, 16, 0),
                       doctest::Contains("head_dim 16 differs"), Error);
  CHECK_THROWS_AS(ops::rope(isa, table, ops::RopeLayout::rotate_half, x.data(), 4, 8, 2, 8, 0), Error);
  CHECK_NOTHROW(ops::rope(isa, table, ops::RopeLayout::interleaved, x.data(), 4, 16, 2, 8, 12));
}

TEST_CASE("rope: any thread count gives the same bits (rows split into items at their own positions)") {
  // 97 tokens x 16 heads x 64 = 99 328 floats: above the 2^16 under which rope stays on one thread; items of 16
  // rows, so 7 items, the last one short, each starting at its own position pos0 + first row.
  const size_t n_tokens = 97, n_heads = 16, head_dim = 64, pos0 = 3;
  const size_t ld = n_heads * head_dim + 4;
  const ops::RopeTable table(128, head_dim, 10000.0f);
  const std::vector<float> x = make_rows(n_tokens * ld, 21);
  for (const auto& kernel : ops::runnable_kernels(ops::rope_kernels())) {
    CAPTURE(std::string(kernel.name));
    for (auto layout : {ops::RopeLayout::rotate_half, ops::RopeLayout::interleaved}) {
      std::vector<float> one = x;
      ops::rope(kernel.isa, table, layout, one.data(), n_tokens, ld, n_heads, head_dim, pos0, 1);
      CHECK(one != x);
      for (int threads : {2, 3, 4}) {
        CAPTURE(threads);
        std::vector<float> many = x;
        ops::rope(kernel.isa, table, layout, many.data(), n_tokens, ld, n_heads, head_dim, pos0, threads);
        REQUIRE(many == one);
      }
    }
  }
}
