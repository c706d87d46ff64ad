// Fused attention kernels, written once as templates on the xsimd Arch (instantiated in attention_avx2.cpp and
// attention_avx512.cpp). Contract of the op: attention.h. The pieces:
//
//   tile_kernel<MR, NV>  C[MR][NV*W] (+)= A[MR][K] · B[K][NV*W]: the register-blocked micro-kernel of both
//                        products. A is read through strides (a_rs between rows, a_cs between k) so it can be the
//                        K cache (rows = keys) or the transposed probabilities; B is row-major (ldb); the last
//                        vector of a row may be partial (masked loads/stores, never touching memory past N).
//   tiles<MR, NV>        any M × N with tails (smaller MR / NV instances).
//   fused_prefill_item   one work item of the fused path: kv head g, query block [i0, i1), all G = n_heads /
//                        n_kv_heads query heads of the group at once (R = G × block rows). Per key tile of kBc
//                        keys: Sᵀ[keys][R] = K_tile · (scale·Q)ᵀ (vectorized over query rows), causal mask on the
//                        diagonal tiles only, online softmax vectorized over rows (running max m, sum l, factor
//                        alpha), O[R][d] = alpha·O + P·V_tile. Tiles past the block's last visible key are skipped.
//   decode_chunk         one query row set (n_queries = 1, the G heads of group g) against keys [k0, k1): scores
//                        by dot products of W keys at once reduced with haddp, softmax of the chunk, P·V by tiles;
//                        writes the chunk's (max, sum, unnormalized output) for decode_merge.
//   decode_merge         combines the chunks of one head in chunk order (fixed, so results do not depend on the
//                        thread count).
// Kernels only assert; scratch is passed in (sizes from the *_scratch_floats functions).
#pragma once

#include "ops/base/vec_exp.h"

#include "ops/attention/attention_kernels.h"
#include "ops/softmax/softmax_simd.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstddef>
#include <limits>

namespace sqrtdk::ops::simd {

using ops::kBc;

// Masked access to the first `lanes` lanes of a vector (lanes in [1, W]).
template <class Arch>
struct LaneMask {
  static constexpr size_t W = Batch<Arch>::size;
  explicit LaneMask(size_t lanes) {
    if constexpr (kIsAvx512<Arch>)
      k = static_cast<__mmask16>(lanes >= 16 ? 0xFFFFu : ((1u << lanes) - 1u));
    else
      m = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(lanes)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  Batch<Arch> load(const float* p) const {
    if constexpr (kIsAvx512<Arch>)
      return _mm512_maskz_loadu_ps(k, p);
    else
      return _mm256_maskload_ps(p, m);
  }
  void store(float* p, Batch<Arch> v) const {
    if constexpr (kIsAvx512<Arch>)
      _mm512_mask_storeu_ps(p, k, v);
    else
      _mm256_maskstore_ps(p, m, v);
  }
  __mmask16 k = 0;  // avx512
  __m256i m;        // avx2
};

// out[j] = sum of the lanes of acc[j], j < W. avx2: xsimd::haddp. avx512: each zmm folded to a ymm (hi + lo
// halves), then the 8-wide haddp twice (xsimd 8.1's avx512 haddp gives wrong sums here: tests caught it).
template <class Arch>
inline Batch<Arch> sum_lanes(const Batch<Arch>* acc) {
  if constexpr (kIsAvx512<Arch>) {
    using Y = xsimd::batch<float, xsimd::fma3<xsimd::avx2>>;
    Y half[16];
    for (int j = 0; j < 16; ++j)
      half[j] = _mm256_add_ps(_mm512_castps512_ps256(acc[j]),
                              _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[j]), 1)));
    const __m256 lo = xsimd::haddp(half), hi = xsimd::haddp(half + 8);
    return _mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1);
  } else {
    return xsimd::haddp(acc);
  }
}

// C[MR][NV*W] (+)= A · B. A(i, k) = A[i*a_rs + k*a_cs]; B(k, n) = B[k*ldb + n]; C(i, n) = C[i*ldc + n].
// The last of the NV vectors covers `last_lanes` columns (W = full; kPartial must be true if last_lanes < W).
// accumulate = false: C is overwritten and never read.
template <class Arch, int MR, int NV, bool kPartial>
inline void tile_kernel(size_t K, const float* A, size_t a_rs, size_t a_cs, const float* B, size_t ldb, float* C,
                        size_t ldc, size_t last_lanes, bool accumulate) {
  using V = Batch<Arch>;
  constexpr size_t W = V::size;
  const LaneMask<Arch> tail(last_lanes);
  V acc[MR][NV];
  if (accumulate) {
    for (int i = 0; i < MR; ++i)
      for (int v = 0; v < NV; ++v)
        acc[i][v] = (kPartial && v == NV - 1) ? tail.load(C + i * ldc + v * W) : V::load_unaligned(C + i * ldc + v * W);
  } else {
    for (int i = 0; i < MR; ++i)
      for (int v = 0; v < NV; ++v) acc[i][v] = V(0.0f);
  }
  for (size_t k = 0; k < K; ++k) {
    const float* b = B + k * ldb;
    V bv[NV];
    for (int v = 0; v < NV; ++v) bv[v] = (kPartial && v == NV - 1) ? tail.load(b + v * W) : V::load_unaligned(b + v * W);
    const float* a = A + k * a_cs;
    for (int i = 0; i < MR; ++i) {
      const V ai(a[i * a_rs]);
      for (int v = 0; v < NV; ++v) acc[i][v] = vec::fma(ai, bv[v], acc[i][v]);
    }
  }
  for (int i = 0; i < MR; ++i)
    for (int v = 0; v < NV; ++v) {
      if (kPartial && v == NV - 1)
        tail.store(C + i * ldc + v * W, acc[i][v]);
      else
        acc[i][v].store_unaligned(C + i * ldc + v * W);
    }
}

template <class Arch, int MR, int NV>
inline void tile_kernel_any(size_t K, const float* A, size_t a_rs, size_t a_cs, const float* B, size_t ldb, float* C,
                            size_t ldc, size_t last_lanes, bool accumulate) {
  if (last_lanes == Batch<Arch>::size)
    tile_kernel<Arch, MR, NV, false>(K, A, a_rs, a_cs, B, ldb, C, ldc, last_lanes, accumulate);
  else
    tile_kernel<Arch, MR, NV, true>(K, A, a_rs, a_cs, B, ldb, C, ldc, last_lanes, accumulate);
}

// Row tail: mr < MR rows with the same NV.
template <class Arch, int MR, int NV>
inline void tile_rows(size_t mr, size_t K, const float* A, size_t a_rs, size_t a_cs, const float* B, size_t ldb,
                      float* C, size_t ldc, size_t last_lanes, bool accumulate) {
  if constexpr (MR > 1) {
    if (mr < static_cast<size_t>(MR)) {
      tile_rows<Arch, MR - 1, NV>(mr, K, A, a_rs, a_cs, B, ldb, C, ldc, last_lanes, accumulate);
      return;
    }
  }
  tile_kernel_any<Arch, MR, NV>(K, A, a_rs, a_cs, B, ldb, C, ldc, last_lanes, accumulate);
}

// Column tail: nv < NV vectors.
template <class Arch, int MR, int NV>
inline void tile_block(size_t mr, size_t nv, size_t K, const float* A, size_t a_rs, size_t a_cs, const float* B,
                       size_t ldb, float* C, size_t ldc, size_t last_lanes, bool accumulate) {
  if constexpr (NV > 1) {
    if (nv < static_cast<size_t>(NV)) {
      tile_block<Arch, MR, NV - 1>(mr, nv, K, A, a_rs, a_cs, B, ldb, C, ldc, last_lanes, accumulate);
      return;
    }
  }
  tile_rows<Arch, MR, NV>(mr, K, A, a_rs, a_cs, B, ldb, C, ldc, last_lanes, accumulate);
}

// C[M][N] (+)= A[M][K] · B[K][N] in MR × NV*W register tiles. Column blocks outer: a B panel of K × NV*W floats
// (16 KiB for K = 128 and 32 columns, or K = 64 and 64 columns) is reused from L1 by every row block.
template <class Arch, int MR, int NV>
inline void tiles(size_t M, size_t N, size_t K, const float* A, size_t a_rs, size_t a_cs, const float* B, size_t ldb,
                  float* C, size_t ldc, bool accumulate) {
  constexpr size_t W = Batch<Arch>::size;
  constexpr size_t NB = NV * W;
  for (size_t n0 = 0; n0 < N; n0 += NB) {
    const size_t nb = std::min(NB, N - n0);
    const size_t nv = (nb + W - 1) / W;
    const size_t last_lanes = nb - (nv - 1) * W;
    for (size_t m0 = 0; m0 < M; m0 += MR) {
      const size_t mr = std::min<size_t>(MR, M - m0);
      tile_block<Arch, MR, NV>(mr, nv, K, A + m0 * a_rs, a_rs, a_cs, B + n0, ldb, C + m0 * ldc + n0, ldc, last_lanes,
                               accumulate);
    }
  }
}

// Index of the first of `rows` rows (length d, contiguous) holding a NaN or ±Inf; `rows` if none.
template <class Arch>
size_t first_nonfinite_row(const float* x, size_t rows, size_t d) {
  using V = Batch<Arch>;
  constexpr size_t W = V::size;
  const size_t n = rows * d;
  const V big(std::numeric_limits<float>::max());
  size_t e = 0;
  for (; e + W <= n; e += W)
    if (xsimd::any(!(xsimd::abs(V::load_unaligned(x + e)) <= big))) break;  // NaN fails every comparison
  for (; e < n; ++e)
    if (!(std::fabs(x[e]) <= std::numeric_limits<float>::max())) return e / d;
  return rows;
}

// Register tiles per ISA: avx512 has 32 zmm: Q·Kᵀ 8 keys × 32 rows (16 accumulators), P·V 6 rows × 64 columns
// (24 accumulators: head_dim 64 in one pass); avx2 has 16 ymm: 6 × 16 (12 accumulators) for both.
template <class Arch>
struct TileShape {
  static constexpr int qk_mr = kIsAvx512<Arch> ? 8 : 6, qk_nv = 2;
  static constexpr int pv_mr = 6, pv_nv = kIsAvx512<Arch> ? 4 : 2;
};

// ---- fused prefill ----

template <class Arch>
void fused_prefill_item(const AttentionParams& p, const FusedPlan& plan, size_t g, size_t qb, float* scratch) {
  using V = Batch<Arch>;
  constexpr size_t W = V::size;
  using TS = TileShape<Arch>;
  const float inf = std::numeric_limits<float>::infinity();
  const size_t d = p.head_dim, G = plan.group, Rp = plan.rows_padded, dp = plan.dim_padded;
  const size_t i0 = qb * plan.block, i1 = std::min(p.n_queries, i0 + plan.block), nq = i1 - i0;
  const size_t R = G * nq;  // rows in use: r = hh * nq + (i - i0)
  float* qt = scratch;                // [d][Rp]   scale * Q, transposed, zero padded
  float* st = qt + dp * Rp;           // [kBc][Rp] scores, then probabilities, transposed
  float* o = st + kBc * Rp;           // [R][dp]   output accumulator
  float* m = o + plan.rows * dp;      // [Rp] running max
  float* l = m + Rp;                  // [Rp] running sum
  float* alpha = l + Rp;              // [Rp] rescale factor of this tile
  float* lim = alpha + Rp;            // [Rp] last visible key of each row
  for (size_t c = 0; c < d; ++c) {
    float* row = qt + c * Rp;
    for (size_t hh = 0; hh < G; ++hh) {
      const float* qh = p.q + i0 * p.ldq + (g * G + hh) * d + c;
      for (size_t i = 0; i < nq; ++i) row[hh * nq + i] = p.scale * qh[i * p.ldq];
    }
    for (size_t r = R; r < Rp; ++r) row[r] = 0.0f;
  }
  const size_t n_keys = p.n_keys();
  for (size_t hh = 0; hh < G; ++hh)
    for (size_t i = 0; i < nq; ++i) lim[hh * nq + i] = p.causal ? float(p.pos0 + i0 + i) : float(n_keys);
  // Key positions and limits as floats: exact because attention() refuses more than kMaxAttentionKeys = 2^24 keys.
  for (size_t r = R; r < Rp; ++r) lim[r] = float(n_keys);
  for (size_t r = 0; r < Rp; ++r) m[r] = -inf, l[r] = 0.0f;

  const float* kg = p.k_cache + g * p.cache_stride * d;  // [cache_stride][d]
  const float* vg = p.v_cache + g * p.cache_stride * d;
  // Keys past the block's last query are masked for every row of the block: skip those tiles.
  const size_t key_end = p.causal ? p.pos0 + i1 : n_keys;
  const size_t first_masked = p.pos0 + i0 + 1;  // keys >= this are masked for some row of the block
  for (size_t kt = 0; kt < key_end; kt += kBc) {
    const size_t nk = std::min(kBc, key_end - kt);
    // Sᵀ[j][r] = K[kt + j] · (scale q_r)
    tiles<Arch, TS::qk_mr, TS::qk_nv>(nk, Rp, d, kg + kt * d, d, 1, qt, Rp, st, Rp, false);
    if (p.causal && kt + nk > first_masked) {
      for (size_t j = 0; j < nk; ++j) {
        const V key(float(kt + j));
        for (size_t r = 0; r < Rp; r += W) {
          const V s = V::load_unaligned(st + j * Rp + r);
          xsimd::select(key > V::load_unaligned(lim + r), V(-inf), s).store_unaligned(st + j * Rp + r);
        }
      }
    }
    // Online softmax, vectorized over rows: probabilities in place, running max/sum updated, alpha per row.
    online_softmax_columns<Arch>(st, nk, Rp, m, l, alpha);
    if (kt > 0) {
      for (size_t r = 0; r < R; ++r) {
        if (alpha[r] == 1.0f) continue;
        const V a(alpha[r]);
        float* orow = o + r * dp;
        for (size_t c = 0; c < dp; c += W) (V::load_unaligned(orow + c) * a).store_unaligned(orow + c);
      }
    }
    // O[R][d] (+)= P[R][nk] · V[kt .. kt + nk][d]; P(r, j) = Sᵀ[j][r].
    // A masked key's probability is exactly 0, but 0 · NaN = NaN: a non-finite value row would reach the rows that
    // cannot see it. Where the tile holds keys masked for some row, find the first non-finite value row among them
    // (at most kBc rows); the rows that cannot see it stop their product just before it. The products they skip
    // are 0 · finite = 0 in a clean run, so their bits do not change.
    const size_t masked_from = p.causal ? std::max(kt, first_masked) : kt + nk;
    const size_t bad = masked_from < kt + nk
                           ? masked_from + first_nonfinite_row<Arch>(vg + masked_from * d, kt + nk - masked_from, d)
                           : kt + nk;
    if (bad == kt + nk) {
      tiles<Arch, TS::pv_mr, TS::pv_nv>(R, d, nk, st, 1, Rp, vg + kt * d, d, o, dp, kt > 0);
    } else {
      // Row i of the block sees keys up to pos0 + i0 + i, so rows i < n_blind cannot see key `bad`
      // (bad >= first_masked = pos0 + i0 + 1, so n_blind >= 1).
      const size_t n_blind = std::min(nq, bad - (p.pos0 + i0));
      for (size_t hh = 0; hh < G; ++hh) {
        const size_t r0 = hh * nq;
        tiles<Arch, TS::pv_mr, TS::pv_nv>(n_blind, d, bad - kt, st + r0, 1, Rp, vg + kt * d, d, o + r0 * dp, dp,
                                          kt > 0);
        tiles<Arch, TS::pv_mr, TS::pv_nv>(nq - n_blind, d, nk, st + r0 + n_blind, 1, Rp, vg + kt * d, d,
                                          o + (r0 + n_blind) * dp, dp, kt > 0);
      }
    }
  }
  for (size_t hh = 0; hh < G; ++hh) {
    for (size_t i = 0; i < nq; ++i) {
      const size_t r = hh * nq + i;
      const float inv = 1.0f / l[r];
      float* dst = p.out + (i0 + i) * p.ldo + (g * G + hh) * d;
      const float* src = o + r * dp;
      for (size_t c = 0; c < d; ++c) dst[c] = src[c] * inv;
    }
  }
}

// ---- decode ----

inline constexpr size_t kFloatsPerCacheLine = 64 / sizeof(float);

// Chunk `chunk` of kv head g: partial[(g * n_chunks + chunk) * G + hh] = {max, sum, O[dp]} (O unnormalized).
template <class Arch>
void decode_chunk(const AttentionParams& p, const DecodePlan& plan, size_t g, size_t chunk, float* scratch,
                  float* partials) {
  using V = Batch<Arch>;
  constexpr size_t W = V::size;
  using TS = TileShape<Arch>;
  const size_t d = p.head_dim, G = plan.group, dp = plan.dim_padded;
  const size_t ck = plan.chunk_keys, k0 = chunk * ck, nk = std::min(ck, p.n_keys() - k0);
  float* qs = scratch;          // [G][dp] scale * q, zero padded
  float* s = qs + G * dp;       // [G][chunk_keys] scores, then probabilities
  for (size_t hh = 0; hh < G; ++hh) {
    const float* qh = p.q + (g * G + hh) * d;
    for (size_t c = 0; c < d; ++c) qs[hh * dp + c] = p.scale * qh[c];
    for (size_t c = d; c < dp; ++c) qs[hh * dp + c] = 0.0f;
  }
  const float* kg = p.k_cache + (g * p.cache_stride + k0) * d;  // [nk][d]
  const float* vg = p.v_cache + (g * p.cache_stride + k0) * d;
  const size_t d_full = d / W * W;
  const LaneMask<Arch> d_tail(d - d_full == 0 ? W : d - d_full);
  // Scores of W keys at once: W accumulators (one per key) over head_dim, reduced together. The loops over the W
  // keys have constant bounds so the accumulators stay in registers; past the chunk's end the last key is
  // re-read (valid memory) and its lanes are not stored.
  // Each block prefetches into L1 the K rows of the block plan.prefetch_keys (about 4 KiB) ahead: the cache comes
  // from DRAM once per token, a few dot products per line cannot hide the misses, and with the hardware prefetcher
  // alone cold 12 × 64 decode at 256-8192 keys took 19-32% longer at 1 thread (Zen 5, 2026-12-07; prefetching 8 KiB
  // ahead gained less, and V's rows prefetched in the same loop lost at 2 048 keys: two streams at once).
  const size_t ahead = plan.prefetch_keys;
  for (size_t j0 = 0; j0 < nk; j0 += W) {
    for (size_t f = (j0 + ahead) * d; f < std::min(nk, j0 + ahead + W) * d; f += kFloatsPerCacheLine)
      __builtin_prefetch(kg + f, 0, 3);
    const size_t nj = std::min(W, nk - j0);
    const float* krow[W];
    for (size_t j = 0; j < W; ++j) krow[j] = kg + (j0 + std::min(j, nj - 1)) * d;
    for (size_t hh = 0; hh < G; ++hh) {
      const float* qh = qs + hh * dp;
      V acc[W];
      for (size_t j = 0; j < W; ++j) acc[j] = V(0.0f);
      for (size_t c = 0; c < d_full; c += W) {
        const V qv = V::load_aligned(qh + c);
        for (size_t j = 0; j < W; ++j) acc[j] = vec::fma(V::load_unaligned(krow[j] + c), qv, acc[j]);
      }
      if (d_full < d) {
        const V qv = V::load_aligned(qh + d_full);
        for (size_t j = 0; j < W; ++j) acc[j] = vec::fma(d_tail.load(krow[j] + d_full), qv, acc[j]);
      }
      const V sums = sum_lanes<Arch>(acc);
      if (nj == W)
        sums.store_unaligned(s + hh * ck + j0);
      else
        store_partial<Arch>(s + hh * ck + j0, sums, nj);
    }
  }
  for (size_t hh = 0; hh < G; ++hh) {
    float* part = partials + ((g * plan.n_chunks + chunk) * G + hh) * plan.partial_stride;
    OnlineSoftmaxState st;
    online_softmax_block<Arch>(st, s + hh * ck, nk);
    part[0] = st.max;
    part[1] = st.sum;
  }
  // O_partial[G][d] = P[G][nk] · V[nk][d]
  float* o0 = partials + (g * plan.n_chunks + chunk) * G * plan.partial_stride + 2;
  tiles<Arch, TS::pv_mr, TS::pv_nv>(G, d, nk, s, ck, 1, vg, d, o0, plan.partial_stride, false);
}

// Combines the chunks of head (g, hh) in chunk order and writes its output row.
template <class Arch>
void decode_merge(const AttentionParams& p, const DecodePlan& plan, size_t g, size_t hh, const float* partials) {
  using V = Batch<Arch>;
  constexpr size_t W = V::size;
  const size_t d = p.head_dim, G = plan.group, ps = plan.partial_stride;
  auto part = [&](size_t c) { return partials + ((g * plan.n_chunks + c) * G + hh) * ps; };
  float mx = -std::numeric_limits<float>::infinity();
  for (size_t c = 0; c < plan.n_chunks; ++c) mx = std::max(mx, part(c)[0]);
  float* dst = p.out + (g * G + hh) * d;
  float total = 0.0f;
  const size_t d_full = d / W * W;
  for (size_t c = 0; c < plan.n_chunks; ++c) {
    const float f = std::exp(part(c)[0] - mx);
    total += f * part(c)[1];
    const float* oc = part(c) + 2;
    const V vf(f);
    for (size_t k = 0; k < d_full; k += W) {
      const V prev = c == 0 ? V(0.0f) : V::load_unaligned(dst + k);
      vec::fma(vf, V::load_unaligned(oc + k), prev).store_unaligned(dst + k);
    }
    for (size_t k = d_full; k < d; ++k) dst[k] = (c == 0 ? 0.0f : dst[k]) + f * oc[k];
  }
  const float inv = 1.0f / total;
  for (size_t k = 0; k < d; ++k) dst[k] *= inv;
}

}  // namespace sqrtdk::ops::simd
