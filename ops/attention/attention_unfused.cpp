// The unfused attention path, per head h (kv head g = h / G):
//   scores[n_queries][n_keys] = scale · Q_h · K_gᵀ      gemm_unpacked, BLayout::nk
//   P = softmax_rows(scores) with the causal mask          (masked keys exactly 0)
//   out_h[n_queries][head_dim] = P · V_g                   gemm_unpacked, BLayout::kn
// Materializes the scores of at most kUnfusedMaxScoreFloats per thread: the queries go in blocks of
// unfused_rows_per_block rows (one block, the whole call, unless n_queries × n_keys is larger), and a causal block
// stops at its last row's keys. With at least as many heads as threads, heads are the items
// of one parallel_for (single-threaded GEMMs); otherwise heads run one after another with every thread inside the
// GEMM and the softmax. Both GEMM and softmax are deterministic for any thread count, so the path is too.
#include "ops/attention/attention_internal.h"

#include "ops/base/threading.h"
#include "ops/gemm/gemm.h"
#include "ops/softmax/softmax.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace sqrtdk::ops {

struct UnfusedScratch {
  std::vector<AlignedBuffer<float>> scores;  // per thread: [n_queries][n_keys]
  std::vector<GemmWorkspace> gemm;           // per thread
  void reserve(size_t threads, size_t floats) {
    if (scores.size() < threads) scores.resize(threads);
    if (gemm.size() < threads) gemm.resize(threads);
    for (size_t t = 0; t < threads; ++t)
      if (scores[t].size() < floats) scores[t].allocate(floats);
  }
  size_t bytes() const {
    size_t b = 0;
    for (const auto& s : scores) b += s.size() * sizeof(float);
    for (const auto& g : gemm) b += g.bytes();
    return b;
  }
};

AttentionWorkspace::Impl::Impl() : unfused_(std::make_unique<UnfusedScratch>()) {}
AttentionWorkspace::Impl::~Impl() = default;
size_t AttentionWorkspace::Impl::unfused_bytes() const { return unfused_->bytes(); }
UnfusedScratch& AttentionWorkspace::Impl::unfused() { return *unfused_; }

namespace {

// A masked key's probability is exactly 0, but 0 · NaN = NaN: a non-finite value row reaches, through P·V, the
// earlier rows that cannot see it. Only when the output holds a non-finite element (a check of n × d floats), find
// the first non-finite value row `bad` among the keys masked for some row, and recompute the rows that cannot see
// it with value rows bad.. set to 0: the same GEMM shape, so the same blocking and summation order, and the
// products changed were 0 · finite = 0, so those rows get exactly the bits of a clean run.
void redo_rows_blind_to_nonfinite_values(Isa isa, const AttentionParams& p, const float* probs, size_t ld_probs,
                                         const float* v, float* out, GemmWorkspace& gws, int threads) {
  const size_t d = p.head_dim, n = p.n_queries, m = p.n_keys();
  auto finite = [](float x) { return std::fabs(x) <= std::numeric_limits<float>::max(); };
  bool clean = true;
  for (size_t i = 0; i < n && clean; ++i)
    for (size_t c = 0; c < d; ++c) clean &= finite(out[i * p.ldo + c]);
  if (clean) return;
  size_t bad = m;
  for (size_t e = (p.pos0 + 1) * d; e < m * d; ++e)
    if (!finite(v[e])) {
      bad = e / d;
      break;
    }
  if (bad == m) return;  // the non-finite outputs come from q, k or v rows every row sees
  const size_t n_blind = std::min(n, bad - p.pos0);  // row i sees keys 0 .. pos0 + i
  std::vector<float> v_clean(m * d, 0.0f), redo(n * d);
  std::copy(v, v + bad * d, v_clean.begin());
  gemm_unpacked(isa, n, d, m, 1.0f, probs, ld_probs, v_clean.data(), d, BLayout::kn, redo.data(), d, gws, threads);
  for (size_t i = 0; i < n_blind; ++i) std::copy_n(redo.data() + i * d, d, out + i * p.ldo);
}

// One head, queries [row0, row0 + n_rows): scores (or the observer's slice, row stride ld_scores), softmax, P·V.
// The block is itself an attention call: queries at positions pos0 + row0 .., and (causal) keys only up to the
// block's last position, so a causal block computes none of the keys masked for all of its rows. `threads` is the
// thread count inside GEMM/softmax.
void unfused_head_block(Isa isa, const AttentionParams& p, size_t h, size_t row0, size_t n_rows, float* scores,
                        size_t ld_scores, GemmWorkspace& gws, int threads) {
  AttentionParams b = p;
  b.pos0 = p.pos0 + row0;
  b.n_queries = n_rows;
  b.q = p.q + row0 * p.ldq;
  b.out = p.out + row0 * p.ldo;
  const size_t d = p.head_dim, n = n_rows, m = p.causal ? b.n_keys() : p.n_keys();
  const size_t g = h / (p.n_heads / p.n_kv_heads);
  const float* q = b.q + h * d;                                // [n][ldq]
  const float* k = p.k_cache + g * p.cache_stride * d;         // [m][d]
  const float* v = p.v_cache + g * p.cache_stride * d;         // [m][d]
  gemm_unpacked(isa, n, m, d, p.scale, q, p.ldq, k, d, BLayout::nk, scores, ld_scores, gws, threads);
  SoftmaxMask mask;
  mask.causal = p.causal;
  mask.pos0 = b.pos0;
  softmax_rows(isa, n, m, scores, ld_scores, scores, ld_scores, 1.0f, mask, threads);
  float* out = b.out + h * d;
  gemm_unpacked(isa, n, d, m, 1.0f, scores, ld_scores, v, d, BLayout::kn, out, p.ldo, gws, threads);
  if (p.causal && n > 1) redo_rows_blind_to_nonfinite_values(isa, b, scores, ld_scores, v, out, gws, threads);
}

// One head, its queries in blocks of `rows_per_block`.
void unfused_head(Isa isa, const AttentionParams& p, size_t h, size_t rows_per_block, float* scores,
                  size_t ld_scores, bool observed, GemmWorkspace& gws, int threads) {
  for (size_t row0 = 0; row0 < p.n_queries; row0 += rows_per_block) {
    const size_t rows = std::min(rows_per_block, p.n_queries - row0);
    float* block_scores = observed ? scores + row0 * ld_scores : scores;  // the observer keeps every row
    unfused_head_block(isa, p, h, row0, rows, block_scores, ld_scores, gws, threads);
  }
}

}  // namespace

size_t unfused_rows_per_block(size_t n_queries, size_t n_keys) {
  const size_t rows = kUnfusedMaxScoreFloats / std::max<size_t>(n_keys, 1) / 16 * 16;
  return std::min(n_queries, std::max<size_t>(rows, 16));
}

void attention_unfused(Isa isa, const AttentionParams& p, AttentionWorkspace::Impl& ws, int threads) {
  const size_t n = p.n_queries, m = p.n_keys();
  if (p.observe) {
    p.observe->probs.assign(p.n_heads * n * m, 0.0f);
    p.observe->n_heads = p.n_heads, p.observe->n_queries = n, p.observe->n_keys = m;
  }
  const size_t rows_per_block = unfused_rows_per_block(n, m);
  UnfusedScratch& us = ws.unfused();
  const bool split_heads = p.n_heads >= static_cast<size_t>(threads);
  const size_t buffers = split_heads ? static_cast<size_t>(threads) : 1;
  us.reserve(buffers, p.observe ? 0 : rows_per_block * m);
  auto scores_of = [&](size_t h, size_t t) {
    return p.observe ? p.observe->probs.data() + h * n * m : us.scores[t].data();
  };
  const bool observed = p.observe != nullptr;
  if (!split_heads || threads <= 1) {
    for (size_t h = 0; h < p.n_heads; ++h)
      unfused_head(isa, p, h, rows_per_block, scores_of(h, 0), m, observed, us.gemm[0], threads);
    return;
  }
  // Items = heads, each on one participant with that worker's buffers and single-threaded GEMMs.
  parallel_for(threads, p.n_heads, [&](size_t h, int worker) {
    const size_t t = static_cast<size_t>(worker);
    unfused_head(isa, p, h, rows_per_block, scores_of(h, t), m, observed, us.gemm[t], 1);
  });
}

}  // namespace sqrtdk::ops
