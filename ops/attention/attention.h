// Multi-head attention with grouped-query heads and a KV cache: out = softmax(scale * Q·Kᵀ + causal mask)·V.
//
//   q      [n_queries][ldq]   head h at columns h*head_dim .. h*head_dim + head_dim - 1
//   k/v    [n_kv_heads][cache_stride][head_dim]   keys/values 0 .. pos0 + n_queries - 1 are filled
//   out    [n_queries][ldo]   head h at columns h*head_dim ..
//   Head h reads kv head h / (n_heads / n_kv_heads) (GQA; MQA when n_kv_heads = 1).
//   causal: query i (position pos0 + i) sees keys 0 .. pos0 + i; non-causal: all pos0 + n_queries keys.
//
// Two paths, both kept (how `automatic` chooses: attention_paths.h, a table measured where the engine runs, else the
// built-in rule whose measurements head attention.cpp):
//   unfused  scores = Q·Kᵀ (gemm_unpacked), softmax_rows with the causal mask, out = P·V (gemm_unpacked);
//            materializes up to 16 MiB of one head's scores per thread, queries in blocks beyond that (a causal
//            block computes only the keys its rows see).
//   fused    flash-style: key tiles folded into an online softmax; Q·Kᵀ and P·V both as register-blocked tiles,
//            each K/V tile read once for all query heads of a GQA group, fully masked causal tiles skipped;
//            scratch O(threads × tile). Decode (n_queries = 1) splits the cache into fixed chunks of keys whose
//            partial softmax states are merged in a fixed order.
// Determinism: the work partition (heads, query blocks, cache chunks) depends on the shape only, never on
// n_threads, and every output element is computed by one thread: bit-identical results for any thread count.
// NaN: a NaN in q or in a key a query sees makes that query's output row (its head) NaN, never hidden, on every
// path, ISA, key position and decode chunk (tests/ops/test_attention.cpp). A NaN or Inf in a value row reaches
// exactly the queries that see its key: a masked weight is 0 and 0 · NaN = NaN, so both paths stop the product of
// the rows that cannot see it before that row (bit-identical to a clean run for those rows).
// Accuracy (vs attention_ref, double): fused and unfused within about 1e-5 relative to max |v| for the tested shapes
// (float dot products of length head_dim, exp 2 ulp, float sums of up to n_keys terms).
#pragma once

#include <sqrtdk/isa.h>

#include <cstddef>
#include <memory>
#include <vector>

namespace sqrtdk::ops {

// Observer hook: the probabilities of one call, [n_heads][n_queries][n_keys] (masked entries 0).
struct AttentionProbs {
  std::vector<float> probs;
  size_t n_heads = 0, n_queries = 0, n_keys = 0;
};

struct AttentionPathTable;  // attention_paths.h: which path is faster, measured on this machine

struct AttentionParams {
  size_t n_heads = 0, n_kv_heads = 0, head_dim = 0;  // n_kv_heads divides n_heads (GQA; MQA when 1)
  size_t n_queries = 0;                              // new tokens this call
  size_t pos0 = 0;     // position of the first query; the cache holds keys 0 .. pos0 + n_queries - 1
  bool causal = true;  // query i sees keys 0 .. pos0 + i; non-causal: all pos0 + n_queries keys
  float scale = 0;     // multiplies q·k before softmax; the executor passes 1/sqrt(head_dim)
  const float* q = nullptr;
  size_t ldq = 0;                   // [n_queries, ldq >= n_heads*head_dim], head h at columns h*head_dim
  const float* k_cache = nullptr;   // [n_kv_heads][cache_stride][head_dim]
  const float* v_cache = nullptr;   // [n_kv_heads][cache_stride][head_dim]
  size_t cache_stride = 0;          // rows per kv head (the session's max context)
  float* out = nullptr;
  size_t ldo = 0;                   // [n_queries, ldo >= n_heads*head_dim]
  AttentionProbs* observe = nullptr;  // if set: probabilities copied out (forces the unfused path for this call)
  const AttentionPathTable* paths = nullptr;  // `automatic` follows it where it covers the shape (attention_paths.h)

  size_t n_keys() const { return pos0 + n_queries; }
};

enum class AttentionPath { automatic, fused, unfused };
const char* attention_path_name(AttentionPath path);

// SQRTDK_ATTENTION=fused|unfused (sqrtdk::Error if another value), else automatic. Read once.
AttentionPath default_attention_path();

// The path `automatic` takes for a shape: choose_attention_path(p, p.paths) in attention_paths.h.

// Scratch owned by a Session: grows on demand to the largest call seen, then reused (no per-call allocation).
class AttentionWorkspace {
 public:
  AttentionWorkspace();
  ~AttentionWorkspace();
  AttentionWorkspace(AttentionWorkspace&&) noexcept;
  AttentionWorkspace& operator=(AttentionWorkspace&&) noexcept;
  // Bytes currently held (the benchmarks report it as peak scratch memory).
  size_t bytes() const;

  struct Impl;
  Impl& impl() { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

// Below this many multiply-adds (n_heads · n_queries · n_keys · head_dim: tens of microseconds) a call runs on one
// thread, as waking a helper costs more than it saves. The work partition never depends on the thread count, so
// this changes nothing in the results.
inline constexpr size_t kAttentionOneThreadBelowMacs = size_t{1} << 18;

// Validates p (sqrtdk::Error naming the bad field), then runs the chosen path with n_threads (0 = default).
// At most kMaxAttentionKeys keys (pos0 + n_queries): the fused path's causal mask compares key positions as floats,
// exact for integers up to 2^24; more keys are refused rather than masked wrongly.
inline constexpr size_t kMaxAttentionKeys = size_t{1} << 24;

void attention(Isa isa, const AttentionParams& p, AttentionWorkspace& ws, int n_threads = 0,
               AttentionPath path = default_attention_path());

// The specification: naive loops in double precision, one head and one query at a time.
void attention_ref(const AttentionParams& p);

}  // namespace sqrtdk::ops
