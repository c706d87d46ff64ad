// The llama family's pieces, defined across models/llama/ and gathered into its ModelFamily in llama_family.cpp.
#pragma once

#include "models/family.h"

namespace sqrtdk {

void llama_forward(ForwardState& s, const uint32_t* tokens, size_t n, size_t pos0);              // llama.cpp
std::vector<float> llama_reference_forward(const ModelConfig& config, const TensorReader& read,  // llama_reference.cpp
                                           std::span<const uint32_t> tokens);

}  // namespace sqrtdk
