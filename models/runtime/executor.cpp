// Shared executor steps: linear layers, the KV-cache write + attention, the output head (models/runtime/executor.h).
#include "models/runtime/executor.h"

#include "ops/base/threading.h"

#include <sqrtdk/error.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

namespace sqrtdk {

void run_linear(ForwardState& s, const char* op, int layer, const Linear& w, const float* x, size_t n, size_t ldx,
                float* y, size_t ldy, const ops::GemmEpilogue& epilogue) {
  const double N = static_cast<double>(w.N()), K = static_cast<double>(w.K());
  // Bytes: weights once, input rows, output rows (read too when a residual is added).
  const double bytes = (N * K + n * K + n * N * (epilogue.residual ? 2 : 1)) * sizeof(float);
  run_op(s, op, layer, n, 2.0 * n * N * K, bytes,
         [&] { ops::gemm(x, n, ldx, w.weights, y, ldy, epilogue, s.n_threads, s.row_order); });
}

namespace {

// One sequence's KV store and attention: rows [rows.row0, + rows.n) of s.qkv at positions rows.pos0 ...
void sequence_attention(ForwardState& s, int layer, const SequenceRows& rows) {
  const ModelConfig& c = s.m->config;
  const size_t hd = c.head_dim, qkv_w = s.m->qkv_width();
  const size_t k_col = c.n_heads * hd, v_col = k_col + c.n_kv_heads * hd;
  const size_t n = rows.n, pos0 = rows.pos0, n_keys = pos0 + n;
  const float* qkv = s.qkv.data() + rows.row0 * qkv_w;
  auto cache_at = [&](float* cache, size_t h) {
    return cache + (static_cast<size_t>(layer) * c.n_kv_heads + h) * rows.cache_stride * hd;
  };

  // Threaded like the row ops (items of whole rows, one thread under 2^16 floats): a one-thread copy between the
  // QKV GEMM and attention let the helpers fall asleep, and attention then paid their wake-up.
  run_op(s, "kv_store", layer, n, 0, 4.0 * n * c.n_kv_heads * hd * sizeof(float), [&] {
    auto store_rows = [&](size_t t0, size_t t1) {
      for (size_t h = 0; h < c.n_kv_heads; ++h) {
        float* kc = cache_at(rows.k_cache, h);
        float* vc = cache_at(rows.v_cache, h);
        for (size_t t = t0; t < t1; ++t) {
          const float* row = qkv + t * qkv_w;
          std::memcpy(kc + (pos0 + t) * hd, row + k_col + h * hd, hd * sizeof(float));
          std::memcpy(vc + (pos0 + t) * hd, row + v_col + h * hd, hd * sizeof(float));
        }
      }
    };
    const size_t row_floats = 2 * c.n_kv_heads * hd;
    if (n * row_floats < (size_t{1} << 16)) {
      store_rows(0, n);
      return;
    }
    const size_t rows_per_item = std::max<size_t>(1, (size_t{1} << 14) / row_floats);
    parallel_for(resolve_threads(s.n_threads), chunk_count(n, rows_per_item), [&](size_t item, int) {
      const Range r = chunk_range(n, rows_per_item, item);
      store_rows(r.begin, r.end);
    });
  });

  ops::AttentionParams p;
  p.n_heads = c.n_heads;
  p.n_kv_heads = c.n_kv_heads;
  p.head_dim = hd;
  p.n_queries = n;
  p.pos0 = pos0;
  p.causal = true;
  p.scale = c.attention_scale_or_default();
  p.q = qkv;
  p.ldq = qkv_w;
  p.k_cache = cache_at(rows.k_cache, 0);
  p.v_cache = cache_at(rows.v_cache, 0);
  p.cache_stride = rows.cache_stride;
  p.out = s.att.data() + rows.row0 * c.n_heads * hd;
  p.ldo = c.n_heads * hd;
  p.paths = &s.m->attention_paths;
  const bool capture = layer == s.capture_layer;
  if (capture) {
    if (s.capture_scale > 0) p.scale = s.capture_scale;
    p.observe = &s.captured;
  }
  // Causal: query t sees pos0 + t + 1 keys; FLOPs 4·hd per (query head, key) pair for q·k and p·v.
  const double pairs = static_cast<double>(n) * pos0 + 0.5 * n * (n + 1);
  const double flops = 4.0 * hd * c.n_heads * pairs;
  const double bytes = (2.0 * n_keys * c.n_kv_heads * hd + 2.0 * n * c.n_heads * hd) * sizeof(float);
  if (verbose()) {
    ops::AttentionPath path = ops::default_attention_path();
    if (path == ops::AttentionPath::automatic) path = ops::choose_attention_path(p, p.paths);
    const unsigned bit = 1u << static_cast<unsigned>(path) << (n == 1 ? 4 : 0);
    if (!(s.verbose_paths_printed & bit)) {
      s.verbose_paths_printed |= bit;
      std::fprintf(stderr, "sqrtdk: attention %s path (%s, %zu heads / %zu kv heads x %zu, ISA %s)\n",
                   ops::attention_path_name(path), n == 1 ? "decode" : "prefill", p.n_heads, p.n_kv_heads, hd,
                   isa_name(s.m->isa));
    }
  }
  run_op(s, "attention", layer, n, flops, bytes,
         [&] { ops::attention(s.m->isa, p, s.attention_ws, s.n_threads); }, n_keys);
}

}  // namespace

void run_attention(ForwardState& s, int layer, size_t n, size_t pos0) {
  for_each_sequence(s, n, pos0, [&](const SequenceRows& rows) { sequence_attention(s, layer, rows); });
}

void run_rope(ForwardState& s, int layer, float* rows, size_t n, size_t ld, size_t n_heads, size_t pos0) {
  const ModelConfig& c = s.m->config;
  const size_t hd = c.head_dim;
  run_op(s, "rope", layer, n, 6.0 * n * n_heads * hd, 2.0 * n * n_heads * hd * sizeof(float), [&] {
    const auto layout = c.rope_interleaved ? ops::RopeLayout::interleaved : ops::RopeLayout::rotate_half;
    for_each_sequence(s, n, pos0, [&](const SequenceRows& seq) {
      ops::rope(s.m->isa, *s.rope, layout, rows + seq.row0 * ld, seq.n, ld, n_heads, hd, seq.pos0, s.n_threads);
    });
  });
}

void run_lm_head(ForwardState& s, size_t first_row, size_t n) {
  const ModelConfig& c = s.m->config;
  const size_t rows = n - first_row;
  const size_t old = s.logits.size();
  s.logits.resize(old + rows * c.n_vocab);
  run_linear(s, "lm_head", -1, s.m->lm_head, s.xb.data() + first_row * c.d_model, rows, c.d_model,
             s.logits.data() + old, c.n_vocab, {});
}

}  // namespace sqrtdk
