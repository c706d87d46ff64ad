// The loops that measure the machine's roofs (FMA peak, DRAM read bandwidth), one set per ISA TU
// (ops/base/roofs_<isa>.cpp). Used by the profiler's calibration and by every benchmark in perf/.
#pragma once

#include "ops/base/kernel_table.h"

#include <sqrtdk/isa.h>

#include <cstddef>
#include <span>

namespace sqrtdk::roofs {

// `iterations` rounds of independent FMAs; returns a value that depends on all of them (keeps the loop alive).
float fma_loop_ref(long iterations);     // 8 scalar multiply-adds per round (no FMA in baseline x86-64)
float fma_loop_avx2(long iterations);    // 10 ymm FMAs per round
float fma_loop_avx512(long iterations);  // 10 zmm FMAs per round
double flops_per_iteration(Isa isa);  // of the loop measure_fma_gflops runs for `isa`

// Sum of src[0, n): streaming reads with independent accumulators.
float read_loop_ref(const float* src, size_t n);
float read_loop_avx2(const float* src, size_t n);
float read_loop_avx512(const float* src, size_t n);

// One ISA's loops and the work of one fma_loop round. Table: best ISA first, the reference last (kernel_table.h).
struct RoofKernels {
  double flops_per_iteration;
  float (*fma_loop)(long iterations);
  float (*read_loop)(const float* src, size_t n);
};
std::span<const ops::KernelEntry<RoofKernels>> roof_kernels();

// Peak FP32 GFLOP/s of `isa` on `n_threads` threads (best of `reps` runs of `iterations` rounds per thread).
double measure_fma_gflops(Isa isa, int n_threads, long iterations, int reps);
// DRAM read GB/s on `n_threads` threads over a `bytes` array (best of `reps`; the array is touched first).
double measure_read_gbs(int n_threads, size_t bytes, int reps);

}  // namespace sqrtdk::roofs
