// Per-op timing hook of the forward pass (Session::set_op_observer; the profiler implements it).
#pragma once

#include <cstddef>
#include <functional>

namespace sqrtdk {

// One op of the forward pass, reported around its run when an observer is set.
struct OpEvent {
  const char* op;        // "attn_qkv", "attention", "ffn_down", ...
  int layer;             // block index, or -1 for ops outside blocks (embedding, lm_head)
  size_t n_tokens;       // rows processed
  size_t n_keys;         // attention: keys attended (else 0)
  double flops;          // floating-point operations done
  double bytes;          // bytes read + written (weights, activations, cache)
  double start_seconds;  // steady clock
  double end_seconds;
  // Of `bytes`, those of data the step made just before or makes now (the rows the op before wrote, the op's
  // output): they come from the cache their size per call fits in. The rest (weights, embedding rows, the KV cache
  // of earlier positions) streams from wherever the whole step's working set fits. 0: all of it streams.
  double resident_bytes = 0;
};
using OpObserver = std::function<void(const OpEvent&)>;

}  // namespace sqrtdk
