// Attention: argument checks, path choice, work partition and threading; the kernels are in attention_simd.h
// (fused), attention_unfused.cpp (GEMM + softmax) and attention_ref.cpp (the spec).
//
// Path choice (automatic): a table measured on the machine that runs (attention_paths.h); where none covers a shape,
// the built-in rule, builtin_attention_path, from bench-attention on the quiet 2-core Zen 5 VM, 2026-11-30 (MHA
// decode: 2026-12-07), fused/unfused ratios at 1 and 2 threads (README has the tables):
//   - causal prefill (what a decoder runs): fused 1.13–1.92× at 512+ keys for every head shape (it skips masked
//     tiles; the unfused path computes the whole n × m product); at 128 keys 1.03–1.30× except MHA with head_dim 128
//     (32×128: 0.74–0.78×) -> unfused there;
//   - non-causal prefill: unfused 1.04–1.6× faster at head_dim 128 and about even at 64 (fused 0.92–1.25×) -> unfused
//     while its n × m score buffer stays within kUnfusedScoreCap per thread, fused beyond (memory O(tile));
//   - decode: GQA fused 1.04–2.05× (cold caches); MHA fused 1.41–1.54× at 128 keys. Since the fused decode
//     prefetches K ahead (2026-12-07, cold 12 × 64, medians of 5 processes of 21 calls, 1 / 2 threads: fused ÷
//     unfused time 0.80 / 0.82 at 256 keys, 0.86 / 0.88 at 512, 0.99 / 1.09 at 1 024, 0.90 / 0.81 at 2 048,
//     0.93 / 0.94 at 4 096, 0.99 / 1.04 at 8 192; on 2026-11-30, 1.00–1.04 at 512 and 1.09–1.41 at 2 048–8 192)
//     -> unfused for MHA past 4096 keys.
// The probabilities hook (observe) always takes the unfused path, which materializes them anyway.
// SQRTDK_ATTENTION=fused|unfused forces a path.
#include "ops/attention/attention.h"

#include "ops/base/aligned_buffer.h"
#include "ops/base/threading.h"
#include "ops/attention/attention_internal.h"
#include "ops/attention/attention_kernels.h"
#include "ops/attention/attention_paths.h"

#include <sqrtdk/error.h>

#include <cmath>
#include <cstdlib>
#include <string>

namespace sqrtdk::ops {

namespace {

size_t round_up(size_t x, size_t m) { return (x + m - 1) / m * m; }

std::string describe(const AttentionParams& p) {
  return "attention(n_heads=" + std::to_string(p.n_heads) + ", n_kv_heads=" + std::to_string(p.n_kv_heads) +
         ", head_dim=" + std::to_string(p.head_dim) + ", n_queries=" + std::to_string(p.n_queries) +
         ", pos0=" + std::to_string(p.pos0) + ", cache_stride=" + std::to_string(p.cache_stride) + ")";
}

void validate(Isa isa, const AttentionParams& p) {
  auto fail = [&](const std::string& what) { throw Error(describe(p) + ": " + what); };
  if (!cpu_supports(isa)) fail(std::string("ISA ") + isa_name(isa) + " is not supported by this CPU");
  if (p.n_heads == 0) fail("n_heads must be > 0");
  if (p.n_kv_heads == 0) fail("n_kv_heads must be > 0");
  if (p.n_heads % p.n_kv_heads != 0) fail("n_kv_heads must divide n_heads");
  if (p.head_dim == 0) fail("head_dim must be > 0");
  if (!std::isfinite(p.scale) || p.scale == 0.0f) fail("scale must be finite and nonzero, got " + std::to_string(p.scale));
  if (p.n_queries == 0) return;
  if (p.n_keys() > kMaxAttentionKeys)
    fail("pos0 + n_queries = " + std::to_string(p.n_keys()) + " keys exceeds 2^24 = " +
         std::to_string(kMaxAttentionKeys) + " (the causal mask compares key positions as floats, exact up to 2^24)");
  const size_t width = p.n_heads * p.head_dim;
  if (p.q == nullptr) fail("q is null");
  if (p.k_cache == nullptr) fail("k_cache is null");
  if (p.v_cache == nullptr) fail("v_cache is null");
  if (p.out == nullptr) fail("out is null");
  if (p.ldq < width) fail("ldq = " + std::to_string(p.ldq) + " < n_heads*head_dim = " + std::to_string(width));
  if (p.ldo < width) fail("ldo = " + std::to_string(p.ldo) + " < n_heads*head_dim = " + std::to_string(width));
  if (p.cache_stride < p.n_keys())
    fail("cache_stride = " + std::to_string(p.cache_stride) + " < pos0 + n_queries = " + std::to_string(p.n_keys()));
}

void fused_prefill(const AttentionKernels& kernels, const AttentionParams& p, AttentionWorkspace::Impl& ws,
                   int threads) {
  const FusedPlan plan = make_fused_plan(p, kernels.vector_width);
  const size_t per_thread = round_up(fused_scratch_floats(plan), 16);
  ws.reserve_thread_scratch(static_cast<size_t>(threads), per_thread);
  const size_t n_items = p.n_kv_heads * plan.n_blocks;
  auto item_fn = [&](size_t item, float* scratch) {
    // Group-major (the pool's caller claims the first kv groups, its helpers the last: each thread tends to read
    // the heads it rotated and stored, executor.cpp), later query blocks first within a group (the most expensive
    // under causal masking).
    const size_t g = item / plan.n_blocks, qb = plan.n_blocks - 1 - item % plan.n_blocks;
    kernels.prefill_item(p, plan, g, qb, scratch);
  };
  // Items are independent and each writes its own output rows: any schedule gives the same bits. Claimed as they
  // come because causal blocks differ in cost (block qb sees about qb+1 key tiles).
  parallel_for(threads, n_items, [&](size_t item, int worker) {
    item_fn(item, ws.thread_scratch(static_cast<size_t>(worker), per_thread));
  });
}

void fused_decode(const AttentionKernels& kernels, const AttentionParams& p, AttentionWorkspace::Impl& ws,
                  int threads) {
  const DecodePlan plan = make_decode_plan(p, kernels.vector_width);
  const size_t per_thread = round_up(decode_scratch_floats(plan), 16);
  ws.reserve_thread_scratch(static_cast<size_t>(threads), per_thread);
  float* partials = ws.shared(decode_partial_floats(p, plan));
  const size_t n_items = p.n_kv_heads * plan.n_chunks;
  auto chunk_item = [&](size_t item, float* scratch) {
    const size_t g = item / plan.n_chunks, chunk = item % plan.n_chunks;
    kernels.decode_chunk(p, plan, g, chunk, scratch, partials);
  };
  auto merge_head = [&](size_t h) {
    const size_t g = h / plan.group, hh = h % plan.group;
    kernels.decode_merge(p, plan, g, hh, partials);
  };
  // Two jobs: every chunk's partials are written before any head merges them.
  parallel_for(threads, n_items, [&](size_t item, int worker) {
    chunk_item(item, ws.thread_scratch(static_cast<size_t>(worker), per_thread));
  });
  parallel_for(threads, p.n_heads, [&](size_t h, int) { merge_head(h); });
}

}  // namespace

std::span<const KernelEntry<AttentionKernels>> attention_kernels() {
  static constexpr KernelEntry<AttentionKernels> table[] = {
      {Isa::avx512, "attention_fused_avx512",
       {nullptr, 16, fused_prefill_item_avx512, decode_chunk_avx512, decode_merge_avx512}},
      {Isa::avx2, "attention_fused_avx2", {nullptr, 8, fused_prefill_item_avx2, decode_chunk_avx2, decode_merge_avx2}},
      {Isa::ref, "attention_ref_f64", {attention_ref, 1, nullptr, nullptr, nullptr}},
  };
  return table;
}

// ---- plans ----

FusedPlan make_fused_plan(const AttentionParams& p, size_t vector_width) {
  FusedPlan plan;
  plan.group = p.n_heads / p.n_kv_heads;
  plan.block = std::min(p.n_queries, std::max<size_t>(1, kTargetRows / plan.group));
  plan.n_blocks = (p.n_queries + plan.block - 1) / plan.block;
  plan.rows = plan.group * plan.block;
  plan.rows_padded = round_up(plan.rows, vector_width);
  plan.dim_padded = round_up(p.head_dim, vector_width);
  return plan;
}

size_t fused_scratch_floats(const FusedPlan& plan) {
  return plan.dim_padded * plan.rows_padded  // Qᵀ
         + kBc * plan.rows_padded            // Sᵀ / Pᵀ
         + plan.rows * plan.dim_padded       // O
         + 4 * plan.rows_padded;             // m, l, alpha, causal limit
}

DecodePlan make_decode_plan(const AttentionParams& p, size_t vector_width) {
  DecodePlan plan;
  plan.group = p.n_heads / p.n_kv_heads;
  plan.chunk_keys = decode_chunk_keys(p.n_kv_heads);
  plan.n_chunks = (p.n_keys() + plan.chunk_keys - 1) / plan.chunk_keys;
  plan.dim_padded = round_up(p.head_dim, vector_width);
  plan.partial_stride = plan.dim_padded + 2;
  plan.prefetch_keys = round_up(std::max<size_t>(1, kDecodePrefetchBytes / (p.head_dim * sizeof(float))), vector_width);
  return plan;
}

size_t decode_scratch_floats(const DecodePlan& plan) {
  return plan.group * plan.dim_padded + plan.group * plan.chunk_keys;  // scaled q rows, scores
}

size_t decode_partial_floats(const AttentionParams& p, const DecodePlan& plan) {
  return p.n_kv_heads * plan.n_chunks * plan.group * plan.partial_stride;
}

// ---- workspace ----

AttentionWorkspace::AttentionWorkspace() : impl_(std::make_unique<Impl>()) {}
AttentionWorkspace::~AttentionWorkspace() = default;
AttentionWorkspace::AttentionWorkspace(AttentionWorkspace&&) noexcept = default;
AttentionWorkspace& AttentionWorkspace::operator=(AttentionWorkspace&&) noexcept = default;
size_t AttentionWorkspace::bytes() const { return impl_->bytes(); }

void AttentionWorkspace::Impl::reserve_thread_scratch(size_t threads, size_t floats_each) {
  if (threads * floats_each > scratch_.size()) scratch_.allocate(threads * floats_each);
}
float* AttentionWorkspace::Impl::thread_scratch(size_t thread, size_t floats_each) {
  return scratch_.data() + thread * floats_each;
}
float* AttentionWorkspace::Impl::shared(size_t floats) {
  if (floats > shared_.size()) shared_.allocate(floats);
  return shared_.data();
}
size_t AttentionWorkspace::Impl::bytes() const {
  size_t b = (scratch_.size() + shared_.size()) * sizeof(float);
  b += unfused_bytes();
  return b;
}

// ---- paths ----

const char* attention_path_name(AttentionPath path) {
  switch (path) {
    case AttentionPath::automatic: return "automatic";
    case AttentionPath::fused: return "fused";
    case AttentionPath::unfused: return "unfused";
  }
  return "unknown";
}

AttentionPath default_attention_path() {
  static const AttentionPath path = [] {
    const char* env = std::getenv("SQRTDK_ATTENTION");
    if (env == nullptr || *env == '\0') return AttentionPath::automatic;
    const std::string v(env);
    if (v == "fused") return AttentionPath::fused;
    if (v == "unfused") return AttentionPath::unfused;
    if (v == "automatic") return AttentionPath::automatic;
    throw Error("SQRTDK_ATTENTION='" + v + "' is not a path (expected fused, unfused or automatic)");
  }();
  return path;
}

void attention(Isa isa, const AttentionParams& p, AttentionWorkspace& ws, int n_threads, AttentionPath path) {
  validate(isa, p);
  if (p.n_queries == 0) return;
  if (path == AttentionPath::automatic || p.observe != nullptr) path = choose_attention_path(p, p.paths);
  const size_t work = p.n_heads * p.n_queries * p.n_keys() * p.head_dim;
  const int threads = work < kAttentionOneThreadBelowMacs ? 1 : resolve_threads(n_threads);
  if (path == AttentionPath::unfused) {
    attention_unfused(isa, p, ws.impl(), threads);
    return;
  }
  const AttentionKernels& kernels = select_kernel(attention_kernels(), isa).kernels;
  if (kernels.reference) {  // the reference slot runs the spec itself
    kernels.reference(p);
    return;
  }
  if (p.n_queries == 1)
    fused_decode(kernels, p, ws.impl(), threads);
  else
    fused_prefill(kernels, p, ws.impl(), threads);
}

}  // namespace sqrtdk::ops
