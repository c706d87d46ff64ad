// The ISA levels the f32 engine tests loop over: the supported ones up to avx512. The levels above it
// (avx512_vnni, avx512_bf16) add bf16/q8 GEMM kernels only; the f32 ops select avx512's kernels there (pinned by
// tests/ops/test_kernel_table.cpp), so an f32 model would run the same code again at twice the test time.
#pragma once

#include <sqrtdk/isa.h>

#include <vector>

namespace sqrtdk::test {

inline std::vector<Isa> f32_isas() {
  std::vector<Isa> out;
  for (Isa isa : supported_isas())
    if (isa <= Isa::avx512) out.push_back(isa);
  return out;
}

}  // namespace sqrtdk::test
