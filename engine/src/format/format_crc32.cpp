// CRC-32 (ISO-HDLC, reflected polynomial 0xEDB88320, init and final xor 0xFFFFFFFF): the value of Python's
// zlib.crc32. Used for the .sqdk header and per-tensor checksums (engine/FORMAT.md).
//
// Three paths, same result, chosen by CPU features (crc32_paths(); tests run each): slicing-by-8 tables (8 lookups
// per 8 bytes, ~2 GB/s); PCLMULQDQ carry-less folding of 64-byte blocks in four xmm lanes (Gopal et al., "Fast CRC
// Computation for Generic Polynomials Using PCLMULQDQ", Intel 2009; constants as in zlib/Chromium's crc32_simd.c);
// and VPCLMULQDQ folding of 256-byte blocks in four zmm registers (AVX-512). The SIMD paths use function target
// attributes in this baseline file: each is a non-inline function in an anonymous namespace, called only after the
// CPU check, so no baseline caller can receive AVX-512 code. Tails shorter than a block go through the table. crc32_combine() joins the CRCs of two adjacent pieces, so the
// loader can checksum one large tensor on several threads. No global mutable state: the tables are function-local
// static consts.
#include <sqrtdk/format.h>

#include "engine/src/format/format_internal.h"

#include <array>
#include <cstring>

#include <immintrin.h>

namespace sqrtdk {
namespace {

constexpr uint32_t kPoly = 0xEDB88320u;

struct Crc32Tables {
  uint32_t t[8][256];
};

Crc32Tables make_tables() {
  Crc32Tables tables{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kPoly : c >> 1;
    tables.t[0][i] = c;
  }
  for (uint32_t i = 0; i < 256; ++i)
    for (int s = 1; s < 8; ++s) tables.t[s][i] = (tables.t[s - 1][i] >> 8) ^ tables.t[0][tables.t[s - 1][i] & 0xFF];
  return tables;
}

const Crc32Tables& tables() {
  static const Crc32Tables t = make_tables();
  return t;
}

// Updates the raw (already inverted) CRC state over [p, p + n).
uint32_t crc32_raw_table(const unsigned char* p, size_t n, uint32_t c) {
  const auto& t = tables().t;
  while (n >= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    v ^= c;
    c = t[7][v & 0xFF] ^ t[6][(v >> 8) & 0xFF] ^ t[5][(v >> 16) & 0xFF] ^ t[4][(v >> 24) & 0xFF] ^
        t[3][(v >> 32) & 0xFF] ^ t[2][(v >> 40) & 0xFF] ^ t[1][(v >> 48) & 0xFF] ^ t[0][v >> 56];
    p += 8;
    n -= 8;
  }
  while (n--) c = (c >> 8) ^ t[0][(c ^ *p++) & 0xFF];
  return c;
}

// Folds four 16-byte lanes (x1 first in memory) into one, then the remaining 16-byte blocks of [buf, buf + n),
// then reduces to the raw 32-bit CRC state. n is a multiple of 16.
__attribute__((target("pclmul,sse4.1"))) uint32_t fold_tail_pclmul(__m128i x1, __m128i x2, __m128i x3, __m128i x4,
                                                                   const unsigned char* buf, size_t n) {
  alignas(16) static const uint64_t k3k4[] = {0x01751997d0, 0x00ccaa009e};  // fold by 128 bits
  alignas(16) static const uint64_t k5k0[] = {0x0163cd6124, 0x0000000000};
  alignas(16) static const uint64_t poly[] = {0x01db710641, 0x01f7011641};  // P and its Barrett constant

  __m128i x0 = _mm_load_si128(reinterpret_cast<const __m128i*>(k3k4));
  __m128i x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
  x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
  x1 = _mm_xor_si128(_mm_xor_si128(x1, x2), x5);
  x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
  x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
  x1 = _mm_xor_si128(_mm_xor_si128(x1, x3), x5);
  x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
  x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
  x1 = _mm_xor_si128(_mm_xor_si128(x1, x4), x5);

  // Remaining 16-byte blocks.
  while (n >= 16) {
    x2 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(buf));
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
    x1 = _mm_xor_si128(_mm_xor_si128(x1, x2), x5);
    buf += 16;
    n -= 16;
  }

  // 128 -> 64 bits.
  x2 = _mm_clmulepi64_si128(x1, x0, 0x10);
  x3 = _mm_setr_epi32(~0, 0, ~0, 0);
  x1 = _mm_srli_si128(x1, 8);
  x1 = _mm_xor_si128(x1, x2);
  x0 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(k5k0));
  x2 = _mm_srli_si128(x1, 4);
  x1 = _mm_and_si128(x1, x3);
  x1 = _mm_clmulepi64_si128(x1, x0, 0x00);
  x1 = _mm_xor_si128(x1, x2);

  // Barrett reduction to 32 bits.
  x0 = _mm_load_si128(reinterpret_cast<const __m128i*>(poly));
  x2 = _mm_and_si128(x1, x3);
  x2 = _mm_clmulepi64_si128(x2, x0, 0x10);
  x2 = _mm_and_si128(x2, x3);
  x2 = _mm_clmulepi64_si128(x2, x0, 0x00);
  x1 = _mm_xor_si128(x1, x2);
  return static_cast<uint32_t>(_mm_extract_epi32(x1, 1));
}

// PCLMUL folding over n bytes, n >= 64 and a multiple of 16; `c` is the raw (inverted) state.
// Constants: for a fold over D bits, {x^(D+32) mod P, x^(D-32) mod P}, bit-reflected and shifted left by one.
__attribute__((target("pclmul,sse4.1"))) uint32_t crc32_raw_pclmul(const unsigned char* buf, size_t n, uint32_t c) {
  alignas(16) static const uint64_t k1k2[] = {0x0154442bd4, 0x01c6e41596};  // fold by 512 bits

  __m128i x1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(buf + 0x00));
  __m128i x2 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(buf + 0x10));
  __m128i x3 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(buf + 0x20));
  __m128i x4 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(buf + 0x30));
  x1 = _mm_xor_si128(x1, _mm_cvtsi32_si128(static_cast<int>(c)));
  const __m128i x0 = _mm_load_si128(reinterpret_cast<const __m128i*>(k1k2));
  buf += 64;
  n -= 64;

  // Four independent 128-bit lanes folded forward by 512 bits per step (hides the clmul latency).
  while (n >= 64) {
    const __m128i x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
    const __m128i x6 = _mm_clmulepi64_si128(x2, x0, 0x00);
    const __m128i x7 = _mm_clmulepi64_si128(x3, x0, 0x00);
    const __m128i x8 = _mm_clmulepi64_si128(x4, x0, 0x00);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
    x2 = _mm_clmulepi64_si128(x2, x0, 0x11);
    x3 = _mm_clmulepi64_si128(x3, x0, 0x11);
    x4 = _mm_clmulepi64_si128(x4, x0, 0x11);
    x1 = _mm_xor_si128(_mm_xor_si128(x1, x5), _mm_loadu_si128(reinterpret_cast<const __m128i*>(buf + 0x00)));
    x2 = _mm_xor_si128(_mm_xor_si128(x2, x6), _mm_loadu_si128(reinterpret_cast<const __m128i*>(buf + 0x10)));
    x3 = _mm_xor_si128(_mm_xor_si128(x3, x7), _mm_loadu_si128(reinterpret_cast<const __m128i*>(buf + 0x20)));
    x4 = _mm_xor_si128(_mm_xor_si128(x4, x8), _mm_loadu_si128(reinterpret_cast<const __m128i*>(buf + 0x30)));
    buf += 64;
    n -= 64;
  }
  return fold_tail_pclmul(x1, x2, x3, x4, buf, n);
}

// a * k folded forward (per 128-bit lane: a.lo * k.lo ^ a.hi * k.hi), xor next.
__attribute__((target("avx512f,avx512vl,vpclmulqdq"), always_inline)) inline __m512i fold(__m512i a, __m512i k,
                                                                                          __m512i next) {
  return _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(a, k, 0x00), _mm512_clmulepi64_epi128(a, k, 0x11), next,
                                   0x96);  // three-way xor
}

// VPCLMULQDQ (AVX-512) folding over n bytes, n >= 256 and a multiple of 16: four zmm accumulators (16 lanes of
// 128 bits) folded forward by 2048 bits per step, then folded into one zmm (by 512 bits), whose four lanes finish
// in fold_tail_pclmul.
__attribute__((target("avx512f,avx512vl,vpclmulqdq,pclmul,sse4.1"))) uint32_t crc32_raw_vpclmul(
    const unsigned char* buf, size_t n, uint32_t c) {
  // Per lane {lo, hi} = {x^(D+32), x^(D-32)} (see crc32_raw_pclmul), for D = 2048 and D = 512.
  const __m512i k2048 = _mm512_set_epi64(0x01322d1430, 0x011542778a, 0x01322d1430, 0x011542778a, 0x01322d1430,
                                         0x011542778a, 0x01322d1430, 0x011542778a);
  const __m512i k512 = _mm512_set_epi64(0x01c6e41596, 0x0154442bd4, 0x01c6e41596, 0x0154442bd4, 0x01c6e41596,
                                        0x0154442bd4, 0x01c6e41596, 0x0154442bd4);
  __m512i a0 = _mm512_loadu_si512(buf);
  __m512i a1 = _mm512_loadu_si512(buf + 64);
  __m512i a2 = _mm512_loadu_si512(buf + 128);
  __m512i a3 = _mm512_loadu_si512(buf + 192);
  a0 = _mm512_xor_si512(a0, _mm512_zextsi128_si512(_mm_cvtsi32_si128(static_cast<int>(c))));
  buf += 256;
  n -= 256;
  while (n >= 256) {
    a0 = fold(a0, k2048, _mm512_loadu_si512(buf));
    a1 = fold(a1, k2048, _mm512_loadu_si512(buf + 64));
    a2 = fold(a2, k2048, _mm512_loadu_si512(buf + 128));
    a3 = fold(a3, k2048, _mm512_loadu_si512(buf + 192));
    buf += 256;
    n -= 256;
  }
  a1 = fold(a0, k512, a1);
  a2 = fold(a1, k512, a2);
  a3 = fold(a2, k512, a3);
  while (n >= 64) {
    a3 = fold(a3, k512, _mm512_loadu_si512(buf));
    buf += 64;
    n -= 64;
  }
  // (maskz extracts: GCC 12 warns about the undefined source operand of the unmasked form.)
  return fold_tail_pclmul(_mm512_maskz_extracti32x4_epi32(0xF, a3, 0), _mm512_maskz_extracti32x4_epi32(0xF, a3, 1),
                          _mm512_maskz_extracti32x4_epi32(0xF, a3, 2), _mm512_maskz_extracti32x4_epi32(0xF, a3, 3),
                          buf, n);
}

bool cpu_has_pclmul() { return __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1"); }
bool cpu_has_vpclmul() {
  return cpu_has_pclmul() && __builtin_cpu_supports("vpclmulqdq") && __builtin_cpu_supports("avx512f") &&
         __builtin_cpu_supports("avx512vl");
}

// GF(2) polynomial product a * b mod P (reflected), from zlib's crc32.c.
uint32_t multmodp(uint32_t a, uint32_t b) {
  uint32_t m = 1u << 31, p = 0;
  for (;;) {
    if (a & m) {
      p ^= b;
      if ((a & (m - 1)) == 0) break;
    }
    m >>= 1;
    b = (b & 1) ? (b >> 1) ^ kPoly : b >> 1;
  }
  return p;
}

// x^(2^k) mod P for k = 0..31.
std::array<uint32_t, 32> make_x2n_table() {
  std::array<uint32_t, 32> t{};
  uint32_t p = 1u << 30;  // x^1
  t[0] = p;
  for (int k = 1; k < 32; ++k) t[k] = p = multmodp(p, p);
  return t;
}

}  // namespace


uint32_t crc32(const void* data, size_t size, uint32_t crc) {
  static const format_detail::CrcPath best = format_detail::crc32_paths().back();
  return format_detail::crc32_with(best, data, size, crc);
}

std::vector<format_detail::CrcPath> format_detail::crc32_paths() {
  std::vector<CrcPath> paths{CrcPath::table};
  if (cpu_has_pclmul()) paths.push_back(CrcPath::pclmul);
  if (cpu_has_vpclmul()) paths.push_back(CrcPath::vpclmul);
  return paths;
}

uint32_t format_detail::crc32_with(CrcPath path, const void* data, size_t size, uint32_t crc) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t c = ~crc;
  if (path == CrcPath::vpclmul && size >= 256) {
    const size_t n = size & ~size_t{15};
    c = crc32_raw_vpclmul(p, n, c);
    p += n;
    size -= n;
  } else if (path != CrcPath::table && size >= 64) {
    const size_t n = size & ~size_t{15};
    c = crc32_raw_pclmul(p, n, c);
    p += n;
    size -= n;
  }
  return ~crc32_raw_table(p, size, c);
}

uint32_t format_detail::crc32_combine(uint32_t crc1, uint32_t crc2, uint64_t len2) {
  static const std::array<uint32_t, 32> x2n = make_x2n_table();
  // x^(8 * len2) mod P, then crc1 * that xor crc2.
  uint32_t p = 1u << 31;  // x^0
  unsigned k = 3;
  for (uint64_t n = len2; n; n >>= 1, ++k)
    if (n & 1) p = multmodp(x2n[k & 31], p);
  return multmodp(p, crc1) ^ crc2;
}

}  // namespace sqrtdk
