// ISA detection and parsing (ops/base/isa.cpp).
#include <doctest/doctest.h>

#include <sqrtdk/error.h>
#include <sqrtdk/isa.h>

using namespace sqrtdk;

TEST_CASE("isa: names round-trip and bad names are errors") {
  for (Isa isa : all_isas()) CHECK(parse_isa(isa_name(isa)) == isa);
  CHECK(all_isas().back() == kHighestIsa);
  CHECK_THROWS_AS(parse_isa("sse9"), Error);
  CHECK_THROWS_WITH(parse_isa("avx"), doctest::Contains("unknown ISA 'avx'"));
}

TEST_CASE("isa: supported list starts with ref and contains the best and the default") {
  auto isas = supported_isas();
  REQUIRE(!isas.empty());
  CHECK(isas.front() == Isa::ref);
  CHECK(isas.back() == best_isa());
  CHECK(cpu_supports(default_isa()));
  // avx512 kernels here also use FMA and AVX2 instructions, so avx512 support implies avx2 support.
  if (cpu_supports(Isa::avx512)) CHECK(cpu_supports(Isa::avx2));
  // The levels are a chain (kernel_table.h's select_kernel relies on it): each one implies all below it.
  const std::vector<Isa> all = all_isas();
  for (size_t i = 1; i < all.size(); ++i)
    if (cpu_supports(all[i])) CHECK(cpu_supports(all[i - 1]));
}
