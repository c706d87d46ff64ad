// The executor: runs a model family's blocks over a chunk of tokens with a Session's state.
//
// Families (models/<family>/) describe one forward pass as a sequence of ops (llama2.c's voice); the executor
// owns what they share: the run state, timing hooks, the linear layers, the KV-cache write, the attention call and
// the output head. It sits in models/ so both the families and the engine's Session use it without a cycle.
#pragma once

#include <sqrtdk/error.h>
#include <sqrtdk/op_event.h>

#include "models/runtime/model_weights.h"
#include "ops/attention/attention.h"
#include "ops/rope/rope.h"
#include "ops/base/aligned_buffer.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace sqrtdk {

// Per-token widths of a family's scratch beyond the residual stream (ModelFamily::scratch_widths).
struct ScratchWidths {
  size_t hidden = 0;  // hb: feed-forward hidden
  size_t gate = 0;    // hb2: gate activations (0 if the family has no gated feed-forward)
};

// Continuous batching (engine/include/sqrtdk/batch.h): a chunk's rows may belong to several sequences, each with
// its own KV cache. Rows [row0, row0 + n) of the chunk are one sequence's tokens at positions pos0 .. pos0 + n - 1;
// its cache is [n_layers][n_kv_heads][cache_stride][head_dim] for K and for V.
struct SequenceRows {
  float* k_cache = nullptr;
  float* v_cache = nullptr;
  size_t cache_stride = 0;  // positions the sequence's cache holds per (layer, kv head)
  size_t row0 = 0, n = 0, pos0 = 0;
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

  // Empty: every row of a chunk is this state's one sequence (a Session), its cache k_cache/v_cache. Otherwise the
  // chunk's rows are these sequences' (a batch step; k_cache/v_cache unused); families reach positions and caches
  // only through run_rope_qk, run_attention and for_each_sequence, which handle both.
  std::span<const SequenceRows> sequences;
  // Batches compute every row in one K order whatever the rows beside it (ops::RowOrder::invariant).
  ops::RowOrder row_order = ops::RowOrder::fastest;

  // The caller needs the last block's output for each sequence's last row only (their logits: a Session's
  // prefill without all_logits, every Batch step). That block then stores every row's keys and values but runs
  // attention, its output projection and its feed-forward for those rows alone, gathered to rows 0, 1, ... in
  // sequence order (gather_block_rows). Not with a capture of the last layer (it needs every row).
  bool last_rows_only = false;

  OpObserver observer;
  unsigned verbose_paths_printed = 0;  // SQRTDK_VERBOSE: bit per attention path already reported by this state
  int capture_layer = -1;
  float capture_scale = 0.0f;
  ops::AttentionProbs captured;
  std::vector<float> captured_flat;

  // Sizes the activations (x, xb, qkv, att, hb, hb2) for max_batch rows: a Session's chunk or a Batch's step.
  // Throws sqrtdk::Error (out_of_memory) as AlignedBuffer does; the caller names its own knob.
  void allocate_activations(const ScratchWidths& widths) {
    const auto& c = m->config;
    // max_batch × width must not wrap (a huge BatchOptions::max_rows wrapped to 0 floats: no scratch, then a
    // write through null at the first step): past what any buffer could hold, out of memory, before allocating.
    const size_t widest = std::max({size_t{c.d_model}, m->qkv_width(), size_t{c.n_heads} * c.head_dim,
                                    widths.hidden, widths.gate});
    if (max_batch > SIZE_MAX / sizeof(float) / widest)
      throw Error(ErrorKind::out_of_memory, std::to_string(max_batch) + " rows of " + std::to_string(widest) +
                                                " floats do not fit in the address space");
    x.allocate(max_batch * c.d_model);
    xb.allocate(max_batch * c.d_model);
    qkv.allocate(max_batch * m->qkv_width());
    att.allocate(max_batch * c.n_heads * c.head_dim);
    hb.allocate(max_batch * widths.hidden);
    if (widths.gate) hb2.allocate(max_batch * widths.gate);
  }

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
// resident_bytes: of bytes, the activations made within the step (OpEvent::resident_bytes).
template <typename Fn>
inline void run_op(ForwardState& s, const char* op, int layer, size_t n_tokens, double flops, double bytes,
                   double resident_bytes, Fn&& fn, size_t n_keys = 0) {
#ifdef SQRTDK_DISABLE_OP_HOOKS
  (void)s, (void)op, (void)layer, (void)n_tokens, (void)flops, (void)bytes, (void)resident_bytes, (void)n_keys;
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
  s.observer(OpEvent{op, layer, n_tokens, n_keys, flops, bytes, t0, t1, resident_bytes});
}

// y[n, N] = epilogue(x[n, K] · Wᵀ), timed as `op`.
void run_linear(ForwardState& s, const char* op, int layer, const Linear& w, const float* x, size_t n, size_t ldx,
                float* y, size_t ldy, const ops::GemmEpilogue& epilogue);

// Calls fn(rows) for each sequence of the chunk's n rows (one, this state's own, when s.sequences is empty: rows
// [0, n) at pos0 in s.k_cache / s.v_cache).
template <typename Fn>
inline void for_each_sequence(ForwardState& s, size_t n, size_t pos0, Fn&& fn) {
  if (s.sequences.empty()) {
    fn(SequenceRows{s.k_cache.data(), s.v_cache.data(), s.max_context, 0, n, pos0});
    return;
  }
  for (const SequenceRows& rows : s.sequences) fn(rows);
}

// Whether `layer` is the block that runs past its KV store for each sequence's last row only (last_rows_only).
inline bool is_last_rows_block(const ForwardState& s, size_t layer) {
  return s.last_rows_only && layer + 1 == s.m->config.n_layers;
}

// Copies the k and v columns of qkv rows [n] into layer's cache at positions pos0 .. pos0 + n - 1, then runs
// attention for the q columns; output to s.att. Per sequence in a batch step. In the last-rows block only each
// sequence's last row attends (its output lands in that row of s.att).
void run_attention(ForwardState& s, int layer, size_t n, size_t pos0);

// For a family, right after run_attention: how many rows the rest of the block computes, rows [0, that) of s.att
// and s.x. All n, except in the last-rows block: one per sequence, each sequence's last row of s.att and s.x moved
// to row 0, 1, ... (its residual and attention output; the rows before only fed the KV cache).
size_t gather_block_rows(ForwardState& s, size_t layer, size_t n);

// Rotates the q heads and k heads (n_heads, then n_kv_heads, of head_dim, at the start of each row) of the n rows
// of qkv (row stride ld) by their positions; in items of one kv group (its q heads and its k head).
void run_rope_qk(ForwardState& s, int layer, float* qkv, size_t n, size_t ld, size_t pos0);

// The final norm has been applied to rows [first_row, n) of s.xb; computes their logits into s.logits.
void run_lm_head(ForwardState& s, size_t first_row, size_t n);

}  // namespace sqrtdk
