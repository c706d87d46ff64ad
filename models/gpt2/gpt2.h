// The gpt2 family's pieces, defined across models/gpt2/ and gathered into its ModelFamily in gpt2_family.cpp.
#pragma once

#include "models/family.h"

namespace sqrtdk {

void gpt2_forward(ForwardState& s, const uint32_t* tokens, size_t n, size_t pos0);              // gpt2.cpp
std::vector<float> gpt2_reference_forward(const ModelConfig& config, const TensorReader& read,  // gpt2_reference.cpp
                                          std::span<const uint32_t> tokens);

}  // namespace sqrtdk
