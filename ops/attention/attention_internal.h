// AttentionWorkspace's insides and the unfused path's entry, shared by attention.cpp and attention_unfused.cpp
// (both baseline-ISA translation units).
#pragma once

#include "ops/base/aligned_buffer.h"
#include "ops/attention/attention.h"

#include <cstddef>
#include <memory>

namespace sqrtdk::ops {

struct UnfusedScratch;  // attention_unfused.cpp: score buffers and GEMM workspaces, one per thread

struct AttentionWorkspace::Impl {
  Impl();
  ~Impl();
  // Per-thread scratch of the fused path: threads × floats_each, grown on demand, never shrunk.
  void reserve_thread_scratch(size_t threads, size_t floats_each);
  float* thread_scratch(size_t thread, size_t floats_each);
  float* shared(size_t floats);  // decode partial states
  size_t bytes() const;
  size_t unfused_bytes() const;
  UnfusedScratch& unfused();

 private:
  AlignedBuffer<float> scratch_;
  AlignedBuffer<float> shared_;
  std::unique_ptr<UnfusedScratch> unfused_;
};

// The unfused path's score buffer per thread, in floats (16 MiB): queries beyond it go in blocks (a block's GEMMs
// re-pack K and V, under 1% of its work at the 1 024+ rows a block holds up to 4 096 keys). The block size depends
// on the shape only, never on the thread count.
inline constexpr size_t kUnfusedMaxScoreFloats = size_t{4} << 20;
size_t unfused_rows_per_block(size_t n_queries, size_t n_keys);

void attention_unfused(Isa isa, const AttentionParams& p, AttentionWorkspace::Impl& ws, int threads);

}  // namespace sqrtdk::ops
