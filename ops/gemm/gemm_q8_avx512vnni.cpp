// The q8 GEMM on AVX-512 VNNI: vpdpbusd (64 u8 × s8 products summed 4 at a time into 16 int32 lanes).
//
// vpdpbusd multiplies an unsigned operand by a signed one. The weights are the unsigned side, stored offset by 128
// (q_w + 128 in [1, 255]), and src keeps quantize_src_row_q8's signed bytes: Σ(q_w + 128)·q_a = Σq_w·q_a + 128·Σq_a,
// so each row's prepared data carries, per block of 32 k, −128·Σq_a, the int32 accumulator's starting value, and the
// block sum is the exact Σq_w·q_a (|intermediate| ≤ 32·255·127 < 2^31). Putting the correction on the src side keeps
// the packed weights at GGUF's 34 bytes per 32 weights (~1.06 bytes per weight, what decode streams from DRAM); a
// weight-side correction (per block and column) would add 4 bytes per column and block (~1.19 bytes per weight).
// Starting the accumulators from a broadcast costs the same as starting them from a load or from zero.
//
// Packed panel of NR = 64 columns, per block of 32 k (kBlockBytes = 2176 = 34 × 64, so every block is 64-byte
// aligned): u8 [8 groups of 4 k][64 columns][4 k] (one zmm load = 16 columns × 4 k), then the 64 columns' f16
// scales (widened by vcvtph2ps in the kernel: 2 bytes per column instead of 4). Columns ≥ N: q = 0, scale 0.
// Prepared src row (src_row_bytes): the K int8 of quantize_src_row_q8, then K/32 int32 corrections; the row's scale
// in scales[m].
//
// Microkernel 3 × 64: 12 int32 block accumulators + 12 f32 accumulators + 3 broadcasts + 1 weight vector = 28 of
// the 32 zmm. Per group of 4 k: 4 loads and 3 broadcasts feed 12 vpdpbusd (12 independent chains cover its latency
// of 5 at 2 per cycle); per block 12 cvt + 12 fma on top of 96 vpdpbusd, so the block scaling the spec asks for caps
// the kernel at ~80% of the vpdpbusd peak.
// GCC 12's false -Wmaybe-uninitialized inside avx512fintrin.h (GCC bug 105593), as in gemm_avx512.cpp.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include "ops/gemm/gemm_q8_simd.h"
#include "ops/gemm/gemm_simd.h"

#include <immintrin.h>

#include <cstring>

// The fused epilogue is gemm_simd::store_tile for avx512bw with 4 vectors, compiled in gemm_avx512.cpp (AVX-512
// F/BW/DQ/VL only; it is noinline and used there). Declared, not instantiated, here: a copy compiled with
// -mavx512vnni could otherwise be the one the linker keeps for the f32 kernel on CPUs without VNNI.
extern template void sqrtdk::ops::gemm_simd::store_tile<xsimd::avx512bw, 4>(
    const float*, size_t, float*, size_t, size_t, const sqrtdk::ops::gemm_detail::GemmCall*, size_t, size_t);

namespace sqrtdk::ops::gemm_detail {

namespace {

using gemm_q8_simd::kGroups;
constexpr int kMr = 3, kNv = 4;
constexpr size_t kLanes = 16, kNr = kNv * kLanes;
constexpr size_t kWeightBytes = kQ8BlockSize * kNr;             // u8 [8][64][4]
constexpr size_t kBlockBytes = kWeightBytes + 2 * kNr;          // + f16 scales [64]
static_assert(kBlockBytes % 64 == 0, "every block 64-byte aligned");

// Block sizes: not tuned yet (the machine was shared while this was written; see the commit). kc: the kc × 64
// micro-panel (kc/32 · 2176 bytes: 102 KiB at 1536) stays in L2, reused by the mc/3 row tiles, and fewer K slices
// mean fewer partial-sum round trips through dst; mc, nc as the f32 kernel's.
constexpr BlockSizes kBlockSizes{kMr, kNr, 1536, 96, 768};

size_t panel_bytes(size_t K) { return K / kQ8BlockSize * kBlockBytes; }
size_t src_row_bytes(size_t K) { return (K + K / 8 + 63) / 64 * 64; }  // K int8 + K/32 int32, 64-byte rows

__mmask16 lane_mask(size_t n, size_t j) {
  const size_t count = n > j * kLanes ? std::min(kLanes, n - j * kLanes) : 0;
  return static_cast<__mmask16>((1u << count) - 1);
}

// quantize_src_row_q8, 16 floats at a time, the same operations: amax (max ignores a NaN like std::max does here),
// inv = 127/amax, q = RNE(a·inv) clamped to ±127 (clamping before or after rounding gives the same integer); plus
// each block's −128·Σq.
void prepare_src(const float* src, size_t lda, size_t m0, size_t m1, size_t K, uint8_t* out, float* scales) {
  assert(K % kQ8BlockSize == 0);
  const size_t row_bytes = src_row_bytes(K);
  for (size_t m = m0; m < m1; ++m) {
    const float* a = src + m * lda;
    __m512 vmax = _mm512_setzero_ps();
    for (size_t k = 0; k < K; k += kLanes) vmax = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(a + k)), vmax);
    const float amax = _mm512_reduce_max_ps(vmax);
    const float inv = amax > 0 ? 127.0f / amax : 0.0f;
    scales[m] = amax / 127.0f;
    const __m512 vinv = _mm512_set1_ps(inv), lo = _mm512_set1_ps(-127.0f), hi = _mm512_set1_ps(127.0f);
    uint8_t* q = out + m * row_bytes;
    auto* correction = reinterpret_cast<int32_t*>(q + K);
    for (size_t b = 0; b < K / kQ8BlockSize; ++b) {
      __m512i sum = _mm512_setzero_si512();
      for (size_t h = 0; h < 2; ++h) {
        const size_t k = b * kQ8BlockSize + h * kLanes;
        const __m512 x = _mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(_mm512_loadu_ps(a + k), vinv), lo), hi);
        const __m512i qi = _mm512_cvtps_epi32(x);  // MXCSR's default rounding: to nearest even, as nearbyint
        _mm_storeu_si128(reinterpret_cast<__m128i*>(q + k), _mm512_cvtepi32_epi8(qi));
        sum = _mm512_add_epi32(sum, qi);
      }
      correction[b] = -128 * _mm512_reduce_add_epi32(sum);
    }
  }
}

void pack(const Q8Block* weights, size_t ld, size_t N, size_t K, size_t n0, size_t n1, uint8_t* panels) {
  const size_t blocks = K / kQ8BlockSize;
  for (size_t jr = n0 / kNr * kNr; jr < n1; jr += kNr) {
    uint8_t* panel = panels + jr / kNr * panel_bytes(K);
    const size_t cols = std::min(kNr, N - jr);
    for (size_t b = 0; b < blocks; ++b) {
      uint8_t* blk = panel + b * kBlockBytes;
      auto* scale = reinterpret_cast<uint16_t*>(blk + kWeightBytes);
      for (size_t c = 0; c < kNr; ++c) {
        const Q8Block* w = c < cols ? &weights[(jr + c) * ld + b] : nullptr;
        for (size_t i = 0; i < kQ8BlockSize; ++i)
          blk[(i / 4 * kNr + c) * 4 + i % 4] = static_cast<uint8_t>((w ? w->q[i] : 0) + 128);
        scale[c] = w ? w->scale_f16 : 0;
      }
    }
  }
}

// dst rows [0, MR) × columns [0, n) (+)= the K slice of `blocks` blocks; see gemm_q8_simd.h for the sum order.
//   a: the rows' int8 at the slice's first k, row r at a + r·a_stride; corr: their corrections at the slice's first
//   block (same stride); b: the panel at the slice's first block; accumulate: c holds the earlier slices' sums.
// Stream: prefetch the next block of the panel (small M: each panel comes from DRAM once).
template <int MR, bool Stream>
void ukernel(size_t blocks, const uint8_t* __restrict a, const uint8_t* __restrict corr, size_t a_stride,
             const uint8_t* __restrict b, float* c, size_t ldc, size_t n, bool accumulate, const float* row_scale,
             const GemmCall* last, size_t m_global, size_t n_global) {
  assert(n >= 1 && n <= kNr);
  __m512 facc[MR][kNv];
#pragma GCC unroll 4
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int j = 0; j < kNv; ++j)
      facc[r][j] = accumulate ? _mm512_maskz_loadu_ps(lane_mask(n, j), c + r * ldc + j * kLanes) : _mm512_setzero_ps();
  for (size_t blk = 0; blk < blocks; ++blk, b += kBlockBytes) {
    if constexpr (Stream) {
      __builtin_prefetch(b + kBlockBytes + kWeightBytes);
      __builtin_prefetch(b + kBlockBytes + kWeightBytes + 64);
    }
    __m512i isum[MR][kNv];
#pragma GCC unroll 4
    for (int r = 0; r < MR; ++r) {
      int32_t start;
      std::memcpy(&start, corr + r * a_stride + blk * 4, 4);
#pragma GCC unroll 4
      for (int j = 0; j < kNv; ++j) isum[r][j] = _mm512_set1_epi32(start);
    }
#pragma GCC unroll 8
    for (size_t g = 0; g < kGroups; ++g) {
      const uint8_t* bg = b + g * kNr * 4;
      // The rows' 4 bytes broadcast first, then one weight vector at a time for all rows: 3 + 1 registers, and
      // each weight vector loaded once (with the loop the other way round GCC reloaded it for every row).
      __m512i av[MR];
#pragma GCC unroll 4
      for (int r = 0; r < MR; ++r) {
        int32_t four;
        std::memcpy(&four, a + r * a_stride + blk * kQ8BlockSize + g * 4, 4);
        av[r] = _mm512_set1_epi32(four);
      }
#pragma GCC unroll 4
      for (int j = 0; j < kNv; ++j) {
        if constexpr (Stream) __builtin_prefetch(bg + kBlockBytes + j * 64);
        const __m512i w = _mm512_load_si512(bg + j * 64);
#pragma GCC unroll 4
        for (int r = 0; r < MR; ++r) isum[r][j] = _mm512_dpbusd_epi32(isum[r][j], w, av[r]);
      }
    }
#pragma GCC unroll 4
    for (int j = 0; j < kNv; ++j) {
      const __m512 scale =
          _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(b + kWeightBytes + j * 32)));
#pragma GCC unroll 4
      for (int r = 0; r < MR; ++r)  // exact: |isum| ≤ 32·127² < 2^24
        facc[r][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[r][j]), scale, facc[r][j]);
    }
  }
  if (last) {
#pragma GCC unroll 4
    for (int r = 0; r < MR; ++r) {
      const __m512 s = _mm512_set1_ps(row_scale[r]);
#pragma GCC unroll 4
      for (int j = 0; j < kNv; ++j) facc[r][j] = _mm512_mul_ps(facc[r][j], s);
    }
  }
  if (gemm_q8_simd::plain_epilogue(last)) {
#pragma GCC unroll 4
    for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
      for (int j = 0; j < kNv; ++j) _mm512_mask_storeu_ps(c + r * ldc + j * kLanes, lane_mask(n, j), facc[r][j]);
    return;
  }
  alignas(64) float tile[MR * kNr];
#pragma GCC unroll 4
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int j = 0; j < kNv; ++j) _mm512_store_ps(tile + r * kNr + j * kLanes, facc[r][j]);
  gemm_simd::store_tile<xsimd::avx512bw, kNv>(tile, MR, c, ldc, n, last, m_global, n_global);
}

using Ukernel = void (*)(size_t, const uint8_t*, const uint8_t*, size_t, const uint8_t*, float*, size_t, size_t, bool,
                         const float*, const GemmCall*, size_t, size_t);
constexpr Ukernel kUkernels[2][kMr] = {{ukernel<1, false>, ukernel<2, false>, ukernel<3, false>},
                                        {ukernel<1, true>, ukernel<2, true>, ukernel<3, true>}};

void region(const TypedGemmCall& call, size_t m0, size_t m1, size_t n0, size_t n1) {
  const bool stream = call.M <= gemm_simd::kStreamMaxRows;
  const size_t row_bytes = call.src_row_bytes;
  assert(row_bytes == src_row_bytes(call.K) && call.panel_bytes == panel_bytes(call.K));
  gemm_q8_simd::blocked_loops(
      kBlockSizes, call, m0, m1, n0, n1,
      [&](size_t m, size_t rows, size_t jr, size_t n, size_t pc, size_t kc, const GemmCall* last) {
        const uint8_t* a = call.src_prepared + m * row_bytes;
        kUkernels[stream][rows - 1](kc / kQ8BlockSize, a + pc, a + call.K + pc / kQ8BlockSize * 4, row_bytes,
                                    call.typed_panels + jr / kNr * call.panel_bytes + pc / kQ8BlockSize * kBlockBytes,
                                    call.dst + m * call.ldc + jr, call.ldc, n, pc > 0, call.src_scales + m, last, m,
                                    jr);
      });
}

}  // namespace

const Q8Kernels kQ8KernelsAvx512Vnni{kBlockSizes, panel_bytes, src_row_bytes, prepare_src, region, pack};

}  // namespace sqrtdk::ops::gemm_detail
