// Threading: every op parallelises with parallel_for (ops/base/thread_pool.h) on the calling thread's own pool,
// taking its thread count from the caller (a Session or an op argument), never from global state, so two sessions
// on one model can each use their own budget. Why a pool per calling thread rather than a pool object passed down:
// the ops keep their `int n_threads` argument, and two sessions on two threads never share or wait for each other's
// workers (thread_pool.h, this_thread_pool).
//
// How work is split, for a machine shared with other processes (issue 13): an op cuts its work into more items
// than threads (GEMM tiles or panels, attention heads and blocks, fixed-size row or element chunks) and the
// participants claim items as they come, the caller included; the caller never waits for a helper that has not
// started, so a descheduled helper's share is done by the others instead of stalling the op for a time slice.
// Small work runs on one thread (each op states its threshold): waking a helper costs more than it saves.
//
// Determinism rule for every kernel: item boundaries depend only on the problem shape (never on the thread count
// or on which worker runs an item), and no reduction is split across items, so the result is bit-for-bit the same
// for any thread count and any schedule.
#pragma once

#include "ops/base/thread_pool.h"

#include <algorithm>
#include <cstddef>

namespace sqrtdk {

// The thread count to use when the caller passes 0: OMP_NUM_THREADS if set to a positive count (its first entry,
// as OpenMP reads it), else the number of CPUs this process may run on (sched_getaffinity). Read once.
int resolve_threads(int n_threads);

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

// Item `item` of [0, n) cut into fixed chunks of `chunk` elements (the last one shorter): boundaries depend on
// n and chunk only.
inline Range chunk_range(size_t n, size_t chunk, size_t item) {
  return {std::min(n, item * chunk), std::min(n, (item + 1) * chunk)};
}
inline size_t chunk_count(size_t n, size_t chunk) { return (n + chunk - 1) / chunk; }

// The row ops' split (softmax, norms, RoPE, the engine's KV store): under kRowOpOneThreadBelow floats in all on one
// thread (~15 us on one core: waking a helper costs more than it saves; softmax of 64 x 64 at 2 threads ran at a
// quarter of the 1-thread rate per core); above, items of whole rows, about kRowOpItemFloats each, boundaries from
// the shape only, so a late helper's share is picked up by the others and the result never depends on the split.
inline constexpr size_t kRowOpOneThreadBelow = size_t{1} << 16;
inline constexpr size_t kRowOpItemFloats = size_t{1} << 14;
inline size_t row_op_rows_per_item(size_t floats_per_row) {
  return std::max<size_t>(1, kRowOpItemFloats / std::max<size_t>(1, floats_per_row));
}

// Runs fn(row_begin, row_end) over [0, n_rows) by that split, on up to n_threads (0: resolve_threads default).
template <class F>
void for_row_items(size_t n_rows, size_t floats_per_row, int n_threads, F&& fn) {
  const int threads = n_rows * floats_per_row < kRowOpOneThreadBelow ? 1 : resolve_threads(n_threads);
  if (threads <= 1) {
    fn(size_t{0}, n_rows);
    return;
  }
  const size_t rows_per_item = row_op_rows_per_item(floats_per_row);
  parallel_for(threads, chunk_count(n_rows, rows_per_item), [&](size_t item, int) {
    const Range r = chunk_range(n_rows, rows_per_item, item);
    fn(r.begin, r.end);
  });
}

}  // namespace sqrtdk
