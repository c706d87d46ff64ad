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
  // Bytes: weights once (streamed), input rows and output rows (read too when a residual is added: resident).
  const double resident = (n * K + n * N * (epilogue.residual ? 2 : 1)) * sizeof(float);
  const double bytes = N * K * sizeof(float) + resident;
  run_op(s, op, layer, n, 2.0 * n * N * K, bytes, resident,
         [&] { ops::gemm(x, n, ldx, w.weights, y, ldy, epilogue, s.n_threads, s.row_order); });
}

namespace {

// Runs fn(group, row_begin, row_end) over items of one kv group and a block of rows, group-major (a group's rows
// are consecutive items: the pool's caller claims the first groups, its helpers the last), on up to n_threads; the
// row ops' thresholds (threading.h: one thread under 2^16 floats in all). floats_per_row: what one group touches
// per row. The QKV GEMM's
// items split columns, so without this order every head's rows came half from each core: with it, the thread that
// rotates a group's q and k heads, and copies its k and v heads into the cache, tends to be the one whose attention
// items read them (attention's fused items are group-major too). Rows and groups are independent: no result changes.
template <class Fn>
void for_group_items(int n_threads, size_t n, size_t n_groups, size_t floats_per_row, Fn&& fn) {
  if (n * n_groups * floats_per_row < kRowOpOneThreadBelow) {
    for (size_t g = 0; g < n_groups; ++g) fn(g, size_t{0}, n);
    return;
  }
  const size_t rows_per_item = row_op_rows_per_item(floats_per_row);
  const size_t chunks = chunk_count(n, rows_per_item);
  parallel_for(resolve_threads(n_threads), n_groups * chunks, [&](size_t item, int) {
    const Range r = chunk_range(n, rows_per_item, item % chunks);
    fn(item / chunks, r.begin, r.end);
  });
}

// One sequence's KV store and attention: rows [rows.row0, + rows.n) of s.qkv at positions rows.pos0 ... into the
// cache, then attention for the queries of rows [rows.row0 + first_query, + rows.n).
void sequence_attention(ForwardState& s, int layer, const SequenceRows& rows, size_t first_query) {
  const ModelConfig& c = s.m->config;
  const size_t hd = c.head_dim, qkv_w = s.m->qkv_width();
  const size_t k_col = c.n_heads * hd, v_col = k_col + c.n_kv_heads * hd;
  const size_t n = rows.n, pos0 = rows.pos0, n_keys = pos0 + n;
  const float* qkv = s.qkv.data() + rows.row0 * qkv_w;
  auto cache_at = [&](float* cache, size_t h) {
    return cache + (static_cast<size_t>(layer) * c.n_kv_heads + h) * rows.cache_stride * hd;
  };

  // Items of one kv head (and a block of rows on long prompts), in the order attention takes them, so the thread
  // that copies a head's keys and values is likely the one whose attention items read them.
  // From the QKV rows just made into the cache rows attention reads next: all resident.
  const double store_bytes = 4.0 * n * c.n_kv_heads * hd * sizeof(float);
  run_op(s, "kv_store", layer, n, 0, store_bytes, store_bytes, [&] {
    for_group_items(s.n_threads, n, c.n_kv_heads, 2 * hd, [&](size_t h, size_t t0, size_t t1) {
      float* kc = cache_at(rows.k_cache, h);
      float* vc = cache_at(rows.v_cache, h);
      for (size_t t = t0; t < t1; ++t) {
        const float* row = qkv + t * qkv_w;
        std::memcpy(kc + (pos0 + t) * hd, row + k_col + h * hd, hd * sizeof(float));
        std::memcpy(vc + (pos0 + t) * hd, row + v_col + h * hd, hd * sizeof(float));
      }
    });
  });

  // Queries [q0, n): positions pos0 + q0 ...; they see the keys up to their own, all in the cache by now.
  const size_t q0 = first_query, nq = n - first_query;
  ops::AttentionParams p;
  p.n_heads = c.n_heads;
  p.n_kv_heads = c.n_kv_heads;
  p.head_dim = hd;
  p.n_queries = nq;
  p.pos0 = pos0 + q0;
  p.causal = true;
  p.scale = c.attention_scale_or_default();
  p.q = qkv + q0 * qkv_w;
  p.ldq = qkv_w;
  p.k_cache = cache_at(rows.k_cache, 0);
  p.v_cache = cache_at(rows.v_cache, 0);
  p.cache_stride = rows.cache_stride;
  p.out = s.att.data() + (rows.row0 + q0) * c.n_heads * hd;
  p.ldo = c.n_heads * hd;
  p.paths = &s.m->attention_paths;
  const bool capture = layer == s.capture_layer;
  if (capture) {
    if (s.capture_scale > 0) p.scale = s.capture_scale;
    p.observe = &s.captured;
  }
  // Causal: query t sees p.pos0 + t + 1 keys; FLOPs 4·hd per (query head, key) pair for q·k and p·v.
  const double pairs = static_cast<double>(nq) * p.pos0 + 0.5 * nq * (nq + 1);
  const double flops = 4.0 * hd * c.n_heads * pairs;
  const double bytes = (2.0 * n_keys * c.n_kv_heads * hd + 2.0 * nq * c.n_heads * hd) * sizeof(float);
  // The queries, the output and this chunk's own keys and values (just stored) are resident; the earlier
  // positions' keys and values stream (a decode step re-reads the whole cache).
  const double resident = (2.0 * n * c.n_kv_heads * hd + 2.0 * nq * c.n_heads * hd) * sizeof(float);
  if (verbose()) {
    ops::AttentionPath path = ops::default_attention_path();
    if (path == ops::AttentionPath::automatic) path = ops::choose_attention_path(p, p.paths);
    const unsigned bit = 1u << static_cast<unsigned>(path) << (nq == 1 ? 4 : 0);
    if (!(s.verbose_paths_printed & bit)) {
      s.verbose_paths_printed |= bit;
      std::fprintf(stderr, "sqrtdk: attention %s path (%s, %zu heads / %zu kv heads x %zu, ISA %s)\n",
                   ops::attention_path_name(path), nq == 1 ? "decode" : "prefill", p.n_heads, p.n_kv_heads, hd,
                   isa_name(s.m->isa));
    }
  }
  run_op(s, "attention", layer, nq, flops, bytes, resident,
         [&] { ops::attention(s.m->isa, p, s.attention_ws, s.n_threads); }, n_keys);
}

}  // namespace

void run_attention(ForwardState& s, int layer, size_t n, size_t pos0) {
  const bool last_rows = is_last_rows_block(s, static_cast<size_t>(layer));
  for_each_sequence(s, n, pos0, [&](const SequenceRows& rows) {
    sequence_attention(s, layer, rows, last_rows ? rows.n - 1 : 0);
  });
}

size_t gather_block_rows(ForwardState& s, size_t layer, size_t n) {
  if (!is_last_rows_block(s, layer)) return n;
  const ModelConfig& c = s.m->config;
  const size_t d = c.d_model, att_w = c.n_heads * c.head_dim;
  size_t i = 0;
  // Row i <= each sequence's last row, and the sequences come in row order: no source is overwritten before it
  // is read.
  for_each_sequence(s, n, 0, [&](const SequenceRows& rows) {
    const size_t last = rows.row0 + rows.n - 1;
    if (last != i) {
      std::memcpy(s.x.data() + i * d, s.x.data() + last * d, d * sizeof(float));
      std::memcpy(s.att.data() + i * att_w, s.att.data() + last * att_w, att_w * sizeof(float));
    }
    ++i;
  });
  return i;
}

void run_rope_qk(ForwardState& s, int layer, float* qkv, size_t n, size_t ld, size_t pos0) {
  const ModelConfig& c = s.m->config;
  const size_t hd = c.head_dim, n_groups = c.n_kv_heads, group = c.n_heads / c.n_kv_heads;
  const size_t heads = c.n_heads + c.n_kv_heads;
  const double rope_bytes = 2.0 * n * heads * hd * sizeof(float);  // the QKV rows just made, in place: resident
  run_op(s, "rope", layer, n, 6.0 * n * heads * hd, rope_bytes, rope_bytes, [&] {
    const auto layout = c.rope_interleaved ? ops::RopeLayout::interleaved : ops::RopeLayout::rotate_half;
    for_each_sequence(s, n, pos0, [&](const SequenceRows& seq) {
      float* rows = qkv + seq.row0 * ld;
      auto rotate = [&](size_t g, size_t t0, size_t t1) {  // kv group g's q heads and its k head, rows [t0, t1)
        ops::rope(s.m->isa, *s.rope, layout, rows + t0 * ld + g * group * hd, t1 - t0, ld, group, hd, seq.pos0 + t0);
        ops::rope(s.m->isa, *s.rope, layout, rows + t0 * ld + (c.n_heads + g) * hd, t1 - t0, ld, 1, hd,
                  seq.pos0 + t0);
      };
      for_group_items(s.n_threads, seq.n, n_groups, (group + 1) * hd, rotate);
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
