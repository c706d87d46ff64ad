// Internal interface between the attention dispatch (attention.cpp, baseline ISA) and the per-ISA kernels
// (attention_simd.h instantiated in attention_avx2.cpp / attention_avx512.cpp): the work partition (plans), the
// tile constants, the per-ISA entry points and attention's kernel table (dispatch, tests and benchmarks iterate
// it). Plain data and declarations only (no inline code shared between translation units compiled with different
// -m flags).
#pragma once

#include "ops/attention/attention.h"
#include "ops/base/kernel_table.h"

#include <cstddef>
#include <span>

namespace sqrtdk::ops {

// Keys per tile of the fused path: Sᵀ is kBc × R floats (64 × 64 × 4 B = 16 KiB). With scale·Qᵀ, the output
// accumulator and the K and V tiles, a work item's working set is 80 KiB at head_dim 64 and 144 KiB at 128 (R = 64):
// L2-resident (1-2 MiB per core on the development machines), not L1; the register tiles' B panels (16 KiB) are
// what L1 holds (attention_simd.h, tiles).
inline constexpr size_t kBc = 64;
// Query rows (G heads × queries) per work item of the fused path: each K/V tile read feeds this many rows; smaller
// blocks re-read K/V more often, larger ones give fewer work items to share between threads.
inline constexpr size_t kTargetRows = 64;
// Keys per decode work item, by shape only (never by thread count, so results do not depend on it): long chunks
// when there are kv heads enough to keep the threads busy (K then V of 1024 keys are two long sequential reads: cold
// 12×64 decode at 2048-8192 keys streamed 29 GB/s against 21-27 with 256-key chunks, 1 thread), short ones so a
// few kv heads (MQA) still split a long cache across threads.
inline constexpr size_t kDecodeChunkLong = 1024, kDecodeChunkShort = 256;
inline size_t decode_chunk_keys(size_t n_kv_heads) { return n_kv_heads >= 4 ? kDecodeChunkLong : kDecodeChunkShort; }
// How far ahead of its dot products the decode prefetches K (attention_simd.h, decode_chunk), in bytes of K rows.
inline constexpr size_t kDecodePrefetchBytes = 4096;

// Fused prefill: work item (g, qb) = kv head g, queries [qb*block, min(n_queries, (qb+1)*block)).
struct FusedPlan {
  size_t group = 0;        // G = n_heads / n_kv_heads
  size_t block = 0;        // queries per item
  size_t n_blocks = 0;     // query blocks per kv head
  size_t rows = 0;         // R = G * block
  size_t rows_padded = 0;  // R rounded up to the vector width
  size_t dim_padded = 0;   // head_dim rounded up to the vector width
};
FusedPlan make_fused_plan(const AttentionParams& p, size_t vector_width);
size_t fused_scratch_floats(const FusedPlan& plan);  // per thread

// Decode (n_queries = 1): work item (g, chunk) = kv head g, keys [chunk*chunk_keys, ...).
struct DecodePlan {
  size_t group = 0;           // G query heads per kv head
  size_t chunk_keys = 0;      // decode_chunk_keys(n_kv_heads)
  size_t n_chunks = 0;        // ceil(n_keys / chunk_keys)
  size_t dim_padded = 0;      // head_dim rounded up to the vector width
  size_t partial_stride = 0;  // floats per (chunk, head) partial: max, sum, O[dim_padded]
  size_t prefetch_keys = 0;   // K rows about kDecodePrefetchBytes ahead, a whole number of vector-width key blocks
};
DecodePlan make_decode_plan(const AttentionParams& p, size_t vector_width);
size_t decode_scratch_floats(const DecodePlan& plan);                            // per thread
size_t decode_partial_floats(const AttentionParams& p, const DecodePlan& plan);  // shared

// One ISA's fused kernels (attention_simd.h). scratch: per-thread, 64-byte aligned, sizes above.
// The reference entry has no fused kernels: `reference` (non-null only there) runs the whole op, the spec.
struct AttentionKernels {
  void (*reference)(const AttentionParams& p);
  size_t vector_width;  // floats per vector: the plans pad rows and head_dim to it
  void (*prefill_item)(const AttentionParams& p, const FusedPlan& plan, size_t g, size_t qb, float* scratch);
  void (*decode_chunk)(const AttentionParams& p, const DecodePlan& plan, size_t g, size_t chunk, float* scratch,
                       float* partials);
  void (*decode_merge)(const AttentionParams& p, const DecodePlan& plan, size_t g, size_t hh, const float* partials);
};

// Best ISA first, the reference last (kernel_table.h).
std::span<const KernelEntry<AttentionKernels>> attention_kernels();

void fused_prefill_item_avx512(const AttentionParams& p, const FusedPlan& plan, size_t g, size_t qb, float* scratch);
void fused_prefill_item_avx2(const AttentionParams& p, const FusedPlan& plan, size_t g, size_t qb, float* scratch);
void decode_chunk_avx512(const AttentionParams& p, const DecodePlan& plan, size_t g, size_t chunk, float* scratch,
                         float* partials);
void decode_chunk_avx2(const AttentionParams& p, const DecodePlan& plan, size_t g, size_t chunk, float* scratch,
                       float* partials);
void decode_merge_avx512(const AttentionParams& p, const DecodePlan& plan, size_t g, size_t hh, const float* partials);
void decode_merge_avx2(const AttentionParams& p, const DecodePlan& plan, size_t g, size_t hh, const float* partials);

}  // namespace sqrtdk::ops
