// Session: validates input at the boundary, then runs the executor chunk by chunk.
#include <sqrtdk/error.h>
#include <sqrtdk/session.h>

#include "engine/src/runtime/model_impl.h"
#include "models/family.h"
#include "ops/base/threading.h"

#include <algorithm>
#include <new>
#include <string>

namespace sqrtdk {

// A Session's state: its hold on the model and the run state its family's forward pass uses.
struct SessionState : ForwardState {
  std::shared_ptr<const Model> model;
  const ModelFamily* family = nullptr;
};

Session::Session(std::shared_ptr<const Model> model, const SessionOptions& options)
    : state_(std::make_unique<SessionState>()) {
  if (!model) throw Error("Session: model is null");
  SessionState& s = *state_;
  s.model = std::move(model);
  s.m = &s.model->impl().weights;
  s.family = s.model->impl().family;
  const ModelConfig& c = s.m->config;
  s.max_context = options.max_context ? options.max_context : c.max_seq;
  if (s.max_context > c.max_seq)
    throw Error("Session: max_context " + std::to_string(s.max_context) + " exceeds the model's max_seq " +
                std::to_string(c.max_seq));
  if (options.max_batch == 0) throw Error("Session: max_batch must be >= 1");
  s.max_batch = std::min(options.max_batch, s.max_context);
  s.n_threads = resolve_threads(options.n_threads);

  const size_t cache = size_t{c.n_layers} * c.n_kv_heads * s.max_context * c.head_dim;
  try {
    s.k_cache.allocate(cache);
    s.v_cache.allocate(cache);
  } catch (const Error& e) {
    // Name what was being allocated and the knob that sizes it; the failed session is simply not created.
    throw Error(e.kind(), "Session: the KV cache for max_context " + std::to_string(s.max_context) + " needs " +
                std::to_string(2 * cache * sizeof(float) >> 20) + " MiB: " + e.what() +
                " (set SessionOptions::max_context lower)");
  }
  try {
    s.allocate_activations(s.family->scratch_widths(c));
  } catch (const Error& e) {
    throw Error(e.kind(), "Session: scratch for max_batch " + std::to_string(s.max_batch) + ": " + e.what() +
                " (set SessionOptions::max_batch lower)");
  }
  if (s.family->uses_rope) {
    try {
      s.rope.emplace(s.max_context, c.head_dim, c.rope_theta);
    } catch (const std::bad_alloc&) {
      throw Error("Session: the RoPE table for max_context " + std::to_string(s.max_context) + " needs " +
                  std::to_string(3 * s.max_context * c.head_dim * sizeof(float) >> 20) +
                  " MiB: out of memory (set SessionOptions::max_context lower)");
    }
  }
}

Session::~Session() = default;
Session::Session(Session&&) noexcept = default;
Session& Session::operator=(Session&&) noexcept = default;

SessionState& Session::state() const {
  if (!state_) throw Error("Session: this session was moved from; use the Session it was moved to");
  return *state_;
}

std::span<const float> Session::prefill(std::span<const uint32_t> tokens, bool all_logits) {
  SessionState& s = state();
  const ModelConfig& c = s.m->config;
  // Validate everything before touching state, so a bad call leaves the session as it was.
  if (tokens.empty()) throw Error("prefill: no tokens (the prompt is empty)");
  for (size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] >= c.n_vocab)
      throw Error("prefill: token " + std::to_string(i) + " has id " + std::to_string(tokens[i]) +
                  ", outside the vocabulary [0, " + std::to_string(c.n_vocab) + ")");
  if (s.n_past + tokens.size() > s.max_context)
    throw Error(ErrorKind::context_full, "prefill: context too long: " + std::to_string(s.n_past) +
                                             " tokens in the session + " + std::to_string(tokens.size()) +
                                             " new > limit " + std::to_string(s.max_context));

  s.logits.clear();
  // Capture: [n_heads][tokens.size()][n_past + tokens.size()], filled chunk by chunk (masked keys stay 0).
  const size_t cap_rows = tokens.size(), cap_keys = s.n_past + tokens.size();
  if (s.capture_layer >= 0) s.captured_flat.assign(size_t{c.n_heads} * cap_rows * cap_keys, 0.0f);
  // Without all_logits only the last position's logits are wanted: each chunk's last block runs past its KV store
  // for the chunk's last row alone, moved to row 0 (ForwardState::last_rows_only), unless that layer's attention is
  // being captured.
  s.last_rows_only = !all_logits && s.capture_layer + 1 != static_cast<int>(c.n_layers);
  for (size_t start = 0; start < tokens.size(); start += s.max_batch) {
    const size_t n = std::min(s.max_batch, tokens.size() - start);
    const size_t pos0 = s.n_past;
    s.family->forward(s, tokens.data() + start, n, pos0);
    s.n_past += n;
    if (s.capture_layer >= 0) {
      // This chunk's probabilities: [n_heads][n][pos0 + n] -> rows start .. start + n of the capture.
      const ops::AttentionProbs& cp = s.captured;
      for (size_t h = 0; h < cp.n_heads; ++h)
        for (size_t i = 0; i < cp.n_queries; ++i)
          std::copy_n(cp.probs.data() + (h * cp.n_queries + i) * cp.n_keys, cp.n_keys,
                      s.captured_flat.data() + (h * cap_rows + start + i) * cap_keys);
    }
    const bool last_chunk = start + n == tokens.size();
    if (all_logits)
      run_lm_head(s, 0, n);
    else if (last_chunk) {
      const size_t last_row = s.last_rows_only ? 0 : n - 1;  // gathered to row 0 by the last block, or in place
      run_lm_head(s, last_row, last_row + 1);
    }
  }
  return {s.logits.data(), s.logits.size()};
}

std::span<const float> Session::decode(uint32_t token) { return prefill(std::span<const uint32_t>(&token, 1)); }

void Session::reset() { state().n_past = 0; }
size_t Session::n_past() const { return state().n_past; }
size_t Session::max_context() const { return state().max_context; }
size_t Session::max_batch() const { return state().max_batch; }
int Session::n_threads() const { return state().n_threads; }
void Session::set_n_threads(int n_threads) { state().n_threads = resolve_threads(n_threads); }
const Model& Session::model() const { return *state().model; }
const std::shared_ptr<const Model>& Session::model_ptr() const { return state().model; }
void Session::set_op_observer(OpObserver observer) { state().observer = std::move(observer); }

void Session::capture_attention(int layer, float scale_override) {
  SessionState& s = state();
  if (layer >= static_cast<int>(s.m->config.n_layers))
    throw Error("capture_attention: layer " + std::to_string(layer) + " >= n_layers " +
                std::to_string(s.m->config.n_layers));
  s.capture_layer = layer;
  s.capture_scale = scale_override;
}
const std::vector<float>& Session::captured_attention() const { return state().captured_flat; }

size_t Session::kv_cache_bytes() const {
  const SessionState& s = state();
  return (s.k_cache.size() + s.v_cache.size()) * sizeof(float);
}
size_t Session::scratch_bytes() const {
  const SessionState& s = state();
  const size_t rope = s.rope ? 3 * s.rope->max_seq() * s.rope->head_dim() : 0;  // cos/sin, half and pairs
  return kv_cache_bytes() +
         (s.x.size() + s.xb.size() + s.qkv.size() + s.att.size() + s.hb.size() + s.hb2.size() + rope) * sizeof(float);
}

}  // namespace sqrtdk
