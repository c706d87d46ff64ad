// ISA detection and parsing (ops/base/isa.cpp).
#include <doctest/doctest.h>

#include <sqrtdk/error.h>
#include <sqrtdk/isa.h>

using namespace sqrtdk;

TEST_CASE("isa: names round-trip and bad names are errors") {
  for (Isa isa : {Isa::ref, Isa::avx2, Isa::avx512}) CHECK(parse_isa(isa_name(isa)) == isa);
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
}
