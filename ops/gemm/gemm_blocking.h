// The f32 GEMM's block sizes (kc, mc, nc) from the cache sizes of the machine it runs on, not constants of one CPU.
//
// The loops (gemm_simd.h, gemm_region): ic (mc rows) → jc (nc columns) → pc (kc) → jr (nr) → ir (mr). Three blocks
// share the per-core L2 (BLIS's analytical model, Low et al. 2016, adapted to this loop order, whose reused
// micro-panel is B's and whose A rows are read in place):
//   - the B micro-panel kc × nr, reused by every row tile of the block: in the L1d when it fits there at
//     kc ≥ kMinKc (AVX2's 24 columns), else in a fifth of the L2 (AVX-512's 64 columns need 64 KiB for kc = 256);
//   - the A block mc × kc, reused by every micro-panel of the column block: ≤ 30% of the L2;
//   - the C block mc × nc of partial sums, re-read at every K slice: ≤ 30% of the L2.
// With Zen 5's caches (48 KiB L1d, 1 MiB L2) it gives the block sizes measured best there on 2026-11-30 (avx512
// kc 768 / mc 102 ≈ 96 / nc 768; avx2 kc 512); tests/ops/test_gemm_blocking.cpp pins those cases.
// SQRTDK_GEMM_BLOCKING="kc=…,mc=…,nc=…" (any of the three) overrides the result: for `bench-gemm --sweep` and
// for trying a new machine's best. Read once per process, like SQRTDK_ISA.
#pragma once

#include "ops/base/roofs.h"
#include "ops/gemm/gemm_kernels.h"

#include <cstddef>
#include <string>

namespace sqrtdk::ops::gemm_detail {

inline constexpr size_t kMinKc = 256;   // shorter K slices cost a C-tile reload per slice that shows (~4% at 128)
inline constexpr size_t kMaxKc = 2048;  // beyond, one slice covers every K of the models we run anyway
inline constexpr size_t kAssumedL1d = 32 << 10, kAssumedL2 = 1 << 20;  // when the OS reports no cache sizes

// Block sizes for a tile of mr × nr floats and these caches (zeros: not reported, the assumed sizes above).
BlockSizes derive_block_sizes(size_t mr, size_t nr, const roofs::CacheSizes& caches);

// Applies an override "kc=768,mc=96,nc=768" (any subset, any order) to bs: kc rounded down to a multiple of 16
// (≥ 16), mc to a multiple of bs.mr, nc to a multiple of bs.nr (each at least one tile). Throws sqrtdk::Error naming
// the variable and the text if it does not parse.
BlockSizes apply_blocking_override(BlockSizes bs, const std::string& text);

// derive_block_sizes for this machine's caches (sysfs, else CPUID), then SQRTDK_GEMM_BLOCKING if set; `why` (if
// non-null) receives where the numbers came from, for SQRTDK_VERBOSE.
BlockSizes machine_block_sizes(size_t mr, size_t nr, std::string* why = nullptr);

}  // namespace sqrtdk::ops::gemm_detail
