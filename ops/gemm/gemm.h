// GEMM: dst[M, N] = epilogue(src[M, K] · weightsᵀ) with weights [N, K] (out × in) packed once at load.
//
// Layouts (row-major, strides in elements):
//   src      [M, K], row stride lda ≥ K
//   weights  [N, K], row stride ld_weights ≥ K (what the model file stores: out × in)
//   dst      [M, N], row stride ldc ≥ N
// One implementation: BLIS-style five loops around one register-blocked microkernel per ISA, plus an M = 1 path
// that streams the packed weights once. Isa::ref is the spec: double accumulation over the unpacked weights.
// oneDNN is not linked into the engine: it is a peer in benchmarks and a cross-check in tests only
// (perf/common/onednn_peer.h).
// Accuracy: float accumulation in a fixed order per element; |error| ≲ K·ε·Σ|a·b| (tests use that bound).
// Threading: parallel_for (ops/base/thread_pool.h) with the caller's thread count (0 = resolve_threads default);
// under 2^15 multiply-adds one thread. The output is cut into work items over N (and M, for M > 16), never over K;
// item borders depend on the shape only and the K order per element only on M and the ISA: results are
// bit-identical for any thread count. gemm() is thread-safe on a const PackedWeights. A is not packed (read in
// place); the only scratch, copies of an epilogue operand that is dst itself, lives in thread_local buffers that
// grow once per thread and are reused (no per-call allocation once warm).
#pragma once

#include <sqrtdk/isa.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

namespace sqrtdk::ops {

enum class Activation : uint8_t { none, gelu_tanh, silu };
const char* activation_name(Activation activation);
float gelu_tanh_ref(float x);  // 0.5x(1+tanh(√(2/π)(x+0.044715x³))): GPT-2's form
float silu_ref(float x);       // x·sigmoid(x)

// Fused on the last K slice, applied in this order per output element (m, n):
struct GemmEpilogue {
  const float* bias = nullptr;               // [N]: v += bias[n]
  Activation activation = Activation::none;  // v = act(v)
  const float* multiply = nullptr;           // v *= multiply[m*ld_multiply + n]  (SwiGLU: up-proj · silu(gate))
  size_t ld_multiply = 0;
  const float* residual = nullptr;  // v += residual[m*ld_residual + n]  (the residual stream)
  size_t ld_residual = 0;
};
// Aliasing: multiply or residual may BE dst (same pointer, same stride: the in-place residual add); each element is
// then read before it is written. Any other sharing of elements with dst (a shifted pointer, another stride) is
// rejected by gemm() with sqrtdk::Error: work items write their regions of dst while others still read theirs.
// Operands interleaved with dst in one buffer but sharing no element with it (e.g. other columns) are fine.

// The blocking of an ISA's kernel (tile MR × NR, K slice KC, row block MC, column block NC), e.g. for tests that
// aim at every tile edge. Isa::ref has no tiles: all 1.
struct GemmBlocking {
  size_t mr, nr, kc, mc, nc;
};
GemmBlocking gemm_blocking(Isa isa);

// Weights [N, K] packed once at load for one ISA; immutable afterwards, movable.
//   avx2/avx512: ceil(N/NR) panels of [K][NR] floats (K-major, 64-byte aligned, N zero-padded).
//   ref: a plain copy [N][K] (panels of width 1).
class PackedWeights {
 public:
  // rows_consumed(n0, n1), if given, is called as soon as weight rows [n0, n1) have been read, so a loader can
  // drop their file pages while the rest is still being packed (peak memory: packed + one chunk, not packed + all).
  static PackedWeights pack(const float* weights, size_t N, size_t K, size_t ld_weights, Isa isa,
                            const std::function<void(size_t n0, size_t n1)>& rows_consumed = {});
  PackedWeights();
  PackedWeights(PackedWeights&&) noexcept;
  PackedWeights& operator=(PackedWeights&&) noexcept;
  ~PackedWeights();

  size_t N() const;
  size_t K() const;
  Isa isa() const;
  size_t bytes() const;  // memory held by the packed weights
  size_t nr() const;     // panel width (1 for ref)

  struct Impl;
  const Impl& impl() const { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

// How a row's K sum may depend on the rows beside it.
//   fastest:   M = 1 takes the decode kernel, whose split accumulators add in a different order than the blocked
//              kernel's single chain, so one row alone and the same row in a batch may differ in the last bits.
//   invariant: every row is one FMA chain k = 0..K-1 whatever M (partial sums of K slices go through dst and back
//              exactly), so a row's bits do not depend on M or on its neighbours: continuous batching uses this so a
//              sequence's tokens are the same alone or beside others. Costs nothing for M > 1.
enum class RowOrder : uint8_t { fastest, invariant };

// dst[M, N] (row stride ldc) = epilogue(src[M, K] (row stride lda) · weightsᵀ). n_threads 0 = default.
// Thread-safe: many threads may call gemm() on the same const PackedWeights at once.
// Throws sqrtdk::Error on bad arguments (null pointers, strides below widths, src or bias overlapping dst, multiply
// or residual sharing elements with dst other than by being dst itself: see "Aliasing" above).
void gemm(const float* src, size_t M, size_t lda, const PackedWeights& weights, float* dst, size_t ldc,
          const GemmEpilogue& epilogue = {}, int n_threads = 0, RowOrder row_order = RowOrder::fastest);

// The spec: double accumulation over unpacked weights [N, K].
void gemm_ref(const float* src, size_t M, size_t lda, const float* weights, size_t N, size_t K, size_t ld_weights,
              float* dst, size_t ldc, const GemmEpilogue& epilogue = {});

// For attention's unfused path: C[M, N] = alpha · A[M, K] · op(B), B NOT pre-packed.
//   BLayout::nk: B is [N, K] (row stride ldb), op(B) = Bᵀ  (Q·Kᵀ)
//   BLayout::kn: B is [K, N] (row stride ldb), op(B) = B   (P·V)
// Scratch comes from the caller's workspace: no allocation once it has grown to the largest shape seen.
// M ≤ 4 runs directly on B (dot products / row updates: packing would cost as much as the math); larger M packs B
// into the workspace and runs the blocked kernel. Deterministic for any n_threads (items over N and M).
enum class BLayout { nk, kn };
class GemmWorkspace {
 public:
  GemmWorkspace();
  GemmWorkspace(GemmWorkspace&&) noexcept;
  GemmWorkspace& operator=(GemmWorkspace&&) noexcept;
  ~GemmWorkspace();
  size_t bytes() const;  // scratch held

  struct Impl;
  Impl& impl() { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};
void gemm_unpacked(Isa isa, size_t M, size_t N, size_t K, float alpha, const float* A, size_t lda, const float* B,
                   size_t ldb, BLayout b_layout, float* C, size_t ldc, GemmWorkspace& ws, int n_threads = 1);
// The spec of gemm_unpacked (double accumulation).
void gemm_unpacked_ref(size_t M, size_t N, size_t K, float alpha, const float* A, size_t lda, const float* B,
                       size_t ldb, BLayout b_layout, float* C, size_t ldc);

}  // namespace sqrtdk::ops
