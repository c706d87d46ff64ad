// Which attention path `automatic` takes for a shape: fused or unfused, from what was measured on the machine the
// engine runs on (an AttentionPathTable), or from the built-in rule where no table applies.
//
// The table is one head configuration's (n_heads, n_kv_heads, head_dim) fused ÷ unfused time ratios at a ladder of
// key counts, for each mode (decode; a causal whole prompt; a causal chunk of a longer prompt; non-causal), measured by
// calibrate_attention_paths at 1 thread and at every thread count asked for. A shape takes the path that was faster
// at the measured key count nearest its own (in log2): ratio < 1 fused, else unfused. The ratio kept is the
// geometric mean over the thread counts measured, so the choice never depends on a call's thread count (the paths
// round differently: outputs stay bit-identical for any thread count). The engine measures it once per machine and
// caches it (engine/src/runtime/attention_paths_cache.cpp, `sqrtdk calibrate`).
//
// The built-in rule (builtin_attention_path) holds the crossovers measured on the 2-core Zen 5 VM, 2026-11-30 (MHA
// decode: 2026-12-07; attention.cpp has the figures): what runs before a machine is calibrated, or with
// ModelOptions::attention_paths = builtin.
#pragma once

#include "ops/attention/attention.h"

#include <array>
#include <cstddef>
#include <string>
#include <vector>

namespace sqrtdk::ops {

// The kinds of call the table tells apart (attention_mode): one query (decode); a causal call holding a whole
// prompt (n_queries > pos0: most of its keys are its own queries); a causal chunk of a longer prompt (pos0 >=
// n_queries: the engine prefills in chunks of SessionOptions::max_batch = 512 tokens, so every call past the first
// chunk is one); a non-causal call.
enum class AttentionMode { decode, causal_prefill, causal_chunk, full_prefill };
inline constexpr size_t kAttentionModes = 4;
const char* attention_mode_name(AttentionMode mode);  // "decode", "causal_prefill", "causal_chunk", "full_prefill"
AttentionMode attention_mode(const AttentionParams& p);

// The key counts measured: 64 .. 8192, powers of two. causal_prefill and full_prefill points run n_queries =
// n_keys (a whole prompt); causal_chunk points kChunkQueries queries at the end of n_keys keys (n_keys >= 2 ×
// kChunkQueries: 1024 ..); decode points one query against n_keys cached keys.
inline constexpr size_t kPathLadderSize = 8;
inline constexpr std::array<size_t, kPathLadderSize> kPathLadderKeys = {64, 128, 256, 512, 1024, 2048, 4096, 8192};
inline constexpr size_t kChunkQueries = 512;  // the engine's default prefill chunk (SessionOptions::max_batch)

// The revision of what a table measures: part of its cache key, so a table measured by an older build is not used
// (`cached` takes the built-in rule until `sqrtdk calibrate` measures again). Bump it with any change to either
// path that can move their ratio (kernels, tiles, item order, blocking) or to the ladder and modes above.
//   2: the ladder and four modes; the unfused path blocks its queries past 16 MiB of scores.
//   3: the fused prefill takes its items kv-group-major (a group's K/V stay in L2 across its query blocks: on Zen 5
//      fused became 1.04–1.13x faster than a revision-2 table had it on long non-causal prompts and chunks, and
//      the engine took the slower path on 18 of 76 bench-attention rows).
//   4: cold decode samples wake the pool's helpers (untimed) after the cache flush: before, at 2 threads every
//      sample also timed an idle vCPU's wake-up (60–130 us against calls of 25–150 us), and the ratio leaned to 1.
//   5: GEMM work items split evenly, each prefetching its successor's first panel (ops/gemm/gemm.cpp): the unfused
//      path's Q·Kᵀ and P·V run on that split.
//   6: the fused decode prefetches K a block ahead (attention_simd.h, decode_chunk): cold, 1 thread, 16-24% less
//      time for 12x64 heads, 10-14% for 32/8x128.
inline constexpr int kAttentionPathsRevision = 6;

struct AttentionPathTable {
  size_t n_heads = 0, n_kv_heads = 0, head_dim = 0;  // the head configuration measured; other shapes: built-in
  std::vector<int> threads;                          // the thread counts the ratios average over
  // fused seconds ÷ unfused seconds, [mode][ladder point]; 0: not measured (over the calibration's budget, or a
  // point the mode does not have).
  std::array<std::array<double, kPathLadderSize>, kAttentionModes> fused_over_unfused{};

  bool covers(const AttentionParams& p) const {
    return p.n_heads == n_heads && p.n_kv_heads == n_kv_heads && p.head_dim == head_dim;
  }
  // The measured point nearest p's key count in its mode (ties: the larger), or -1 if the table does not cover p
  // or has no point in that mode.
  int nearest_point(const AttentionParams& p) const;
  // The path faster at that point; automatic when there is none.
  AttentionPath lookup(const AttentionParams& p) const;
  size_t measured_points() const;
};

// The built-in rule (Zen 5's crossovers; see attention.cpp).
AttentionPath builtin_attention_path(const AttentionParams& p);

// What `automatic` resolves to: unfused when p.observe is set (it materializes the probabilities anyway); else the
// table's choice when `table` covers p and has a point in its mode; else the built-in rule.
AttentionPath choose_attention_path(const AttentionParams& p, const AttentionPathTable* table);

struct AttentionCalibration {
  std::vector<int> threads = {1};  // thread counts to measure at (the ratio is their geometric mean)
  int reps = 5;                    // timed samples per path and point, interleaved; the median is kept. Points whose
                                   // call takes longer than 0.1 s take fewer, at least min(3, reps); a point whose
                                   // two paths come within 5% of each other takes as many again; cold decode
                                   // points take three times as many (one short call each: noisier); a recheck
                                   // (recheck_band) takes the first pass's count again
  // Points costlier than this many FLOPs per call are not measured (a shape beyond takes the nearest measured
  // point): about 1 s per call at 1 thread on the machines we have seen.
  double max_flops_per_call = 80e9;
  size_t max_keys = 8192;         // ladder points above are not measured
  size_t evict_bytes = 96 << 20;  // decode samples run after writing this many bytes (K/V come from DRAM, as in a
                                  // forward pass, where each layer's weights evict the last layer's cache)
  // After the sweep, points whose ratio lies within this factor of 1 are measured again and their samples pooled
  // with the first pass's (≤ 1: no recheck). A burst of load on a shared host can skew one pass by 10-20%.
  double recheck_band = 1.15;
};

// Whether a point measured at this fused ÷ unfused ratio is near enough to a tie to be measured again.
bool needs_recheck(double fused_over_unfused, double band);

// Measures both paths for every mode and ladder point within the budget, on freshly filled random Q/K/V, with isa's
// kernels. Calls progress (if set) with a line per point measured. Throws sqrtdk::Error on a bad configuration.
AttentionPathTable calibrate_attention_paths(Isa isa, size_t n_heads, size_t n_kv_heads, size_t head_dim,
                                             const AttentionCalibration& options,
                                             void (*progress)(const std::string& line, void* ctx) = nullptr,
                                             void* progress_ctx = nullptr);

// A table as text, one line per mode: "decode: 128 0.93 fused, 512 1.04 unfused, ...".
// Queries of a ladder point of `mode` at n_keys keys: 1, n_keys or kChunkQueries; 0 where the mode has no such
// point (causal_chunk below 2 × kChunkQueries keys).
size_t ladder_queries(AttentionMode mode, size_t n_keys);
std::string describe_attention_paths(const AttentionPathTable& table);

}  // namespace sqrtdk::ops
