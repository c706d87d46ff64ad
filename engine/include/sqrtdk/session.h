// sqrtdk::Session: one conversation with a Model. Owns the KV cache and all scratch; belongs to one caller at a
// time (use one Session per thread; many Sessions may share one Model).
//
//   auto model = sqrtdk::Model::load("model.sqdk");
//   sqrtdk::Session session(model);
//   auto logits = session.prefill(tokens);   // [n_vocab] of the last position
//   logits = session.decode(next_token);    // one more position
//
// Bad input (empty prompt, token id >= n_vocab, context past the limit) throws sqrtdk::Error before any state
// changes, so the session stays usable. Results are bit-identical for any thread count.
#pragma once

#include <sqrtdk/model.h>
#include <sqrtdk/op_event.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

namespace sqrtdk {

struct SessionOptions {
  size_t max_context = 0;   // KV cache length; 0: the model's max_seq. Larger than max_seq is an error.
  size_t max_batch = 512;   // tokens per forward chunk in prefill (bounds scratch; prefill is chunked)
  int n_threads = 0;        // threads per call; 0: OMP_NUM_THREADS if set, else the CPUs we may run on
};

struct SessionState;  // engine-internal

class Session {
 public:
  explicit Session(std::shared_ptr<const Model> model, const SessionOptions& options = {});
  ~Session();
  // Moving leaves the source empty: any later call on it throws sqrtdk::Error (bad_input) instead of crashing;
  // assigning a Session to it makes it usable again.
  Session(Session&&) noexcept;
  Session& operator=(Session&&) noexcept;

  // Appends `tokens` to the context and runs them. Returns the logits of the last position ([n_vocab]), or of
  // every new position ([tokens.size(), n_vocab], row-major) when all_logits is true. The span stays valid until
  // the next call on this session. Without all_logits the last block runs past its KV store for the last position
  // alone (about 1/n_layers less work): those logits may differ from all_logits' last row by float rounding (the
  // row takes other kernels alone than in a block of rows), and the cache, hence every later call, is the same.
  std::span<const float> prefill(std::span<const uint32_t> tokens, bool all_logits = false);
  // One more token: prefill({token}).
  std::span<const float> decode(uint32_t token);
  // Forgets the context (the cache is kept allocated).
  void reset();

  size_t n_past() const;       // tokens in the context
  size_t max_context() const;  // the limit
  size_t max_batch() const;    // tokens per forward chunk: SessionOptions::max_batch, at most max_context
  int n_threads() const;
  void set_n_threads(int n_threads);
  const Model& model() const;
  const std::shared_ptr<const Model>& model_ptr() const;

  // Per-op observer (nullptr to remove); costs nothing when unset.
  void set_op_observer(OpObserver observer);
  // Attention-probability capture for one layer (attention maps): after each prefill/decode, captured_attention()
  // holds [n_heads][n_queries][n_keys] of that layer, n_queries = the call's tokens (all chunks of a long prompt),
  // n_keys = n_past() (every key so far; masked entries 0). scale_override > 0 replaces 1/√head_dim for that layer.
  // layer < 0 disables. Forces the unfused path for that layer only.
  void capture_attention(int layer, float scale_override = 0.0f);
  const std::vector<float>& captured_attention() const;

  size_t scratch_bytes() const;   // KV cache + activations owned by this session
  size_t kv_cache_bytes() const;

 private:
  SessionState& state() const;  // *state_, or an Error naming the moved-from session

  std::unique_ptr<SessionState> state_;
};

}  // namespace sqrtdk
