// The reference forward pass of a .sqdk file (the family's executable spec, models/family.h): logits for every
// position, [tokens.size(), n_vocab], computed with the scalar ref ops from the file's weights read as f32.
// Tests and tools compare the engine's fast path against it.
#pragma once

#include <sqrtdk/format.h>

#include <cstdint>
#include <span>
#include <vector>

namespace sqrtdk {

std::vector<float> reference_forward(const WeightFile& file, std::span<const uint32_t> tokens);

}  // namespace sqrtdk
