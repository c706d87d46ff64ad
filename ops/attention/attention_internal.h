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

void attention_unfused(Isa isa, const AttentionParams& p, AttentionWorkspace::Impl& ws, int threads);

}  // namespace sqrtdk::ops
