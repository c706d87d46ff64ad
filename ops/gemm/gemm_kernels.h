// Internal interface between the GEMM driver (gemm.cpp, baseline ISA) and the per-ISA kernels
// (gemm_avx2.cpp, gemm_avx512.cpp, both instantiating gemm_simd.h; gemm_ref.cpp, the spec), and GEMM's kernel
// table, which dispatch, tests and benchmarks iterate.
#pragma once

#include "ops/base/kernel_table.h"
#include "ops/gemm/gemm.h"

#include <cstddef>
#include <span>
#include <vector>

namespace sqrtdk::ops::gemm_detail {

// Block sizes of one ISA's kernel. f32: the tile is the kernel's, kc/mc/nc come from the machine's caches
// (gemm_blocking.h); bf16/q8: constants, each with where it was measured (see the per-ISA .cpp).
struct BlockSizes {
  size_t mr;  // microkernel rows
  size_t nr;  // microkernel columns = packed panel width
  size_t kc;  // K slice: the kc×nr B micro-panel, reused by every row tile (avx512: in L2; avx2: in L1)
  size_t mc;  // rows of A per block (a multiple of mr): an mc×kc slice of A sits in L2
  size_t nc;  // columns per block (a multiple of nr): the mc×nc partial sums stay in L2 across K slices
};

// One call, as the kernels see it. Epilogue pointers are indexed by global (m, n).
struct GemmCall {
  const float* src;    // [M, K], row stride lda
  size_t lda;
  size_t M, N, K;
  const float* panels;  // ceil(N/nr) panels of [K][nr]
  float* dst;           // [M, N], row stride ldc
  size_t ldc;
  float alpha;          // v = alpha·(src·Bᵀ) before the epilogue
  const float* bias;
  Activation activation;
  const float* multiply;
  size_t ld_multiply;
  const float* residual;
  size_t ld_residual;
  // Origins of multiply/residual when they were copied out of dst's way: element (m, n) is at
  // [(m - origin_m)·ld + (n - origin_n)]. Zero otherwise.
  size_t multiply_m0, multiply_n0, residual_m0, residual_n0;
  bool row_invariant = false;  // RowOrder::invariant: M = 1 takes the blocked kernel too (gemm.h)
  // The f32 kernels' block sizes for this call (run_blocked sets it: the table's, or a sweep's). The bf16/q8
  // kernels use their own constants.
  const BlockSizes* blocks = nullptr;
  // f32 blocked path: the first panel of the item this participant will most likely run next (null: none known).
  // The region prefetches its first K slice while computing its own last panel, as it does between its own panels.
  const float* next_item_panel = nullptr;
};

// The K slice the blocked path uses for this M: the whole K when one row block covers M (small M streams
// each panel once, linearly), else kc. Partial sums go through dst only when it is < K.
inline size_t k_slice(const BlockSizes& bs, size_t M, size_t K) { return M <= bs.mr ? K : bs.kc; }

// One ISA's kernels and their block sizes (data, from the ISA's TU, where each was measured). Kernels never
// allocate or throw.
//   region: computes dst rows [m0, m1) × columns [n0, n1) of the call (n0 a multiple of nr, m0 a multiple of mr,
//           so the tile grid is the same for any split into work items); src rows are read in place. SIMD: M == 1
//           takes the streaming decode kernel (k-interleaved accumulators), else the blocked path.
//   pack:   writes panels [n0/nr, ceil(n1/nr)) of B (layout nk: [N, K]; kn: [K, N]) into `panels` (the full
//           ceil(N/nr)·K·nr array), zero-padding columns ≥ N.
//   direct: C[:, n0:n1] = alpha·A·op(B) for small M without packing.
// The reference entry (Isa::ref, gemm_ref.cpp) is the spec in this shape: block sizes all 1 (its panels, of width
// 1, are the plain [N][K] copy), each element a double sum over k then the epilogue, as gemm_ref.
struct GemmKernels {
  BlockSizes bs;
  void (*region)(const GemmCall& call, size_t m0, size_t m1, size_t n0, size_t n1);
  void (*pack)(const float* b, size_t ldb, bool b_is_kn, size_t N, size_t K, size_t n0, size_t n1, float* panels);
  void (*direct)(size_t M, size_t N, size_t K, float alpha, const float* A, size_t lda, const float* B, size_t ldb,
                 bool b_is_kn, float* C, size_t ldc, size_t n0, size_t n1);
};

// Best ISA first, the reference last (kernel_table.h).
std::span<const KernelEntry<GemmKernels>> gemm_kernels();

// The work items gemm() cuts a call into (gemm.cpp, item_grid), in item order (the caller claims from the first,
// helpers from the last): dst rows [m0, m1) × columns [n0, n1). For the tests of the split.
struct WorkItem {
  size_t m0, m1, n0, n1;
};
std::vector<WorkItem> work_items(size_t M, size_t N, size_t K, const BlockSizes& bs);

// gemm() with f32 weights and these block sizes instead of the table's (same tile: bs.mr/nr must be the weights'
// ISA's): for bench-gemm --sweep and the blocking tests. No epilogue.
void gemm_with_block_sizes(const BlockSizes& bs, const float* src, size_t M, size_t lda, const PackedWeights& weights,
                           float* dst, size_t ldc, int n_threads);

BlockSizes gemm_tile_avx512();  // mr, nr (kc, mc, nc: gemm_blocking.h)
void gemm_region_avx512(const GemmCall& call, size_t m0, size_t m1, size_t n0, size_t n1);
void pack_panels_avx512(const float* b, size_t ldb, bool b_is_kn, size_t N, size_t K, size_t n0, size_t n1,
                        float* panels);
void gemm_direct_avx512(size_t M, size_t N, size_t K, float alpha, const float* A, size_t lda, const float* B,
                        size_t ldb, bool b_is_kn, float* C, size_t ldc, size_t n0, size_t n1);
BlockSizes gemm_tile_avx2();
void gemm_region_avx2(const GemmCall& call, size_t m0, size_t m1, size_t n0, size_t n1);
void pack_panels_avx2(const float* b, size_t ldb, bool b_is_kn, size_t N, size_t K, size_t n0, size_t n1,
                      float* panels);
void gemm_direct_avx2(size_t M, size_t N, size_t K, float alpha, const float* A, size_t lda, const float* B,
                      size_t ldb, bool b_is_kn, float* C, size_t ldc, size_t n0, size_t n1);
// The reference epilogue of element (m, n) whose sum (in double, before alpha) is acc: shared by the typed refs.
float epilogue_ref_at(double acc, const GemmCall& call, size_t m, size_t n);
void gemm_region_ref(const GemmCall& call, size_t m0, size_t m1, size_t n0, size_t n1);
void pack_panels_ref(const float* b, size_t ldb, bool b_is_kn, size_t N, size_t K, size_t n0, size_t n1,
                     float* panels);
void gemm_direct_ref(size_t M, size_t N, size_t K, float alpha, const float* A, size_t lda, const float* B,
                     size_t ldb, bool b_is_kn, float* C, size_t ldc, size_t n0, size_t n1);

}  // namespace sqrtdk::ops::gemm_detail
