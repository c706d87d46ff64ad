// Threading: OpenMP underneath, but every parallel region takes its thread count from the caller (a Session or
// an op argument), never from global state, so two sessions on one model can each use their own budget.
//
// Determinism rule for every kernel: work is split over output rows/columns/heads, never across a reduction, so
// the result is bit-for-bit the same for any thread count.
#pragma once

#include <algorithm>
#include <cstddef>

#include <omp.h>

namespace sqrtdk {

// The thread count to use when the caller passes 0: what OpenMP would use (OMP_NUM_THREADS or the core count).
inline int resolve_threads(int n_threads) {
  if (n_threads > 0) return n_threads;
  return std::max(1, omp_get_max_threads());
}

// Splits [0, n) into `parts` near-equal contiguous ranges and returns range `part` as [begin, end).
// `granule` rounds range boundaries to multiples of it (e.g. a microkernel tile width), except the last end = n.
struct Range {
  size_t begin, end;
};
inline Range split_range(size_t n, size_t parts, size_t part, size_t granule = 1) {
  const size_t n_granules = (n + granule - 1) / granule;
  const size_t base = n_granules / parts, extra = n_granules % parts;
  const size_t g_begin = part * base + std::min(part, extra);
  const size_t g_end = g_begin + base + (part < extra ? 1 : 0);
  return {std::min(n, g_begin * granule), std::min(n, g_end * granule)};
}

}  // namespace sqrtdk
