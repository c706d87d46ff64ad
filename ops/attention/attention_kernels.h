// Internal interface between the attention dispatch (attention.cpp, baseline ISA) and the per-ISA kernels
// (attention_simd.h instantiated in attention_avx2.cpp / attention_avx512.cpp): the work partition (plans), the
// tile constants, and the per-ISA entry points. Plain data and declarations only (no inline code shared between
// translation units compiled with different -m flags).
#pragma once

#include "ops/attention/attention.h"

#include <cstddef>

namespace sqrtdk::ops {

// Keys per tile of the fused path: Sᵀ is kBc × R floats (64 × 64 × 4 B = 16 KiB, L1-resident with the K tile).
inline constexpr size_t kBc = 64;
// Query rows (G heads × queries) per work item of the fused path: each K/V tile read feeds this many rows; smaller
// blocks re-read K/V more often, larger ones give fewer work items to share between threads.
inline constexpr size_t kTargetRows = 64;
// Keys per decode chunk: a fixed partition of the cache (independent of the thread count); 256 keys × head_dim
// 64..128 is 64..128 KiB of K+V per work item, and a cache of 512 keys already gives 2 chunks per head.
inline constexpr size_t kDecodeChunk = 256;

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

// Decode (n_queries = 1): work item (g, chunk) = kv head g, keys [chunk*kDecodeChunk, ...).
struct DecodePlan {
  size_t group = 0;           // G query heads per kv head
  size_t n_chunks = 0;        // ceil(n_keys / kDecodeChunk)
  size_t dim_padded = 0;      // head_dim rounded up to the vector width
  size_t partial_stride = 0;  // floats per (chunk, head) partial: max, sum, O[dim_padded]
};
DecodePlan make_decode_plan(const AttentionParams& p, size_t vector_width);
size_t decode_scratch_floats(const DecodePlan& plan);                            // per thread
size_t decode_partial_floats(const AttentionParams& p, const DecodePlan& plan);  // shared

// Per-ISA kernels (attention_simd.h). scratch: per-thread, 64-byte aligned, sizes above.
void fused_prefill_item_avx512(const AttentionParams& p, const FusedPlan& plan, size_t g, size_t qb, float* scratch);
void fused_prefill_item_avx2(const AttentionParams& p, const FusedPlan& plan, size_t g, size_t qb, float* scratch);
void decode_chunk_avx512(const AttentionParams& p, const DecodePlan& plan, size_t g, size_t chunk, float* scratch,
                         float* partials);
void decode_chunk_avx2(const AttentionParams& p, const DecodePlan& plan, size_t g, size_t chunk, float* scratch,
                       float* partials);
void decode_merge_avx512(const AttentionParams& p, const DecodePlan& plan, size_t g, size_t hh, const float* partials);
void decode_merge_avx2(const AttentionParams& p, const DecodePlan& plan, size_t g, size_t hh, const float* partials);

}  // namespace sqrtdk::ops
