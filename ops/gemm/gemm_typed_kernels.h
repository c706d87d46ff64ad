// Internal interface of the bf16 and q8 GEMMs (gemm.h, WeightType): the driver (gemm.cpp) prepares src once per
// call (bf16: rows rounded to bf16; q8: rows quantized to int8 with a scale each), then runs the kernel's region
// over the same item grid and threads as the f32 GEMM. Tables, best ISA first, the reference last
// (kernel_table.h), defined in gemm_bf16.cpp and gemm_q8.cpp; kernels in gemm_{bf16,q8}_<isa>.cpp.
#pragma once

#include "ops/base/kernel_table.h"
#include "ops/gemm/gemm.h"
#include "ops/gemm/gemm_kernels.h"

#include <cstddef>
#include <cstdint>
#include <span>

namespace sqrtdk::ops::gemm_detail {

// One bf16/q8 call as a kernel sees it: the f32 call (src, lda, M, N, K, dst, ldc, epilogue, as GemmCall; panels
// unused) plus the prepared src and the typed panels.
struct TypedGemmCall : GemmCall {
  const uint8_t* src_prepared = nullptr;  // M rows of src_row_bytes (kernel-defined: bf16 pairs, int8, ...); null
                                          // when the kernel reads the f32 src in place
  size_t src_row_bytes = 0;
  const float* src_scales = nullptr;      // q8: [M] per-row scales of the quantized src
  const uint8_t* typed_panels = nullptr;  // ceil(N/nr) panels of panel_bytes each, 64-byte aligned
  size_t panel_bytes = 0;
};

// One ISA's kernels for weights of element type W (uint16_t: bf16; Q8Block: q8). Kernels never allocate or throw.
//   bs:            block sizes (kc a multiple of 32 for q8, of 2 for bf16; mr/nr the tile).
//   panel_bytes:   bytes of one packed panel of nr columns for this K (a multiple of 64).
//   src_row_bytes: bytes of one prepared src row (0: the kernel reads the f32 src in place; no prepare).
//   prepare_src:   prepares rows [m0, m1) of src into out (row m at out + m·src_row_bytes) and, for q8, scales[m].
//                  q8 kernels must produce exactly quantize_src_row_q8's integers (offset as the kernel needs).
//   region:        dst rows [m0, m1) × columns [n0, n1) (m0 a multiple of mr, n0 of nr), epilogue included.
//                  Each element summed in one order whatever M (no split decode accumulators).
//   pack:          panels [n0/nr, ceil(n1/nr)) from weights [N, K] (row stride ld: elements for bf16, blocks for
//                  q8), zero-padding columns ≥ N.
template <class W>
struct TypedGemmKernels {
  BlockSizes bs;
  size_t (*panel_bytes)(size_t K);
  size_t (*src_row_bytes)(size_t K);
  void (*prepare_src)(const float* src, size_t lda, size_t m0, size_t m1, size_t K, uint8_t* out, float* scales);
  void (*region)(const TypedGemmCall& call, size_t m0, size_t m1, size_t n0, size_t n1);
  void (*pack)(const W* weights, size_t ld, size_t N, size_t K, size_t n0, size_t n1, uint8_t* panels);
};
using Bf16Kernels = TypedGemmKernels<uint16_t>;
using Q8Kernels = TypedGemmKernels<Q8Block>;

std::span<const KernelEntry<Bf16Kernels>> gemm_bf16_kernels();
std::span<const KernelEntry<Q8Kernels>> gemm_q8_kernels();

// The reference entries (gemm_bf16.cpp, gemm_q8.cpp): panels of width 1 = the weights as given, row by row.
extern const Bf16Kernels kBf16KernelsRef;
extern const Q8Kernels kQ8KernelsRef;
// The q8 SIMD entries (gemm_q8_avx512vnni.cpp: vpdpbusd, 3 × 64 tiles; gemm_q8_avx2.cpp: vpmaddubsw/vpmaddwd,
// 3 × 24 tiles). Their prepared src rows begin with quantize_src_row_q8's K int8, as the reference's.
extern const Q8Kernels kQ8KernelsAvx512Vnni;
extern const Q8Kernels kQ8KernelsAvx2;

// The bf16 SIMD entries (gemm_bf16_simd.h): vdpbf16ps on avx512_bf16; weights widened to f32 on avx512 and avx2.
extern const Bf16Kernels kBf16KernelsAvx512Bf16;  // gemm_bf16_avx512bf16.cpp
extern const Bf16Kernels kBf16KernelsAvx512;      // gemm_bf16_avx512.cpp
extern const Bf16Kernels kBf16KernelsAvx2;        // gemm_bf16_avx2.cpp

}  // namespace sqrtdk::ops::gemm_detail
