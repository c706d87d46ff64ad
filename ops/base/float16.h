// IEEE half (f16) and bfloat16 (bf16) <-> f32, scalar: the file format's conversions and the q8 scales' (gemm.h).
// Narrowing rounds to nearest even; f16 overflow gives Inf; NaN stays a quiet NaN. Widening is exact.
#pragma once

#include <cstdint>

namespace sqrtdk::ops {

float half_to_float(uint16_t h);
uint16_t float_to_half(float f);
float bf16_to_float(uint16_t h);
uint16_t float_to_bf16(float f);

}  // namespace sqrtdk::ops
