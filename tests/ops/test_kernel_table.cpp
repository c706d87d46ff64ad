// Kernel tables (ops/base/kernel_table.h): the fallback rule, and the shape every op's table must have (best ISA
// first, strictly descending, the reference last) so that select_kernel always finds an entry.
#include <doctest/doctest.h>

#include "ops/activation/activation_kernels.h"
#include "ops/attention/attention_kernels.h"
#include "ops/base/kernel_table.h"
#include "ops/base/roofs.h"
#include "ops/gemm/gemm_kernels.h"
#include "ops/gemm/gemm_typed_kernels.h"
#include "ops/norm/norm_kernels.h"
#include "ops/rope/rope_kernels.h"
#include "ops/softmax/softmax_kernels.h"

#include <span>
#include <string>

using namespace sqrtdk;
using namespace sqrtdk::ops;

namespace {

template <class Kernels>
void check_table(const char* op, std::span<const KernelEntry<Kernels>> table) {
  CAPTURE(std::string(op));
  REQUIRE(!table.empty());
  CHECK(table.back().isa == Isa::ref);
  for (size_t i = 0; i < table.size(); ++i) {
    CAPTURE(i);
    CHECK(table[i].name != nullptr);
    if (i > 0) CHECK(static_cast<int>(table[i].isa) < static_cast<int>(table[i - 1].isa));
    CHECK(&select_kernel(table, table[i].isa) == &table[i]);  // each entry is what its own ISA selects
  }
}

}  // namespace

TEST_CASE("kernel tables: an ISA without an entry falls back to the next lower one, ref is the last slot") {
  // A table without an avx2 entry: avx2 takes the reference, avx512 its own entry.
  static constexpr KernelEntry<int> table[] = {{Isa::avx512, "k_avx512", 2}, {Isa::ref, "k_ref", 0}};
  CHECK(select_kernel<int>(table, Isa::avx512).kernels == 2);
  CHECK(select_kernel<int>(table, Isa::avx2).kernels == 0);
  CHECK(select_kernel<int>(table, Isa::ref).kernels == 0);
  for (const auto& entry : runnable_kernels<int>(table)) CHECK(cpu_supports(entry.isa));
}

TEST_CASE("kernel tables: every op's table is ordered best first and ends with the reference") {
  check_table("activation", activation_kernels());
  check_table("attention", attention_kernels());
  check_table("gemm", gemm_detail::gemm_kernels());
  check_table("norm", norm_kernels());
  check_table("rope", rope_kernels());
  check_table("softmax", softmax_kernels());
  check_table("roofs", roofs::roof_kernels());
  check_table("gemm bf16", gemm_detail::gemm_bf16_kernels());
  check_table("gemm q8", gemm_detail::gemm_q8_kernels());
}

// The f32 ops have no kernels above avx512, so the engine tests loop over the f32 paths up to avx512 only
// (tests/common/isas.h) and the bf16/q8 tests cover the levels above: this pins that premise.
TEST_CASE("kernel tables: the f32 ops run avx512's kernels at avx512_vnni and avx512_bf16") {
  for (Isa isa : {Isa::avx512_vnni, Isa::avx512_bf16}) {
    CHECK(select_kernel(activation_kernels(), isa).isa <= Isa::avx512);
    CHECK(select_kernel(attention_kernels(), isa).isa <= Isa::avx512);
    CHECK(select_kernel(gemm_detail::gemm_kernels(), isa).isa <= Isa::avx512);
    CHECK(select_kernel(norm_kernels(), isa).isa <= Isa::avx512);
    CHECK(select_kernel(rope_kernels(), isa).isa <= Isa::avx512);
    CHECK(select_kernel(softmax_kernels(), isa).isa <= Isa::avx512);
  }
}
