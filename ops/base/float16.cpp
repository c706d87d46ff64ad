// IEEE half and bfloat16 <-> f32 (ops/base/float16.h).
#include "ops/base/float16.h"

#include <cmath>
#include <cstring>

namespace sqrtdk::ops {

float half_to_float(uint16_t h) {
  const uint32_t sign = uint32_t{h & 0x8000u} << 16;
  const uint32_t exp = (h >> 10) & 0x1F, mant = h & 0x3FF;
  uint32_t bits;
  if (exp == 0) {
    const float v = std::ldexp(static_cast<float>(mant), -24);  // zero or subnormal: exact
    return sign ? -v : v;
  } else if (exp == 31) {
    bits = sign | 0x7F800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t float_to_half(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  x &= 0x7FFFFFFFu;
  if (x > 0x7F800000u) return sign | 0x7E00 | static_cast<uint16_t>((x >> 13) & 0x3FF);  // NaN stays quiet NaN
  if (x >= 0x47800000u) return sign | 0x7C00;                                         // >= 65536 (and Inf): Inf
  if (x < 0x38800000u) {  // below 2^-14: f16 subnormal or zero; |f| * 2^24 rounded to nearest even
    float a;
    std::memcpy(&a, &x, 4);
    return sign | static_cast<uint16_t>(std::nearbyint(a * 16777216.0f));
  }
  uint32_t h = (((x >> 23) - 112) << 10) | ((x & 0x7FFFFFu) >> 13);
  const uint32_t rest = x & 0x1FFF;
  if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) ++h;  // round to nearest even; may carry into Inf
  return sign | static_cast<uint16_t>(h);
}

float bf16_to_float(uint16_t h) {
  const uint32_t bits = uint32_t{h} << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t float_to_bf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((x >> 16) | 0x0040);  // quiet NaN
  return static_cast<uint16_t>((x + 0x7FFFu + ((x >> 16) & 1)) >> 16);                     // nearest even
}

}  // namespace sqrtdk::ops
