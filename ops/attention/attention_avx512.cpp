// Fused attention kernels for avx512: explicit instances of the templates in attention_simd.h on xsimd::avx512bw.
#include "ops/attention/attention_simd.h"

namespace sqrtdk::ops {

using Arch = xsimd::avx512bw;

void fused_prefill_item_avx512(const AttentionParams& p, const FusedPlan& plan, size_t g, size_t qb, float* scratch) {
  simd::fused_prefill_item<Arch>(p, plan, g, qb, scratch);
}

void decode_chunk_avx512(const AttentionParams& p, const DecodePlan& plan, size_t g, size_t chunk, float* scratch,
                       float* partials) {
  simd::decode_chunk<Arch>(p, plan, g, chunk, scratch, partials);
}

void decode_merge_avx512(const AttentionParams& p, const DecodePlan& plan, size_t g, size_t hh, const float* partials) {
  simd::decode_merge<Arch>(p, plan, g, hh, partials);
}

}  // namespace sqrtdk::ops
