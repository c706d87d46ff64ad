// sqrtdk::Batch: many sequences stepped together (continuous batching), for servers.
//
//   sqrtdk::Batch batch(model, {.max_context = 2048, .max_rows = 256});
//   auto a = batch.add_sequence(), b = batch.add_sequence();
//   std::vector<sqrtdk::Batch::Work> work = {{a, prompt_chunk}, {b, {&next_token_of_b, 1}}};
//   auto logits = batch.step(work);        // [work.size(), n_vocab]: each item's last position
//
// One step runs every work item's tokens through the model at once: each linear layer is one GEMM over all the
// step's rows (decode on a CPU reads every weight once per step, so eight sequences cost little more than one);
// RoPE, the KV store and attention run per sequence over its own cache.
//
// Deterministic under batching: a row's result does not depend on the rows beside it. The GEMMs run with
// ops::RowOrder::invariant (one K order per row whatever M), norms and activations are per row, and attention is
// per sequence. So a sequence fed the same chunks gives the same logits bit for bit, alone or beside any others,
// for any thread count. (A Session's M = 1 decode uses a faster kernel with another K order: its logits may
// differ from a Batch's in the last bits.)
//
// Memory: a sequence's KV cache is sized for what it needs, in blocks of kv_block positions, never max_context up
// front: many short sequences fit where a few full-context ones would. reserve() sizes it once (a scheduler reserves
// prompt + max_tokens and admits by kv_bytes_for()); past its reservation a cache grows by doubling (the filled
// positions copied, O(log n) times). Caches are contiguous per sequence, not pages: a prefix is shared by copying
// its rows (fork_sequence), not by reference.
//
// Not thread-safe: one thread drives a Batch (the Model it shares is). Errors (bad ids, a full context, an
// unknown sequence, too many rows) throw sqrtdk::Error before any state changes.
#pragma once

#include <sqrtdk/model.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

namespace sqrtdk {

struct BatchOptions {
  size_t max_context = 0;  // tokens per sequence at most; 0: the model's max_seq
  size_t max_rows = 256;   // tokens per step at most (the scratch is sized for it)
  size_t kv_block = 16;    // KV positions a cache grows by at least
  int n_threads = 0;       // threads per step; 0: OMP_NUM_THREADS if set, else the CPUs we may run on
};

struct BatchState;  // engine-internal

class Batch {
 public:
  using SequenceId = uint64_t;
  struct Work {
    SequenceId sequence;
    std::span<const uint32_t> tokens;  // appended to the sequence's context (at least one)
  };

  Batch(std::shared_ptr<const Model> model, const BatchOptions& options = {});
  ~Batch();
  // Moving leaves the source empty: any later call on it throws sqrtdk::Error (bad_input) instead of crashing.
  Batch(Batch&&) noexcept;
  Batch& operator=(Batch&&) noexcept;

  // A new, empty sequence (no memory until its first step).
  SequenceId add_sequence();
  // Frees the sequence and its cache. Unknown ids throw.
  void remove_sequence(SequenceId sequence);
  // A new sequence whose context is the first n tokens of `source`'s (their KV rows copied: a prefix cache hit
  // costs a copy, not a prefill). The result is bit-identical to having fed those tokens in the same chunks.
  // reserve_tokens: as reserve() on the new sequence (at least n).
  SequenceId fork_sequence(SequenceId source, size_t n, size_t reserve_tokens = 0);
  // Sizes the sequence's cache for n_tokens now (rounded up to kv_block; never shrinks). A scheduler that admits a
  // request reserves its prompt + max_tokens here, so the sequence never grows (or fails to) mid-generation.
  void reserve(SequenceId sequence, size_t n_tokens);

  // Runs every item's tokens (each sequence at most once per step; rows in total at most max_rows). Returns the
  // logits of each item's last token, [work.size(), n_vocab] row-major, valid until the next step.
  std::span<const float> step(std::span<const Work> work);

  size_t n_past(SequenceId sequence) const;
  size_t n_sequences() const;
  size_t max_context() const;
  size_t max_rows() const;
  int n_threads() const;
  const Model& model() const;
  // KV bytes the caches hold now (all sequences), and what reserve(id, n_tokens) makes a sequence hold.
  size_t kv_bytes() const;
  size_t kv_bytes_for(size_t n_tokens) const;

 private:
  BatchState& state() const;  // *state_, or an Error naming the moved-from batch

  std::unique_ptr<BatchState> state_;
};

}  // namespace sqrtdk
