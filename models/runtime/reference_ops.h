// Building blocks of the families' reference forward passes (models/<family>/<family>_reference.cpp): plain
// scalar ref ops over whole sequences, no cache, no packing.
#pragma once

#include <sqrtdk/config.h>

#include <cstddef>
#include <vector>

namespace sqrtdk::reference {

// y[n, N] = x[n, K] · W[N, K]ᵀ (+ bias)
std::vector<float> linear(const std::vector<float>& x, size_t n, size_t K, const std::vector<float>& w, size_t N,
                          const float* bias = nullptr);

// Causal attention over all n tokens: q [n, n_heads·hd], k and v [n, n_kv_heads·hd]; scale
// c.attention_scale_or_default() (1/√head_dim unless the file sets one).
std::vector<float> attention(const ModelConfig& c, const std::vector<float>& q, const std::vector<float>& k,
                             const std::vector<float>& v, size_t n);

}  // namespace sqrtdk::reference
