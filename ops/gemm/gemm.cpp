// GEMM driver (baseline ISA): argument checks, weight packing, the thread split and dispatch through the kernel
// table (defined here: gemm_avx512.cpp, gemm_avx2.cpp, gemm_ref.cpp), and gemm_unpacked for attention.
//
// Threads: the output is cut into items, a grid of blocks whose borders fall on the kernel's tile grid (multiples
// of mr rows and nr columns) and depend on the shape only, so every element is computed by the same kernel in the
// same K order for any thread count and any schedule: results are bit-identical. M ≤ 16 (decode, small batch)
// cuts N only, so each panel of weights is streamed once. Participants claim items as they come (thread_pool.h).
// Scratch: thread_local buffers (copies of epilogue operands that alias dst) that grow on first use
// and are then reused: no allocation in the hot path once warm. Pool helpers keep them across calls.
#include "ops/gemm/gemm.h"

#include "ops/base/aligned_buffer.h"
#include "ops/base/threading.h"
#include "ops/gemm/gemm_blocking.h"
#include "ops/gemm/gemm_kernels.h"
#include "ops/gemm/gemm_typed_kernels.h"

#include <sqrtdk/error.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

namespace sqrtdk::ops {

using gemm_detail::BlockSizes;
using gemm_detail::GemmCall;

const char* weight_type_name(WeightType type) {
  switch (type) {
    case WeightType::f32: return "f32";
    case WeightType::bf16: return "bf16";
    case WeightType::q8: return "q8";
  }
  return "unknown";
}

const char* activation_name(Activation activation) {
  switch (activation) {
    case Activation::none: return "none";
    case Activation::gelu_tanh: return "gelu_tanh";
    case Activation::silu: return "silu";
  }
  return "unknown";
}

namespace {

using gemm_detail::GemmKernels;

const GemmKernels& kernels_for(Isa isa) { return select_kernel(gemm_detail::gemm_kernels(), isa).kernels; }

void check_isa(const char* where, Isa isa) {
  if (!cpu_supports(isa))
    throw Error(ErrorKind::unsupported, std::string(where) + ": this CPU does not support ISA " + isa_name(isa));
}

std::string dims(size_t a, size_t b) {
  std::string s = "[";
  s.append(std::to_string(a)).append(", ").append(std::to_string(b)).append("]");
  return s;
}

// Whether the address ranges of matrices a [a_rows, a_cols] (stride lda) and b [b_rows, b_cols] (stride ldb)
// overlap (conservative: compares first-to-last element spans).
bool overlaps(const float* a, size_t lda, size_t a_rows, size_t a_cols, const float* b, size_t ldb, size_t b_rows,
              size_t b_cols) {
  if (a == nullptr || b == nullptr || a_rows == 0 || a_cols == 0 || b_rows == 0 || b_cols == 0) return false;
  const auto a0 = reinterpret_cast<uintptr_t>(a), b0 = reinterpret_cast<uintptr_t>(b);
  const uintptr_t a1 = a0 + ((a_rows - 1) * lda + a_cols) * sizeof(float);
  const uintptr_t b1 = b0 + ((b_rows - 1) * ldb + b_cols) * sizeof(float);
  return a0 < b1 && b0 < a1;
}

// Whether matrices a and b [rows, cols] (strides lda, ldb ≥ cols) share an element. Exact when the strides are
// equal and the pointers a whole number of floats apart (b's rows then fall on a's row grid, each cut at most once
// by a row end); otherwise conservative (the spans intersect).
bool shares_elements(const float* a, size_t lda, const float* b, size_t ldb, size_t rows, size_t cols) {
  if (!overlaps(a, lda, rows, cols, b, ldb, rows, cols)) return false;
  if (lda != ldb) return true;
  auto a0 = reinterpret_cast<uintptr_t>(a), b0 = reinterpret_cast<uintptr_t>(b);
  if (b0 < a0) std::swap(a0, b0);
  if ((b0 - a0) % sizeof(float) != 0) return true;
  const size_t d = (b0 - a0) / sizeof(float), q = d / lda, r = d % lda;
  // b's element (i, j) is a's (q + i, r + j) while r + j < ld, else a's (q + i + 1, r + j − ld).
  if (q < rows && r < cols) return true;  // the unwrapped part meets a's columns [0, cols) from row q
  return r + cols > lda && q + 1 < rows;  // the wrapped part: columns [0, r + cols − ld) from row q + 1
}

void grow(AlignedBuffer<float>& buffer, size_t count) {
  if (buffer.size() < count) buffer.allocate(count);
}
void grow_bytes(AlignedBuffer<uint8_t>& buffer, size_t count) {
  if (buffer.size() < count) buffer.allocate(count);
}

// Below this many multiply-adds a call runs on one thread (an estimate, not tuned): a job costs the caller ~0.2 us
// of publishing and claiming, plus a futex wake (a few us) when the helper sleeps; 2^15 MACs take ~1 us at one
// core's peak (as decode, 128 KiB of weights: ~3 us from L2). The bundled model's smallest decode GEMMs (N = 128,
// K = 256) sit exactly at it and stay parallel.
constexpr size_t kParallelMinMacs = size_t{1} << 15;
// Work items: a decode / small-batch item streams at least this many MACs' worth of weights (whole panels: 64 KiB
// in decode, ~1–3 us), so claiming one (an atomic CAS, ~50 ns) costs a few percent at most.
constexpr size_t kMinItemMacs = size_t{1} << 14;
// M > kSmallM is cut into a 2D grid of items aiming at this many items (more than threads, so the participants
// balance by claiming: a late or descheduled helper's share goes to the others).
constexpr size_t kSmallM = 16;
constexpr size_t kTargetItems = 16;

// The items of one call: a grid of row blocks × column blocks on the kernel's tile grid (multiples of mr rows and
// nr columns), so every element is computed by the same kernel in the same K order whichever item holds it. The
// grid depends on the shape and the ISA's block sizes only, never on the thread count.
//
// Blocks are split evenly (split_range: sizes differ by at most one tile or panel), and the column block count is
// chosen so that every column block has the same width and the item count is even where a count near the target
// allows it: the participants claim from both ends (thread_pool.h), so a job ends when their claims meet, and one
// thread idles for as long as the other's last item runs past that point. With items of equal size and an even
// count, two threads that start together finish together. Before: the 134M Llama's QKV at T = 128 (N = 2304, 36
// panels) was cut into column blocks of 5 panels, the last of 1 (16 items: 14 of 5 units and 2 of 1), so one thread
// ran 37 units where 36 were its share, and that GEMM scaled 1.83x from one thread to two where the others did
// 1.87–1.93 (Zen 5, 2026-12-06); now 9 blocks of 4 panels (18 items).
struct ItemGrid {
  size_t n_mb, n_nb;  // row blocks, column blocks
  size_t granule_m, granule_n;  // rows and columns are split in whole tiles (mr) and panels (nr)
  size_t count() const { return n_mb * n_nb; }
  // Item order is column-block-major: item = column block × n_mb + row block.
  size_t column_block(size_t item) const { return item / n_mb; }
  Range rows(size_t M, size_t item) const { return split_range(M, n_mb, item % n_mb, granule_m); }
  Range cols(size_t N, size_t item) const { return split_range(N, n_nb, column_block(item), granule_n); }
};

size_t ceil_div(size_t a, size_t b) { return (a + b - 1) / b; }
size_t round_up(size_t a, size_t b) { return ceil_div(a, b) * b; }

// The column block count for n_panels panels near n_panels / target_panels, each block between min_panels and
// max_panels wide: equal widths first, then an even item count (n_mb × count), then the nearest to the target.
size_t column_blocks(size_t n_panels, size_t n_mb, size_t target_panels, size_t min_panels, size_t max_panels) {
  const size_t target = ceil_div(n_panels, target_panels);
  const size_t lo = std::max({size_t{1}, ceil_div(n_panels, max_panels), target * 2 / 3});
  const size_t hi = std::max(lo, std::min({n_panels / std::max<size_t>(1, min_panels), target * 3 / 2, n_panels}));
  size_t best = lo;
  double best_score = 1e30;
  for (size_t n_nb = lo; n_nb <= hi; ++n_nb) {
    const bool equal = n_panels % n_nb == 0, even = (n_mb * n_nb) % 2 == 0;
    const double distance = std::abs(std::log(static_cast<double>(n_nb) / static_cast<double>(target)));
    const double score = (equal ? 0.0 : 4.0) + (even ? 0.0 : 2.0) + distance;
    if (score < best_score) best_score = score, best = n_nb;
  }
  return best;
}

ItemGrid item_grid(size_t M, size_t N, size_t K, const BlockSizes& bs) {
  ItemGrid g{};
  g.granule_m = bs.mr;
  g.granule_n = bs.nr;
  const size_t n_panels = ceil_div(N, bs.nr);
  if (M <= kSmallM) {
    // Decode and small batches: columns only (every item all M rows), whole panels, each panel streamed once.
    g.n_mb = 1;
    g.n_nb = ceil_div(n_panels, ceil_div(std::max<size_t>(1, kMinItemMacs / (M * K)), bs.nr));
  } else {
    // Row blocks of at most mc rows (mc × kc of A stays in L2); then column blocks of at most nc (the block's
    // partial sums stay in L2 across K slices), narrower until there are about kTargetItems.
    const size_t mc = std::max(bs.mc, kSmallM);  // the reference's block sizes are all 1
    g.n_mb = ceil_div(M, mc);
    const size_t rows_per = round_up(ceil_div(M, g.n_mb), bs.mr);
    const size_t max_panels = std::max<size_t>(1, bs.nc / bs.nr);
    const size_t min_panels = ceil_div(kMinItemMacs, rows_per * K * bs.nr);
    const size_t target_panels =
        std::max(std::clamp<size_t>(ceil_div(n_panels * g.n_mb, kTargetItems), 1, max_panels), min_panels);
    g.n_nb = column_blocks(n_panels, g.n_mb, target_panels, min_panels, max_panels);
  }
  return g;
}

// The blocked/decode kernels over the call's items, on up to n_threads participants, with block sizes bs (the
// kernel's, or a sweep's: the f32 kernels read them from the call). Kern: GemmKernels or a TypedGemmKernels; Call:
// GemmCall or TypedGemmCall (the kernel's region takes it).
template <class Kern, class Call>
void run_blocked(const Kern& kern, Call call, int n_threads, const BlockSizes& bs) {
  call.blocks = &bs;
  const int threads = call.M * call.N * call.K < kParallelMinMacs ? 1 : resolve_threads(n_threads);
  const ItemGrid grid = item_grid(call.M, call.N, call.K, bs);
  const size_t k_block = std::min(gemm_detail::k_slice(bs, call.M, call.K), call.K);
  // gemm() admits one kind of sharing between an epilogue operand and dst: the operand IS dst (same stride). With
  // one K slice each element is read before it is written; with several, dst holds partial sums first, so the
  // operand is copied per item before the kernel runs. Each item copies exactly the elements it writes, so no
  // participant reads what another writes (a partial overlap would break that: gemm() rejects it).
  const bool sliced = k_block < call.K;
  const bool copy_multiply = sliced && call.multiply == call.dst;
  const bool copy_residual = sliced && call.residual == call.dst;

  // Column-block-major: consecutive items share a column block of the weights. The caller claims from the first
  // item and the helpers from the last (thread_pool.h), so each participant reads its own end of the weights, the
  // same end call after call, and reuses a column block from its own L2 across the block's rows. Measured against a
  // shared front-to-back counter (where the two threads read the same block at once), Zen 5, 2 threads, 2026-12-02,
  // interleaved: prefill 6 of 6 runs faster at T = 32 and 128 (+4% / +7% median), decode 4 of 4 (+13%).
  parallel_for(threads, grid.count(), [&](size_t item, int worker) {
    static thread_local AlignedBuffer<float> multiply_copy, residual_copy;
    const Range mr = grid.rows(call.M, item);
    const Range nr = grid.cols(call.N, item);
    Call local = call;
    const size_t rows_t = mr.end - mr.begin, cols_t = nr.end - nr.begin;
    auto copy_region = [&](AlignedBuffer<float>& buf, const float* p, size_t ld, const float*& out_p,
                           size_t& out_ld, size_t& out_m0, size_t& out_n0) {
      grow(buf, rows_t * cols_t);
      for (size_t i = 0; i < rows_t; ++i)
        std::memcpy(buf.data() + i * cols_t, p + (mr.begin + i) * ld + nr.begin, cols_t * sizeof(float));
      out_p = buf.data();
      out_ld = cols_t;
      out_m0 = mr.begin;
      out_n0 = nr.begin;
    };
    if (copy_multiply)
      copy_region(multiply_copy, call.multiply, call.ld_multiply, local.multiply, local.ld_multiply,
                  local.multiply_m0, local.multiply_n0);
    if (copy_residual)
      copy_region(residual_copy, call.residual, call.ld_residual, local.residual, local.ld_residual,
                  local.residual_m0, local.residual_n0);
    // The item this participant most likely claims next: the caller claims upward, the helpers downward
    // (thread_pool.h). Its weights are prefetched while this item's last panel is computed; without it each item's
    // first panel came cold from DRAM with nothing to hide the misses (at T = 32 an item is 1–3 panels).
    const size_t next_item = worker == 0 ? item + 1 : item - 1;  // item 0's helper: wraps past count, no prefetch
    if (next_item < grid.count() && grid.column_block(next_item) != grid.column_block(item) && call.panels != nullptr)
      local.next_item_panel = call.panels + grid.cols(call.N, next_item).begin * call.K;
    // No barrier between the copies and the kernels: an item's copy reads only the elements that item writes.
    kern.region(local, mr.begin, mr.end, nr.begin, nr.end);
  });
}

}  // namespace

namespace {

// The tile of an ISA's kernel with kc, mc, nc from this machine's caches (or SQRTDK_GEMM_BLOCKING), printed once
// under SQRTDK_VERBOSE.
BlockSizes machine_blocking(const char* kernel, BlockSizes tile) {
  std::string why;
  const BlockSizes bs = gemm_detail::machine_block_sizes(tile.mr, tile.nr, &why);
  if (verbose())
    std::fprintf(stderr, "sqrtdk: %s blocking kc %zu, mc %zu, nc %zu (%s)\n", kernel, bs.kc, bs.mc, bs.nc,
                 why.c_str());
  return bs;
}

}  // namespace

std::span<const KernelEntry<GemmKernels>> gemm_detail::gemm_kernels() {
  // Filled on first use (thread-safe), then read-only: the tiles come from each ISA's TU, the block sizes from
  // this machine's caches.
  static const KernelEntry<GemmKernels> table[] = {
      {Isa::avx512, "gemm_ukernel_6x64_avx512",
       {machine_blocking("gemm_ukernel_6x64_avx512", gemm_detail::gemm_tile_avx512()), gemm_detail::gemm_region_avx512,
        gemm_detail::pack_panels_avx512, gemm_detail::gemm_direct_avx512}},
      {Isa::avx2, "gemm_ukernel_4x24_avx2",
       {machine_blocking("gemm_ukernel_4x24_avx2", gemm_detail::gemm_tile_avx2()), gemm_detail::gemm_region_avx2,
        gemm_detail::pack_panels_avx2, gemm_detail::gemm_direct_avx2}},
      {Isa::ref, "gemm_ref_f64",
       {{1, 1, 1, 1, 1}, gemm_detail::gemm_region_ref, gemm_detail::pack_panels_ref, gemm_detail::gemm_direct_ref}},
  };
  return table;
}

std::vector<gemm_detail::WorkItem> gemm_detail::work_items(size_t M, size_t N, size_t K, const BlockSizes& bs) {
  const ItemGrid grid = item_grid(M, N, K, bs);
  std::vector<WorkItem> items;
  for (size_t item = 0; item < grid.count(); ++item) {
    const Range mr = grid.rows(M, item), nr = grid.cols(N, item);
    items.push_back({mr.begin, mr.end, nr.begin, nr.end});
  }
  return items;
}

GemmBlocking gemm_blocking(Isa isa) {
  const BlockSizes bs = kernels_for(isa).bs;
  return {bs.mr, bs.nr, bs.kc, bs.mc, bs.nc};
}

// ---------------------------------------------------------------------------------------------------------------
// PackedWeights

struct PackedWeights::Impl {
  size_t N = 0, K = 0, nr = 0;
  Isa isa = Isa::ref;
  WeightType type = WeightType::f32;
  AlignedBuffer<float> data;     // f32: panels (SIMD) or a [N][K] copy (ref)
  AlignedBuffer<uint8_t> typed;  // bf16/q8: ceil(N/nr) panels of panel_bytes
  size_t panel_bytes = 0;
};

PackedWeights::PackedWeights() = default;
PackedWeights::PackedWeights(PackedWeights&&) noexcept = default;
PackedWeights& PackedWeights::operator=(PackedWeights&&) noexcept = default;
PackedWeights::~PackedWeights() = default;

size_t PackedWeights::N() const { return impl_ ? impl_->N : 0; }
size_t PackedWeights::K() const { return impl_ ? impl_->K : 0; }
Isa PackedWeights::isa() const { return impl_ ? impl_->isa : Isa::ref; }
size_t PackedWeights::nr() const { return impl_ ? impl_->nr : 0; }
WeightType PackedWeights::type() const { return impl_ ? impl_->type : WeightType::f32; }
size_t PackedWeights::bytes() const { return impl_ ? impl_->data.size() * sizeof(float) + impl_->typed.size() : 0; }

PackedWeights PackedWeights::pack(const float* weights, size_t N, size_t K, size_t ld_weights, Isa isa,
                                  const std::function<void(size_t, size_t)>& rows_consumed) {
  const std::string where = "PackedWeights::pack(weights " + dims(N, K) + ", ld_weights " +
                            std::to_string(ld_weights) + ", isa " + isa_name(isa) + ")";
  if (N == 0 || K == 0) throw Error(where + ": N and K must be ≥ 1");
  if (weights == nullptr) throw Error(where + ": weights is null");
  if (ld_weights < K) throw Error(where + ": ld_weights must be ≥ K");
  check_isa(where.c_str(), isa);
  PackedWeights out;
  out.impl_ = std::make_unique<Impl>();
  Impl& p = *out.impl_;
  p.N = N;
  p.K = K;
  p.isa = isa;
  const GemmKernels& kern = kernels_for(isa);
  p.nr = kern.bs.nr;
  const size_t n_panels = (N + p.nr - 1) / p.nr;
  p.data.allocate(n_panels * p.nr * K);
  // In chunks of whole panels (~4 MiB of source), reporting each chunk's rows as consumed.
  const size_t chunk = std::max<size_t>(1, (size_t{4} << 20) / (K * sizeof(float) * p.nr)) * p.nr;
  for (size_t n0 = 0; n0 < N; n0 += chunk) {
    const size_t n1 = std::min(N, n0 + chunk);
    kern.pack(weights, ld_weights, false, N, K, n0, n1, p.data.data());
    if (rows_consumed) rows_consumed(n0, n1);
  }
  return out;
}

namespace {

template <class W>
void pack_typed(PackedWeights::Impl& p, const char* what,
                std::span<const KernelEntry<gemm_detail::TypedGemmKernels<W>>> table, WeightType type,
                const W* weights, size_t N, size_t K, size_t ld, Isa isa,
                const std::function<void(size_t, size_t)>& rows_consumed) {
  const std::string where = std::string("PackedWeights::") + what + "(weights " + dims(N, K) + ", ld " +
                            std::to_string(ld) + ", isa " + isa_name(isa) + ")";
  if (N == 0 || K == 0) throw Error(where + ": N and K must be ≥ 1");
  if (weights == nullptr) throw Error(where + ": weights is null");
  if (type == WeightType::q8 && K % kQ8BlockSize != 0)
    throw Error(where + ": K must be a multiple of " + std::to_string(kQ8BlockSize) + " for q8 weights");
  const size_t row_units = type == WeightType::q8 ? K / kQ8BlockSize : K;
  if (ld < row_units) throw Error(where + ": ld must be ≥ " + std::string(type == WeightType::q8 ? "K/32" : "K"));
  check_isa(where.c_str(), isa);
  const auto& kern = select_kernel(table, isa).kernels;
  p.N = N;
  p.K = K;
  p.isa = isa;
  p.type = type;
  p.nr = kern.bs.nr;
  p.panel_bytes = kern.panel_bytes(K);
  const size_t n_panels = (N + p.nr - 1) / p.nr;
  p.typed.allocate(n_panels * p.panel_bytes);
  // In chunks of whole panels (~4 MiB of packed weights), reporting each chunk's rows as consumed.
  const size_t chunk = std::max<size_t>(1, (size_t{4} << 20) / p.panel_bytes) * p.nr;
  for (size_t n0 = 0; n0 < N; n0 += chunk) {
    const size_t n1 = std::min(N, n0 + chunk);
    kern.pack(weights, ld, N, K, n0, n1, p.typed.data());
    if (rows_consumed) rows_consumed(n0, n1);
  }
}

}  // namespace

PackedWeights PackedWeights::pack_bf16(const uint16_t* weights, size_t N, size_t K, size_t ld_weights, Isa isa,
                                       const std::function<void(size_t, size_t)>& rows_consumed) {
  PackedWeights out;
  out.impl_ = std::make_unique<Impl>();
  pack_typed(*out.impl_, "pack_bf16", gemm_detail::gemm_bf16_kernels(), WeightType::bf16, weights, N, K, ld_weights,
             isa, rows_consumed);
  return out;
}

PackedWeights PackedWeights::pack_q8(const Q8Block* weights, size_t N, size_t K, size_t ld_blocks, Isa isa,
                                     const std::function<void(size_t, size_t)>& rows_consumed) {
  PackedWeights out;
  out.impl_ = std::make_unique<Impl>();
  pack_typed(*out.impl_, "pack_q8", gemm_detail::gemm_q8_kernels(), WeightType::q8, weights, N, K, ld_blocks, isa,
             rows_consumed);
  return out;
}

namespace {

// The bf16/q8 product: src prepared once (rows split over the threads when there are many), then the region
// kernels over the same item grid as f32. The prepared rows live in thread_local buffers that grow once.
template <class W>
void gemm_typed(const gemm_detail::TypedGemmKernels<W>& kern, const PackedWeights::Impl& p, const GemmCall& base,
                int n_threads) {
  static thread_local AlignedBuffer<uint8_t> prepared;
  static thread_local AlignedBuffer<float> scales;
  gemm_detail::TypedGemmCall call;
  static_cast<GemmCall&>(call) = base;
  call.typed_panels = p.typed.data();
  call.panel_bytes = p.panel_bytes;
  const size_t row_bytes = kern.src_row_bytes(base.K);
  if (row_bytes > 0) {
    grow_bytes(prepared, base.M * row_bytes);
    grow(scales, base.M);
    call.src_prepared = prepared.data();
    call.src_row_bytes = row_bytes;
    call.src_scales = scales.data();
    uint8_t* out = prepared.data();
    float* sc = scales.data();
    // Rows in items of ≥ 16 (preparing is ~M·K simple ops against the product's M·N·K).
    const size_t rows_per = 16;
    const int threads = base.M * base.N * base.K < kParallelMinMacs ? 1 : resolve_threads(n_threads);
    parallel_for(base.M > rows_per ? threads : 1, ceil_div(base.M, rows_per), [&](size_t item, int) {
      const Range r = chunk_range(base.M, rows_per, item);
      kern.prepare_src(base.src, base.lda, r.begin, r.end, base.K, out, sc);
    });
  }
  run_blocked(kern, call, n_threads, kern.bs);
}

}  // namespace

// ---------------------------------------------------------------------------------------------------------------
// gemm

void gemm(const float* src, size_t M, size_t lda, const PackedWeights& weights, float* dst, size_t ldc,
          const GemmEpilogue& epilogue, int n_threads, RowOrder row_order) {
  const size_t N = weights.N(), K = weights.K();
  auto where = [&] {
    return "gemm(src " + dims(M, K) + " lda " + std::to_string(lda) + ", weights " + dims(N, K) + " (" +
           isa_name(weights.isa()) + ", " + weight_type_name(weights.type()) + "), dst ldc " +
           std::to_string(ldc) + ")";
  };
  if (N == 0) throw Error(where() + ": weights are empty (not packed)");
  if (M == 0) return;
  if (src == nullptr || dst == nullptr) throw Error(where() + ": src or dst is null");
  if (lda < K) throw Error(where() + ": lda must be ≥ K");
  if (ldc < N) throw Error(where() + ": ldc must be ≥ N");
  if (epilogue.multiply && epilogue.ld_multiply < N) throw Error(where() + ": epilogue.ld_multiply must be ≥ N");
  if (epilogue.residual && epilogue.ld_residual < N) throw Error(where() + ": epilogue.ld_residual must be ≥ N");
  if (overlaps(src, lda, M, K, dst, ldc, M, N)) throw Error(where() + ": src overlaps dst");
  if (overlaps(epilogue.bias, N, 1, N, dst, ldc, M, N)) throw Error(where() + ": epilogue.bias overlaps dst");
  // multiply/residual may be dst itself, nothing else of it (gemm.h, "Aliasing").
  auto check_operand = [&](const char* name, const float* p, size_t ld) {
    if (p == nullptr || (p == dst && ld == ldc) || !shares_elements(p, ld, dst, ldc, M, N)) return;
    throw Error(where() + ": epilogue." + name + " (ld " + std::to_string(ld) + ", " +
                std::to_string(reinterpret_cast<intptr_t>(p) - reinterpret_cast<intptr_t>(dst)) +
                " bytes from dst) partly overlaps dst; it may only be dst itself with the same stride, or share no "
                "element with it");
  };
  check_operand("multiply", epilogue.multiply, epilogue.ld_multiply);
  check_operand("residual", epilogue.residual, epilogue.ld_residual);
  if (n_threads < 0) throw Error(where() + ": n_threads must be ≥ 0");

  const PackedWeights::Impl& p = weights.impl();
  GemmCall call{src, lda, M, N, K, p.data.data(), dst, ldc, 1.0f, epilogue.bias, epilogue.activation,
                epilogue.multiply, epilogue.ld_multiply, epilogue.residual, epilogue.ld_residual, 0, 0, 0, 0};
  call.row_invariant = row_order == RowOrder::invariant;
  switch (p.type) {
    case WeightType::f32: {
      const GemmKernels& kern = kernels_for(p.isa);
      run_blocked(kern, call, n_threads, kern.bs);
      return;
    }
    case WeightType::bf16:
      gemm_typed(select_kernel(gemm_detail::gemm_bf16_kernels(), p.isa).kernels, p, call, n_threads);
      return;
    case WeightType::q8:
      gemm_typed(select_kernel(gemm_detail::gemm_q8_kernels(), p.isa).kernels, p, call, n_threads);
      return;
  }
}

void gemm_detail::gemm_with_block_sizes(const BlockSizes& bs, const float* src, size_t M, size_t lda,
                                        const PackedWeights& weights, float* dst, size_t ldc, int n_threads) {
  const PackedWeights::Impl& p = weights.impl();
  const GemmKernels& kern = kernels_for(p.isa);
  if (p.type != WeightType::f32 || bs.mr != kern.bs.mr || bs.nr != kern.bs.nr || bs.kc == 0 || bs.mc == 0 ||
      bs.nc == 0 || lda < p.K || ldc < p.N || src == nullptr || dst == nullptr)
    throw Error("gemm_with_block_sizes: f32 weights, the weights' tile and nonzero kc/mc/nc expected");
  if (M == 0) return;
  GemmCall call{src, lda, M, p.N, p.K, p.data.data(), dst, ldc, 1.0f, nullptr, Activation::none, nullptr, 0, nullptr,
                0, 0, 0, 0, 0};
  run_blocked(kern, call, n_threads, bs);
}

// ---------------------------------------------------------------------------------------------------------------
// gemm_unpacked

struct GemmWorkspace::Impl {
  AlignedBuffer<float> panels;  // B packed as ceil(N/nr) × [K][nr]
};
GemmWorkspace::GemmWorkspace() : impl_(std::make_unique<Impl>()) {}
GemmWorkspace::GemmWorkspace(GemmWorkspace&&) noexcept = default;
GemmWorkspace& GemmWorkspace::operator=(GemmWorkspace&&) noexcept = default;
GemmWorkspace::~GemmWorkspace() = default;
size_t GemmWorkspace::bytes() const { return impl_ ? impl_->panels.size() * sizeof(float) : 0; }

void gemm_unpacked(Isa isa, size_t M, size_t N, size_t K, float alpha, const float* A, size_t lda, const float* B,
                   size_t ldb, BLayout b_layout, float* C, size_t ldc, GemmWorkspace& ws, int n_threads) {
  const bool kn = b_layout == BLayout::kn;
  auto where = [&] {
    return std::string("gemm_unpacked(") + isa_name(isa) + ", A " + dims(M, K) + " lda " + std::to_string(lda) +
           ", B " + (kn ? dims(K, N) : dims(N, K)) + " ldb " + std::to_string(ldb) + ", C ldc " +
           std::to_string(ldc) + ")";
  };
  check_isa(where().c_str(), isa);
  if (M == 0 || N == 0) return;
  if (A == nullptr && K > 0) throw Error(where() + ": A is null");
  if ((B == nullptr && K > 0) || C == nullptr) throw Error(where() + ": B or C is null");
  if (lda < K) throw Error(where() + ": lda must be ≥ K");
  if (ldb < (kn ? N : K)) throw Error(where() + ": ldb must be ≥ " + (kn ? std::string("N") : std::string("K")));
  if (ldc < N) throw Error(where() + ": ldc must be ≥ N");
  if (n_threads < 0) throw Error(where() + ": n_threads must be ≥ 0");
  if (K == 0) {
    for (size_t m = 0; m < M; ++m) std::fill(C + m * ldc, C + m * ldc + N, 0.0f);
    return;
  }
  if (overlaps(A, lda, M, K, C, ldc, M, N) || (kn ? overlaps(B, ldb, K, N, C, ldc, M, N)
                                                   : overlaps(B, ldb, N, K, C, ldc, M, N)))
    throw Error(where() + ": C overlaps A or B");
  const GemmKernels& kern = kernels_for(isa);
  const int threads = M * N * K < kParallelMinMacs ? 1 : resolve_threads(n_threads);
  if (M <= 4) {
    // Items of 64 columns (the direct kernel's vector blocks stay whole), wider when K is short.
    const size_t cols_per = round_up(std::max<size_t>(1, kMinItemMacs / (M * K)), 64);
    parallel_for(threads, ceil_div(N, cols_per), [&](size_t item, int) {
      const Range r = chunk_range(N, cols_per, item);
      kern.direct(M, N, K, alpha, A, lda, B, ldb, kn, C, ldc, r.begin, r.end);
    });
    return;
  }
  const size_t nr = kern.bs.nr, n_panels = ceil_div(N, nr);
  grow(ws.impl().panels, n_panels * nr * K);
  float* panels = ws.impl().panels.data();
  // Packing: items of whole panels, each written by the item that packs it (then the product, a second job).
  const size_t pack_cols = round_up(std::max<size_t>(1, kMinItemMacs / K), nr);
  parallel_for(threads, ceil_div(N, pack_cols), [&](size_t item, int) {
    const Range r = chunk_range(N, pack_cols, item);
    kern.pack(B, ldb, kn, N, K, r.begin, r.end, panels);
  });
  GemmCall call{A, lda, M, N, K, panels, C, ldc, alpha, nullptr, Activation::none, nullptr, 0, nullptr, 0, 0, 0, 0, 0};
  run_blocked(kern, call, n_threads, kern.bs);
}

}  // namespace sqrtdk::ops
