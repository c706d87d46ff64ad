// The executor: runs a model family's blocks over a chunk of tokens with a Session's state.
//
// Families (models/<family>/) describe one forward pass as a sequence of ops (llama2.c's voice); the executor
// owns what they share: the run state, timing hooks, the linear layers, the KV-cache write, the attention call and
// the output head. It sits in models/ so both the families and the engine's Session use it without a cycle.
#pragma once

#include <sqrtdk/op_event.h>

#include "models/runtime/model_weights.h"
#include "ops/attention/attention.h"
#include "ops/rope/rope.h"
#include "ops/base/aligned_buffer.h"

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

namespace sqrtdk {

// Per-token widths of a family's scratch beyond the residual stream (ModelFamily::scratch_widths).
struct ScratchWidths {
  size_t hidden = 0;  // hb: feed-forward hidden
  size_t gate = 0;    // hb2: gate activations (0 if the family has no gated feed-forward)
};

// The run state of one sequence (llama2.c's RunState): KV cache, activations and the per-call knobs. Owned by a
// Session; the weights are shared.
struct ForwardState {
  const ModelWeights* m = nullptr;
  size_t max_context = 0;        // KV cache rows per head
  size_t max_batch = 0;          // tokens per forward chunk
  int n_threads = 1;
  size_t n_past = 0;             // tokens already in the cache

  // KV cache, one block per layer and kv head, rows by position: streaming reads for attention.
  AlignedBuffer<float> k_cache;  // [n_layers][n_kv_heads][max_context][head_dim]
  AlignedBuffer<float> v_cache;  // [n_layers][n_kv_heads][max_context][head_dim]
  // Activations for one chunk of up to max_batch tokens.
  AlignedBuffer<float> x;    // [max_batch, d_model] residual stream
  AlignedBuffer<float> xb;   // [max_batch, d_model] normalized input of a sub-layer
  AlignedBuffer<float> qkv;  // [max_batch, (n_heads + 2 n_kv_heads) head_dim]
  AlignedBuffer<float> att;  // [max_batch, n_heads head_dim] attention output
  AlignedBuffer<float> hb;   // [max_batch, ScratchWidths::hidden] feed-forward hidden
  AlignedBuffer<float> hb2;  // [max_batch, ScratchWidths::gate] gate activations (gated families only)
  std::vector<float> logits;  // [n_rows, n_vocab] of the last call
  // RoPE families: cos/sin for [max_context, head_dim], sized by this state's context (not the model's max_seq,
  // which a file may set to 2^24).
  std::optional<ops::RopeTable> rope;
  ops::AttentionWorkspace attention_ws;

  OpObserver observer;
  unsigned verbose_paths_printed = 0;  // SQRTDK_VERBOSE: bit per attention path already reported by this state
  int capture_layer = -1;
  float capture_scale = 0.0f;
  ops::AttentionProbs captured;
  std::vector<float> captured_flat;

  size_t cache_offset(size_t layer, size_t kv_head) const {
    const auto& c = m->config;
    return (layer * c.n_kv_heads + kv_head) * max_context * c.head_dim;
  }
};

inline double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Runs fn; if an observer is set, reports the op with its timing. Free when no observer is set: one predictable
// branch per op (a build with -DSQRTDK_DISABLE_OP_HOOKS=ON compiles the hooks out, to measure that claim).
template <typename Fn>
inline void run_op(ForwardState& s, const char* op, int layer, size_t n_tokens, double flops, double bytes, Fn&& fn,
                   size_t n_keys = 0) {
#ifdef SQRTDK_DISABLE_OP_HOOKS
  (void)s, (void)op, (void)layer, (void)n_tokens, (void)flops, (void)bytes, (void)n_keys;
  fn();
  return;
#endif
  if (!s.observer) {
    fn();
    return;
  }
  const double t0 = steady_seconds();
  fn();
  const double t1 = steady_seconds();
  s.observer(OpEvent{op, layer, n_tokens, n_keys, flops, bytes, t0, t1});
}

// y[n, N] = epilogue(x[n, K] · Wᵀ), timed as `op`.
void run_linear(ForwardState& s, const char* op, int layer, const Linear& w, const float* x, size_t n, size_t ldx,
                float* y, size_t ldy, const ops::GemmEpilogue& epilogue);

// Copies the k and v columns of qkv rows [n] into layer's cache at positions pos0 .. pos0 + n - 1, then runs
// attention for the q columns; output to s.att.
void run_attention(ForwardState& s, int layer, size_t n, size_t pos0);

// The final norm has been applied to rows [first_row, n) of s.xb; computes their logits into s.logits.
void run_lm_head(ForwardState& s, size_t first_row, size_t n);

}  // namespace sqrtdk
