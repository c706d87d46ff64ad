// The weight plan's view of a model file: a family's load_weights (models/family.h) asks for tensors by name and
// shape; the engine implements it over the .sqdk mapping (engine/src/runtime/model.cpp), with checks that name the
// file and tensor, f16/bf16 widened to f32, and each linear packed once for the GEMM.
#pragma once

#include "models/runtime/model_weights.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace sqrtdk {

class WeightLoader {
 public:
  using Parts = std::vector<std::pair<std::string, uint64_t>>;  // (tensor name, rows)
  virtual ~WeightLoader() = default;
  // The tensor `name` of exactly `shape`, copied to f32 (norm weights, biases, position tables).
  virtual AlignedBuffer<float> copy(const std::string& name, const std::vector<uint64_t>& shape) = 0;
  // An embedding table [rows, width] as f32 rows: read in place from the file when stored as f32, else widened
  // into `storage`. The pointer lives as long as the model.
  virtual const float* embedding(const std::string& name, uint64_t rows, uint64_t width,
                                 AlignedBuffer<float>& storage) = 0;
  // The row-concatenation of `weights` (each [rows_i, K]) packed as one linear layer [Σ rows_i, K], with the
  // concatenated `biases` (each [n_i]) if given.
  virtual Linear linear(const Parts& weights, uint64_t K, const Parts& biases = {}) = 0;
};

}  // namespace sqrtdk
