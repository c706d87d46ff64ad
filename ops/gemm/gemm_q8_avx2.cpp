// The q8 GEMM on AVX2 (also what AVX-512 CPUs without VNNI run): the same exact block sums as the VNNI kernel, with
// vpmaddubsw (u8 × s8 → int16 pair sums) and vpmaddwd by ones (→ int32, 4 products per lane). The unsigned operand
// is |q_w| (vpabsb, once per weight vector, shared by the rows), the signed one q_a with q_w's sign applied
// (vpsignb): |q_w|·(sign(q_w)·q_a) = q_w·q_a, and a pair sums to at most 2·127·127 = 32258 < 2^15, so vpmaddubsw
// never saturates (q is in [-127, 127], never -128).
//
// Packed panel of NR = 24 columns: the K/32 blocks' int8 [8 groups of 4 k][24 columns][4 k] (768 bytes each, one
// ymm load = 8 columns × 4 k, every load 32-byte aligned), then all blocks' f16 scales [K/32][24], padded to 64
// bytes: ~1.06 bytes per weight. Columns ≥ N: q = 0, scale 0.
// Prepared src row: quantize_src_row_q8's K int8 as they are (src_row_bytes = K).
//
// Microkernel 3 × 24: 9 int32 block accumulators + 3 broadcasts + q_w, |q_w|, a product and the ones = 16 ymm;
// the 9 f32 accumulators, touched once per block (after 8 × 4 × 9 integer ops), are the compiler's to spill. NR 24
// is the f32 avx2 kernel's, whose store_tile (the fused epilogue) this kernel shares.
#include "ops/gemm/gemm_q8_simd.h"
#include "ops/gemm/gemm_simd.h"

#include <immintrin.h>

#include <cstring>

// The fused epilogue: gemm_simd::store_tile for avx2 with 3 vectors, instantiated (noinline) in gemm_avx2.cpp with
// the same compiler flags; declared here so the one copy serves both.
extern template void sqrtdk::ops::gemm_simd::store_tile<xsimd::fma3<xsimd::avx2>, 3>(
    const float*, size_t, float*, size_t, size_t, const sqrtdk::ops::gemm_detail::GemmCall*, size_t, size_t);

namespace sqrtdk::ops::gemm_detail {

namespace {

using gemm_q8_simd::kGroups;
constexpr int kMr = 3, kNv = 3;
constexpr size_t kLanes = 8, kNr = kNv * kLanes;
constexpr size_t kWeightBytes = kQ8BlockSize * kNr;  // int8 [8][24][4] per block

// Block sizes: not tuned yet (shared machine). kc 1024 keeps the kc × 24 micro-panel (24 KiB of int8) in L1 with
// the 3 rows of A; mc, nc as the f32 kernel's.
constexpr BlockSizes kBlockSizes{kMr, kNr, 1024, 96, 768};

size_t scales_bytes(size_t K) { return (K / kQ8BlockSize * kNr * 2 + 63) / 64 * 64; }
size_t panel_bytes(size_t K) { return K / kQ8BlockSize * kWeightBytes + scales_bytes(K); }
size_t src_row_bytes(size_t K) { return K; }

__m256i lane_mask(size_t n, size_t j) {
  const int count = n > j * kLanes ? static_cast<int>(std::min(kLanes, n - j * kLanes)) : 0;
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(count), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// quantize_src_row_q8, 8 floats at a time, the same operations (see gemm_q8_avx512vnni.cpp's prepare_src).
void prepare_src(const float* src, size_t lda, size_t m0, size_t m1, size_t K, uint8_t* out, float* scales) {
  assert(K % kQ8BlockSize == 0);
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  // packs_epi32 then packs_epi16 interleave the 128-bit lanes of their inputs; this puts the 8 dwords back in order.
  const __m256i unshuffle = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (size_t m = m0; m < m1; ++m) {
    const float* a = src + m * lda;
    __m256 vmax = _mm256_setzero_ps();
    for (size_t k = 0; k < K; k += kLanes) vmax = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(a + k), abs_mask), vmax);
    alignas(32) float lanes[kLanes];
    _mm256_store_ps(lanes, vmax);
    float amax = 0;
    for (float v : lanes) amax = std::max(amax, v);
    const float inv = amax > 0 ? 127.0f / amax : 0.0f;
    scales[m] = amax / 127.0f;
    const __m256 vinv = _mm256_set1_ps(inv), lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
    uint8_t* q = out + m * K;
    for (size_t k = 0; k < K; k += kQ8BlockSize) {
      __m256i qi[4];
      for (size_t h = 0; h < 4; ++h) {
        const __m256 x =
            _mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(_mm256_loadu_ps(a + k + h * kLanes), vinv), lo), hi);
        qi[h] = _mm256_cvtps_epi32(x);  // to nearest even (MXCSR's default), as nearbyint
      }
      const __m256i bytes = _mm256_packs_epi16(_mm256_packs_epi32(qi[0], qi[1]), _mm256_packs_epi32(qi[2], qi[3]));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + k), _mm256_permutevar8x32_epi32(bytes, unshuffle));
    }
  }
}

void pack(const Q8Block* weights, size_t ld, size_t N, size_t K, size_t n0, size_t n1, uint8_t* panels) {
  const size_t blocks = K / kQ8BlockSize;
  for (size_t jr = n0 / kNr * kNr; jr < n1; jr += kNr) {
    uint8_t* panel = panels + jr / kNr * panel_bytes(K);
    auto* scale = reinterpret_cast<uint16_t*>(panel + blocks * kWeightBytes);
    std::memset(scale, 0, scales_bytes(K));
    const size_t cols = std::min(kNr, N - jr);
    for (size_t b = 0; b < blocks; ++b) {
      uint8_t* blk = panel + b * kWeightBytes;
      for (size_t c = 0; c < kNr; ++c) {
        const Q8Block* w = c < cols ? &weights[(jr + c) * ld + b] : nullptr;
        for (size_t i = 0; i < kQ8BlockSize; ++i)
          blk[(i / 4 * kNr + c) * 4 + i % 4] = static_cast<uint8_t>(w ? w->q[i] : 0);
        scale[b * kNr + c] = w ? w->scale_f16 : 0;
      }
    }
  }
}

// As the VNNI kernel's ukernel (same sum order); b: the panel's int8 at the slice's first block, scales: its f16
// scales at that block.
template <int MR, bool Stream>
void ukernel(size_t blocks, const uint8_t* __restrict a, size_t a_stride, const uint8_t* __restrict b,
             const uint16_t* __restrict scales, float* c, size_t ldc, size_t n, bool accumulate,
             const float* row_scale, const GemmCall* last, size_t m_global, size_t n_global) {
  assert(n >= 1 && n <= kNr);
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 facc[MR][kNv];
#pragma GCC unroll 4
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int j = 0; j < kNv; ++j)
      facc[r][j] = accumulate ? _mm256_maskload_ps(c + r * ldc + j * kLanes, lane_mask(n, j)) : _mm256_setzero_ps();
  for (size_t blk = 0; blk < blocks; ++blk, b += kWeightBytes, scales += kNr) {
    if constexpr (Stream) __builtin_prefetch(scales + 2 * kNr);
    __m256i isum[MR][kNv];
#pragma GCC unroll 4
    for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
      for (int j = 0; j < kNv; ++j) isum[r][j] = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (size_t g = 0; g < kGroups; ++g) {
      const uint8_t* bg = b + g * kNr * 4;
      if constexpr (Stream) {
        // 96 bytes per group: its lines one block (768 bytes) ahead.
        __builtin_prefetch(bg + kWeightBytes);
        __builtin_prefetch(bg + kWeightBytes + 64);
      }
      // The rows' 4 bytes broadcast first, then one weight vector (and its |q_w|) at a time for all rows.
      __m256i av[MR];
#pragma GCC unroll 4
      for (int r = 0; r < MR; ++r) {
        int32_t four;
        std::memcpy(&four, a + r * a_stride + blk * kQ8BlockSize + g * 4, 4);
        av[r] = _mm256_set1_epi32(four);
      }
#pragma GCC unroll 4
      for (int j = 0; j < kNv; ++j) {
        const __m256i w = _mm256_load_si256(reinterpret_cast<const __m256i*>(bg + j * 32));
        const __m256i w_abs = _mm256_abs_epi8(w);
#pragma GCC unroll 4
        for (int r = 0; r < MR; ++r) {
          const __m256i pairs = _mm256_maddubs_epi16(w_abs, _mm256_sign_epi8(av[r], w));
          isum[r][j] = _mm256_add_epi32(isum[r][j], _mm256_madd_epi16(pairs, ones));
        }
      }
    }
#pragma GCC unroll 4
    for (int j = 0; j < kNv; ++j) {
      const __m256 scale = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(scales + j * kLanes)));
#pragma GCC unroll 4
      for (int r = 0; r < MR; ++r)  // exact: |isum| ≤ 32·127² < 2^24
        facc[r][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[r][j]), scale, facc[r][j]);
    }
  }
  if (last) {
#pragma GCC unroll 4
    for (int r = 0; r < MR; ++r) {
      const __m256 s = _mm256_set1_ps(row_scale[r]);
#pragma GCC unroll 4
      for (int j = 0; j < kNv; ++j) facc[r][j] = _mm256_mul_ps(facc[r][j], s);
    }
  }
  if (gemm_q8_simd::plain_epilogue(last)) {
#pragma GCC unroll 4
    for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
      for (int j = 0; j < kNv; ++j) {
        if (n == kNr)
          _mm256_storeu_ps(c + r * ldc + j * kLanes, facc[r][j]);
        else
          _mm256_maskstore_ps(c + r * ldc + j * kLanes, lane_mask(n, j), facc[r][j]);
      }
    return;
  }
  alignas(32) float tile[MR * kNr];
#pragma GCC unroll 4
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int j = 0; j < kNv; ++j) _mm256_store_ps(tile + r * kNr + j * kLanes, facc[r][j]);
  gemm_simd::store_tile<xsimd::fma3<xsimd::avx2>, kNv>(tile, MR, c, ldc, n, last, m_global, n_global);
}

using Ukernel = void (*)(size_t, const uint8_t*, size_t, const uint8_t*, const uint16_t*, float*, size_t, size_t, bool,
                         const float*, const GemmCall*, size_t, size_t);
constexpr Ukernel kUkernels[2][kMr] = {{ukernel<1, false>, ukernel<2, false>, ukernel<3, false>},
                                        {ukernel<1, true>, ukernel<2, true>, ukernel<3, true>}};

void region(const TypedGemmCall& call, size_t m0, size_t m1, size_t n0, size_t n1) {
  const bool stream = call.M <= gemm_simd::kStreamMaxRows;
  const size_t row_bytes = call.src_row_bytes, blocks = call.K / kQ8BlockSize;
  assert(row_bytes == src_row_bytes(call.K) && call.panel_bytes == panel_bytes(call.K));
  gemm_q8_simd::blocked_loops(
      kBlockSizes, call, m0, m1, n0, n1,
      [&](size_t m, size_t rows, size_t jr, size_t n, size_t pc, size_t kc, const GemmCall* last) {
        const uint8_t* panel = call.typed_panels + jr / kNr * call.panel_bytes;
        const size_t b0 = pc / kQ8BlockSize;
        kUkernels[stream][rows - 1](kc / kQ8BlockSize, call.src_prepared + m * row_bytes + pc, row_bytes,
                                    panel + b0 * kWeightBytes,
                                    reinterpret_cast<const uint16_t*>(panel + blocks * kWeightBytes) + b0 * kNr,
                                    call.dst + m * call.ldc + jr, call.ldc, n, pc > 0, call.src_scales + m, last, m,
                                    jr);
      });
}

}  // namespace

const Q8Kernels kQ8KernelsAvx2{kBlockSizes, panel_bytes, src_row_bytes, prepare_src, region, pack};

}  // namespace sqrtdk::ops::gemm_detail
