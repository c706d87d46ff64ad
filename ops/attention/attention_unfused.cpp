// The unfused attention path: per head, scores = scale·Q·Kᵀ (GEMM), softmax_rows with the causal mask, out = P·V
// (GEMM). Materializes n_queries × n_keys scores per thread. Heads are split over threads (each head computed by
// one thread with a single-threaded GEMM), so results do not depend on the thread count.
#include "ops/attention/attention_internal.h"

#include <sqrtdk/error.h>

namespace sqrtdk::ops {

struct UnfusedScratch {};

AttentionWorkspace::Impl::Impl() : unfused_(std::make_unique<UnfusedScratch>()) {}
AttentionWorkspace::Impl::~Impl() = default;
size_t AttentionWorkspace::Impl::unfused_bytes() const { return 0; }
UnfusedScratch& AttentionWorkspace::Impl::unfused() { return *unfused_; }

void attention_unfused(Isa, const AttentionParams&, AttentionWorkspace::Impl&, int) {
  throw Error("attention: the unfused path needs the GEMM (not merged yet)");
}

}  // namespace sqrtdk::ops
