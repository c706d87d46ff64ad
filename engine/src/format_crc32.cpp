// CRC-32 (ISO-HDLC, reflected polynomial 0xEDB88320, init and final xor 0xFFFFFFFF): the value of Python's
// zlib.crc32. Used for the .sqdk header and per-tensor checksums (engine/FORMAT.md).
//
// Two paths, same result: crc32_table() is slicing-by-8 (8 table lookups per 8 bytes, ~1 byte/cycle); crc32() uses
// PCLMULQDQ carry-less folding of 64-byte blocks (Gopal et al., "Fast CRC Computation for Generic Polynomials Using
// PCLMULQDQ", Intel 2009; the constants are the bit-reflected ones of zlib/Chromium's crc32_simd.c) when the CPU has
// PCLMUL and SSE4.1, and the table for the tail. crc32_combine() joins the CRCs of two adjacent pieces, so the
// loader can checksum one large tensor on several threads. No global mutable state: the tables are function-local
// static consts.
#include <sqrtdk/format.h>

#include "engine/src/format_internal.h"

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

// PCLMUL folding over n bytes, n >= 64 and a multiple of 16; `c` is the raw (inverted) state.
__attribute__((target("pclmul,sse4.1"))) uint32_t crc32_raw_pclmul(const unsigned char* buf, size_t n, uint32_t c) {
  alignas(16) static const uint64_t k1k2[] = {0x0154442bd4, 0x01c6e41596};
  alignas(16) static const uint64_t k3k4[] = {0x01751997d0, 0x00ccaa009e};
  alignas(16) static const uint64_t k5k0[] = {0x0163cd6124, 0x0000000000};
  alignas(16) static const uint64_t poly[] = {0x01db710641, 0x01f7011641};

  __m128i x1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(buf + 0x00));
  __m128i x2 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(buf + 0x10));
  __m128i x3 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(buf + 0x20));
  __m128i x4 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(buf + 0x30));
  x1 = _mm_xor_si128(x1, _mm_cvtsi32_si128(static_cast<int>(c)));
  __m128i x0 = _mm_load_si128(reinterpret_cast<const __m128i*>(k1k2));
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

  // Fold the four lanes into one.
  x0 = _mm_load_si128(reinterpret_cast<const __m128i*>(k3k4));
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

bool cpu_has_pclmul() {
  static const bool has = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
  return has;
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

uint32_t crc32_table(const void* data, size_t size, uint32_t crc) {
  return ~crc32_raw_table(static_cast<const unsigned char*>(data), size, ~crc);
}

uint32_t crc32(const void* data, size_t size, uint32_t crc) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t c = ~crc;
  if (size >= 64 && cpu_has_pclmul()) {
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
