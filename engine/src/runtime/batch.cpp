// Batch: validates a step at the boundary, grows the caches it needs, then runs the family's forward pass once over
// every item's rows (executor.h, SequenceRows) and the output head over each item's last row.
#include <sqrtdk/batch.h>
#include <sqrtdk/error.h>

#include "engine/src/runtime/model_impl.h"
#include "models/family.h"
#include "ops/base/threading.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <new>
#include <string>
#include <vector>

namespace sqrtdk {

namespace {

// One sequence: its cache [n_layers][n_kv_heads][capacity][head_dim] (K and V) and how much of it is filled.
struct Sequence {
  AlignedBuffer<float> k, v;
  size_t capacity = 0;
  size_t n_past = 0;
};

}  // namespace

struct BatchState : ForwardState {
  std::shared_ptr<const Model> model;
  const ModelFamily* family = nullptr;
  size_t kv_block = 16;
  std::map<Batch::SequenceId, Sequence> sequence_map;
  Batch::SequenceId next_id = 1;
  std::vector<uint32_t> tokens;        // the step's rows' tokens, item after item
  std::vector<SequenceRows> rows;      // the step's items as the executor sees them
  std::vector<float> head_logits;      // [items, n_vocab]

  size_t floats_per_position() const {
    const ModelConfig& c = m->config;
    return size_t{c.n_layers} * c.n_kv_heads * c.head_dim;
  }
  size_t capacity_for(size_t n_tokens) const {
    const size_t rounded = (n_tokens + kv_block - 1) / kv_block * kv_block;
    return std::min(rounded, max_context);
  }
  Sequence& find(Batch::SequenceId id, const char* what) {
    auto it = sequence_map.find(id);
    if (it == sequence_map.end()) throw Error(std::string(what) + ": no sequence " + std::to_string(id));
    return it->second;
  }
  // Grows seq's cache to hold n_tokens (at least doubling, so a sequence that grows a block at a time is copied
  // O(log n) times); the filled positions are copied. Throws on out-of-memory with seq unchanged.
  // exact: to capacity_for(n_tokens), no doubling (reserve()).
  void grow(Sequence& seq, size_t n_tokens, bool exact = false) {
    if (n_tokens <= seq.capacity) return;
    const size_t cap = exact ? capacity_for(n_tokens)
                             : std::min(max_context, std::max(capacity_for(n_tokens), 2 * seq.capacity));
    const ModelConfig& c = m->config;
    const size_t blocks = size_t{c.n_layers} * c.n_kv_heads, hd = c.head_dim;
    AlignedBuffer<float> k, v;
    try {
      k.allocate(blocks * cap * hd);
      v.allocate(blocks * cap * hd);
    } catch (const Error& e) {
      throw Error(e.kind(), "Batch: the KV cache for " + std::to_string(cap) + " positions needs " +
                                std::to_string(2 * blocks * cap * hd * sizeof(float) >> 20) + " MiB: " + e.what());
    }
    for (size_t b = 0; b < blocks && seq.n_past > 0; ++b) {  // an empty cache has no buffer (memcpy from null)
      std::memcpy(k.data() + b * cap * hd, seq.k.data() + b * seq.capacity * hd, seq.n_past * hd * sizeof(float));
      std::memcpy(v.data() + b * cap * hd, seq.v.data() + b * seq.capacity * hd, seq.n_past * hd * sizeof(float));
    }
    seq.k = std::move(k);
    seq.v = std::move(v);
    seq.capacity = cap;
  }
};

Batch::Batch(std::shared_ptr<const Model> model, const BatchOptions& options)
    : state_(std::make_unique<BatchState>()) {
  if (!model) throw Error("Batch: model is null");
  BatchState& s = *state_;
  s.model = std::move(model);
  s.m = &s.model->impl().weights;
  s.family = s.model->impl().family;
  const ModelConfig& c = s.m->config;
  s.max_context = options.max_context ? options.max_context : c.max_seq;
  if (s.max_context > c.max_seq)
    throw Error("Batch: max_context " + std::to_string(s.max_context) + " exceeds the model's max_seq " +
                std::to_string(c.max_seq));
  if (options.max_rows == 0) throw Error("Batch: max_rows must be >= 1");
  if (options.kv_block == 0) throw Error("Batch: kv_block must be >= 1");
  s.max_batch = options.max_rows;
  // No block is larger than a whole context: capped so the rounding in capacity_for cannot wrap (SIZE_MAX gave a
  // cache of 0 positions, then a write through null).
  s.kv_block = std::min(options.kv_block, s.max_context);
  s.n_threads = resolve_threads(options.n_threads);
  s.row_order = ops::RowOrder::invariant;
  s.last_rows_only = true;  // a step returns each item's last position's logits only
  try {
    s.allocate_activations(s.family->scratch_widths(c));
    if (s.family->uses_rope) s.rope.emplace(s.max_context, c.head_dim, c.rope_theta);
  } catch (const Error& e) {
    throw Error(e.kind(), "Batch: scratch for max_rows " + std::to_string(s.max_batch) + ": " + e.what() +
                              " (set BatchOptions::max_rows lower)");
  } catch (const std::bad_alloc&) {
    throw Error("Batch: the RoPE table for max_context " + std::to_string(s.max_context) +
                ": out of memory (set BatchOptions::max_context lower)");
  }
}

Batch::~Batch() = default;
Batch::Batch(Batch&&) noexcept = default;
Batch& Batch::operator=(Batch&&) noexcept = default;

BatchState& Batch::state() const {
  if (!state_) throw Error("Batch: this batch was moved from; use the Batch it was moved to");
  return *state_;
}

Batch::SequenceId Batch::add_sequence() {
  BatchState& s = state();
  const SequenceId id = s.next_id++;
  s.sequence_map.emplace(id, Sequence{});
  return id;
}

void Batch::remove_sequence(SequenceId sequence) {
  BatchState& s = state();
  s.find(sequence, "Batch::remove_sequence");
  s.sequence_map.erase(sequence);
}

void Batch::reserve(SequenceId sequence, size_t n_tokens) {
  BatchState& s = state();
  Sequence& seq = s.find(sequence, "Batch::reserve");
  if (n_tokens > s.max_context)
    throw Error("Batch::reserve: " + std::to_string(n_tokens) + " tokens > max_context " +
                std::to_string(s.max_context));
  s.grow(seq, n_tokens, /*exact=*/true);
}

Batch::SequenceId Batch::fork_sequence(SequenceId source, size_t n, size_t reserve_tokens) {
  BatchState& s = state();
  const Sequence& from = s.find(source, "Batch::fork_sequence");
  if (n > from.n_past)
    throw Error("Batch::fork_sequence: " + std::to_string(n) + " tokens asked, sequence " + std::to_string(source) +
                " has " + std::to_string(from.n_past));
  Sequence to;
  s.grow(to, std::clamp(reserve_tokens, n, s.max_context), /*exact=*/true);
  const size_t blocks = s.floats_per_position() / s.m->config.head_dim, hd = s.m->config.head_dim;
  for (size_t b = 0; b < blocks && n > 0; ++b) {
    std::memcpy(to.k.data() + b * to.capacity * hd, from.k.data() + b * from.capacity * hd, n * hd * sizeof(float));
    std::memcpy(to.v.data() + b * to.capacity * hd, from.v.data() + b * from.capacity * hd, n * hd * sizeof(float));
  }
  to.n_past = n;
  const SequenceId id = s.next_id++;
  s.sequence_map.emplace(id, std::move(to));
  return id;
}

std::span<const float> Batch::step(std::span<const Work> work) {
  BatchState& s = state();
  const ModelConfig& c = s.m->config;
  // Validate everything before touching state, so a bad step leaves every sequence as it was.
  if (work.empty()) throw Error("Batch::step: no work");
  size_t total = 0;
  std::vector<Sequence*> seqs(work.size());
  for (size_t i = 0; i < work.size(); ++i) {
    const Work& w = work[i];
    Sequence& seq = s.find(w.sequence, "Batch::step");
    for (size_t j = 0; j < i; ++j)
      if (work[j].sequence == w.sequence)
        throw Error("Batch::step: sequence " + std::to_string(w.sequence) + " appears twice in one step");
    if (w.tokens.empty()) throw Error("Batch::step: item " + std::to_string(i) + " has no tokens");
    for (size_t t = 0; t < w.tokens.size(); ++t)
      if (w.tokens[t] >= c.n_vocab)
        throw Error("Batch::step: item " + std::to_string(i) + " token " + std::to_string(t) + " has id " +
                    std::to_string(w.tokens[t]) + ", outside the vocabulary [0, " + std::to_string(c.n_vocab) + ")");
    if (seq.n_past + w.tokens.size() > s.max_context)
      throw Error(ErrorKind::context_full, "Batch::step: sequence " + std::to_string(w.sequence) + ": " +
                                               std::to_string(seq.n_past) + " tokens + " +
                                               std::to_string(w.tokens.size()) + " new > limit " +
                                               std::to_string(s.max_context));
    total += w.tokens.size();
    seqs[i] = &seq;
  }
  if (total > s.max_batch)
    throw Error("Batch::step: " + std::to_string(total) + " tokens in one step > max_rows " +
                std::to_string(s.max_batch));
  // Grow first (growing keeps the contents, so a failure part-way changes no sequence's context).
  for (size_t i = 0; i < work.size(); ++i) s.grow(*seqs[i], seqs[i]->n_past + work[i].tokens.size());

  s.tokens.clear();
  s.rows.clear();
  for (size_t i = 0; i < work.size(); ++i) {
    Sequence& seq = *seqs[i];
    s.rows.push_back(SequenceRows{seq.k.data(), seq.v.data(), seq.capacity, s.tokens.size(), work[i].tokens.size(),
                                  seq.n_past});
    s.tokens.insert(s.tokens.end(), work[i].tokens.begin(), work[i].tokens.end());
  }
  s.sequences = s.rows;
  s.family->forward(s, s.tokens.data(), total, 0);
  s.sequences = {};
  for (size_t i = 0; i < work.size(); ++i) seqs[i]->n_past += work[i].tokens.size();

  // The head over each item's last row: the last block computed those alone, in rows 0, 1, ... of xb
  // (last_rows_only), so one GEMM.
  s.head_logits.resize(s.rows.size() * c.n_vocab);
  run_linear(s, "lm_head", -1, s.m->lm_head, s.xb.data(), s.rows.size(), c.d_model, s.head_logits.data(),
             c.n_vocab, {});
  return {s.head_logits.data(), s.head_logits.size()};
}

size_t Batch::n_past(SequenceId sequence) const { return state().find(sequence, "Batch::n_past").n_past; }
size_t Batch::n_sequences() const { return state().sequence_map.size(); }
size_t Batch::max_context() const { return state().max_context; }
size_t Batch::max_rows() const { return state().max_batch; }
int Batch::n_threads() const { return state().n_threads; }
const Model& Batch::model() const { return *state().model; }

size_t Batch::kv_bytes() const {
  size_t floats = 0;
  for (const auto& [id, seq] : state().sequence_map) floats += seq.k.size() + seq.v.size();
  return floats * sizeof(float);
}

size_t Batch::kv_bytes_for(size_t n_tokens) const {
  const BatchState& s = state();
  return 2 * s.floats_per_position() * s.capacity_for(n_tokens) * sizeof(float);
}

}  // namespace sqrtdk
