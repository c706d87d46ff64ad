// The rule that decides whether measured machine roofs may be cached (engine/src/profiler/profiler.cpp), apart so
// tests can feed it numbers.
#pragma once

#include <sqrtdk/profiler.h>

#include <string>

namespace sqrtdk::profiler_detail {

// Why two back-to-back measurements a and b of the same roofs are too noisy to cache, or "" if they may be cached:
// they must agree within 10% on every figure (FMA peak, BF16 and int8 dot-product peaks, DRAM, L3 and L2 read; a
// figure neither measured, such as a cache level or dot peak the machine lacks, is left out), and the 1-minute load average (load_average; < 0: unknown, not
// checked) must leave n_threads of the n_cores free (n_cores - load_average >= n_threads - 0.25).
// The key of one entry of the roofs cache (~/.cache/sqrtdk/roofs.json): format version, CPU, ISA, thread count.
std::string roofs_cache_key(Isa isa, int n_threads);

std::string roofs_noise(const MachineRoofs& a, const MachineRoofs& b, double load_average, int n_cores,
                        int n_threads);

}  // namespace sqrtdk::profiler_detail
