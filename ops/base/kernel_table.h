// Kernel tables (XNNPACK style): each op lists its kernels once, and dispatch, tests and benchmarks all read that
// list. An op's table is a function returning std::span<const KernelEntry<OpKernels>>, declared in the op's
// internal kernels header and defined in its baseline dispatch TU:
//
//   entries best ISA first, the scalar reference (Isa::ref) last, so the reference is a real slot;
//   select_kernel(table, isa) returns the first entry whose ISA is ≤ isa: an ISA level the op has no kernel for
//   falls back to the next lower one, so adding a level to Isa touches only the ops that gain a kernel for it;
//   runnable_kernels(table) lists the entries this CPU can run (what tests and benchmarks loop over).
//
// Relies on Isa being a chain: every level can run the kernels of all lower levels (isa.h).
// Include only from baseline-ISA translation units: these templates must not be instantiated in a TU compiled
// with -mavx512f and friends (the linker could hand that copy to a baseline caller).
#pragma once

#include <sqrtdk/isa.h>

#include <span>
#include <vector>

namespace sqrtdk::ops {

template <class Kernels>
struct KernelEntry {
  Isa isa;
  const char* name;  // what the kernel is: op, ISA, algorithm (e.g. "softmax_rows_avx512_rr2_p5")
  Kernels kernels;
};

// The entry dispatch uses for `isa`: the best one not above it. Tables end with Isa::ref, so one always matches.
template <class Kernels>
const KernelEntry<Kernels>& select_kernel(std::span<const KernelEntry<Kernels>> table, Isa isa) {
  for (const KernelEntry<Kernels>& entry : table)
    if (static_cast<int>(entry.isa) <= static_cast<int>(isa)) return entry;
  return table.back();
}

// The entries this CPU can run, in table order.
template <class Kernels>
std::vector<KernelEntry<Kernels>> runnable_kernels(std::span<const KernelEntry<Kernels>> table) {
  std::vector<KernelEntry<Kernels>> out;
  for (const KernelEntry<Kernels>& entry : table)
    if (cpu_supports(entry.isa)) out.push_back(entry);
  return out;
}

}  // namespace sqrtdk::ops
