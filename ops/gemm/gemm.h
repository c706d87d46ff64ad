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

// Weight element types. The activations (src, dst) are f32 for all three; what differs is how weights are stored
// and multiplied:
//   f32   the products in f32 (FMA), as everywhere above.
//   bf16  bfloat16 weights (the top half of an f32). avx512_bf16: src rows are rounded to bf16 (round to nearest
//         even, per row at call time) and pairs of products summed in f32 by vdpbf16ps (2x the f32 FMA rate);
//         other ISAs widen the weights to f32 inside the microkernel (no f32 copy of the weights in memory) and
//         keep src in f32. Error bound: K·ε·Σ|a·w| plus, on avx512_bf16, 2^-8·Σ|a·w| for the rounded src.
//   q8    int8 weights in blocks of 32 along K, each block with a scale (GGUF's Q8_0 block: an f16 scale and 32
//         int8), w = scale·q. Each src row is quantized at call time to int8 with one scale per row (dynamic
//         per-token: scale = max|a|/127, q = round-to-nearest-even(a·127/max|a|)); each block's products are summed
//         exactly in int32 (avx512_vnni: vpdpbusd; avx2: vpmaddubsw/vpmaddwd), scaled by the block's weight scale
//         and summed in f32 in block order, then times the row's scale. The quantization of src is part of the
//         spec (gemm_q8_ref), so every ISA computes the same integers. K must be a multiple of 32.
// Every bf16/q8 kernel sums each element in one order whatever M: RowOrder does not change them.
//
// Which bf16 kernel pays depends on the core, not on the ISA level: vdpbf16ps does twice an FMA's multiply-adds
// per instruction, but on the Xeon (Emerald Rapids class) it issues at a quarter of the FMA rate (half the FLOPs;
// tests and bench-machine measure it), where the widening kernel runs at the f32 rate. bf16_weights_isa(isa) is
// the ISA to pack bf16 weights for: isa itself when the CPU's measured vdpbf16ps rate beats its FMA rate by 25%,
// else avx512_vnni (whose bf16 kernel is avx512's widening one). Measured once per process (~5 ms, one thread;
// the two rates differ 2x or more on every CPU seen, so noise does not flip it); SQRTDK_BF16_KERNEL=dot|widen
// decides instead. SQRTDK_VERBOSE prints the rates and the choice.
Isa bf16_weights_isa(Isa isa);
enum class WeightType : uint8_t { f32, bf16, q8 };
const char* weight_type_name(WeightType type);  // "f32", "bf16", "q8"

inline constexpr size_t kQ8BlockSize = 32;
// GGUF's block_q8_0, byte for byte: what .sqdk stores for a q8 tensor (engine/FORMAT.md).
struct Q8Block {
  uint16_t scale_f16;  // IEEE half
  int8_t q[kQ8BlockSize];
};
static_assert(sizeof(Q8Block) == 34, "Q8Block must be GGUF's 34-byte block_q8_0");

// Quantizes one row x[0, K) (K a multiple of 32) to K/32 blocks: per block d = max|x|/127 rounded to f16, then
// q = round-to-nearest-even(x/d) clamped to [-127, 127] (computed with the f16-rounded d, so scale·q is the
// nearest the block can store). NaN or Inf in x is an error (sqrtdk::Error naming the column).
void quantize_row_q8(const float* x, size_t K, Q8Block* out);
// w[0, K) = scale·q of the row's K/32 blocks.
void dequantize_row_q8(const Q8Block* blocks, size_t K, float* out);

// Weights [N, K] packed once at load for one ISA; immutable afterwards, movable.
//   f32, avx2/avx512: ceil(N/NR) panels of [K][NR] floats (K-major, 64-byte aligned, N zero-padded).
//   f32, ref: a plain copy [N][K] (panels of width 1).
//   bf16 and q8: the layout of the type's kernel for the ISA (ops/gemm/gemm_typed_kernels.h).
class PackedWeights {
 public:
  // rows_consumed(n0, n1), if given, is called as soon as weight rows [n0, n1) have been read, so a loader can
  // drop their file pages while the rest is still being packed (peak memory: packed + one chunk, not packed + all).
  static PackedWeights pack(const float* weights, size_t N, size_t K, size_t ld_weights, Isa isa,
                            const std::function<void(size_t n0, size_t n1)>& rows_consumed = {});
  // bf16 weights [N, K] (row stride ld_weights elements), kept bf16.
  static PackedWeights pack_bf16(const uint16_t* weights, size_t N, size_t K, size_t ld_weights, Isa isa,
                                 const std::function<void(size_t n0, size_t n1)>& rows_consumed = {});
  // q8 weights [N, K]: N rows of K/32 blocks, row stride ld_blocks ≥ K/32 blocks. K must be a multiple of 32.
  static PackedWeights pack_q8(const Q8Block* weights, size_t N, size_t K, size_t ld_blocks, Isa isa,
                               const std::function<void(size_t n0, size_t n1)>& rows_consumed = {});
  PackedWeights();
  PackedWeights(PackedWeights&&) noexcept;
  PackedWeights& operator=(PackedWeights&&) noexcept;
  ~PackedWeights();

  size_t N() const;
  size_t K() const;
  Isa isa() const;
  WeightType type() const;
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

// The specs of the bf16 and q8 products over unpacked weights (the weights' exact values; double accumulation;
// q8 with src quantized as described at WeightType).
void gemm_bf16_ref(const float* src, size_t M, size_t lda, const uint16_t* weights, size_t N, size_t K,
                   size_t ld_weights, float* dst, size_t ldc, const GemmEpilogue& epilogue = {});
void gemm_q8_ref(const float* src, size_t M, size_t lda, const Q8Block* weights, size_t N, size_t K,
                 size_t ld_blocks, float* dst, size_t ldc, const GemmEpilogue& epilogue = {});
// The per-row quantization of src every q8 kernel uses: q[0, K) and the row's scale (0 for an all-zero row).
void quantize_src_row_q8(const float* a, size_t K, int8_t* q, float* scale);

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
