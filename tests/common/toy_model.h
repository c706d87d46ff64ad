// Test helpers: temporary folders and small random models written with the C++ writer.
#pragma once

#include <sqrtdk/format.h>
#include <sqrtdk/model.h>

#include "models/family.h"
#include "tests/common/temp_dir.h"

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <random>
#include <string>
#include <unistd.h>
#include <vector>

namespace sqrtdk::test {

inline ModelConfig toy_llama_config() {
  ModelConfig c;
  c.arch = Arch::llama;
  c.d_model = 64;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 16;
  c.d_ff = 96;
  c.n_vocab = 67;
  c.max_seq = 48;
  c.norm_eps = 1e-5f;
  c.rope_theta = 10000.0f;
  return c;
}

inline ModelConfig toy_gpt2_config() {
  ModelConfig c;
  c.arch = Arch::gpt2;
  c.d_model = 48;
  c.n_layers = 2;
  c.n_heads = 3;
  c.n_kv_heads = 3;
  c.head_dim = 16;
  c.d_ff = 80;
  c.n_vocab = 61;
  c.max_seq = 40;
  c.norm_eps = 1e-5f;
  c.rope_theta = 0.0f;
  c.tied_embeddings = true;
  return c;
}

// Writes a model with random weights: linear layers N(0, 0.08), embeddings N(0, 0.5), norm weights 1 ± 0.1, biases
// N(0, 0.05): large enough that every layer changes the logits, small enough that activations stay O(1).
// `tokenizer`: stored as the file's tokenizer section (config.tokenizer must then be bpe).
inline void write_toy_model(const std::string& path, const ModelConfig& config, uint64_t seed,
                            const TokenizerSpec* tokenizer = nullptr) {
  std::mt19937_64 rng(seed);
  std::vector<std::vector<float>> storage;
  std::vector<TensorToWrite> tensors;
  for (const TensorSpec& spec : family_tensors(config)) {
    uint64_t n = 1;
    for (uint64_t d : spec.shape) n *= d;
    std::vector<float> data(n);
    const bool is_norm = spec.name.find("norm.weight") != std::string::npos;
    const bool is_bias = spec.name.find(".bias") != std::string::npos;
    const bool is_emb = spec.name == "tok_emb" || spec.name == "pos_emb";
    std::normal_distribution<float> dist(is_norm ? 1.0f : 0.0f, is_norm ? 0.1f : is_bias ? 0.05f : is_emb ? 0.5f : 0.08f);
    for (float& v : data) v = dist(rng);
    storage.push_back(std::move(data));
    tensors.push_back({spec.name, DType::f32, spec.shape, storage.back().data()});
  }
  write_weight_file(path, config, tensors, tokenizer);
}

// write_toy_model into a temporary folder, loaded (the folder goes; the loaded model does not need the file).
inline std::shared_ptr<const Model> load_toy_model(const ModelConfig& config, uint64_t seed) {
  TempDir dir;
  const std::string path = dir.file("toy.sqdk");
  write_toy_model(path, config, seed);
  return Model::load(path);
}

}  // namespace sqrtdk::test
