// Helpers shared by the CLI subcommands: model/prompt options, token-list parsing, .npy output.
#pragma once

#include <sqrtdk/generate.h>
#include <sqrtdk/model.h>
#include <sqrtdk/session.h>

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace sqrtdk::cli {

// --model, --threads, --isa, --no-verify: shared by every subcommand that runs a model.
struct ModelArgs {
  std::string model;
  int threads = 0;
  std::string isa;
  bool no_verify = false;
  void add_to(CLI::App& cmd);
  std::shared_ptr<const Model> load() const;
};

// --prompt TEXT or --tokens IDS (comma-separated).
struct PromptArgs {
  std::string prompt;
  std::string tokens;
  void add_to(CLI::App& cmd, const std::string& default_prompt);
  // Token ids for the model: --tokens as given, else the prompt through the byte tokenizer (with BOS).
  std::vector<uint32_t> resolve(const ModelConfig& config) const;
};

std::vector<uint32_t> parse_token_list(const std::string& text);

// How a token prints: its byte (escaped if not printable) for byte-level models, else "#id".
std::string token_text(const ModelConfig& config, uint32_t id);

// Writes a float32 array of the given shape as a NumPy .npy file (version 1.0, little-endian, C order).
void write_npy(const std::string& path, const float* data, const std::vector<size_t>& shape);

}  // namespace sqrtdk::cli
