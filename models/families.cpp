// The one list of model families (models/family.h). A family is defined in its own folder; adding one is a line
// here (with its declaration) and its Arch value in <sqrtdk/config.h>.
#include "models/family.h"

#include <sqrtdk/error.h>

#include <iterator>

namespace sqrtdk {

extern const ModelFamily kGpt2Family;   // models/gpt2/gpt2_family.cpp
extern const ModelFamily kLlamaFamily;  // models/llama/llama_family.cpp

namespace {
const ModelFamily* const kFamilies[] = {&kGpt2Family, &kLlamaFamily};
}  // namespace

std::span<const ModelFamily* const> model_families() { return kFamilies; }

const ModelFamily* find_family(Arch arch) {
  for (const ModelFamily* f : kFamilies)
    if (f->arch == arch) return f;
  return nullptr;
}

const ModelFamily& family_of(const ModelConfig& config) {
  if (const ModelFamily* f = find_family(config.arch)) return *f;
  throw Error("no model family has arch " + std::to_string(static_cast<uint32_t>(config.arch)));
}

std::string family_names(bool with_ids) {
  std::string names;
  for (size_t i = 0; i < std::size(kFamilies); ++i) {
    if (i) names += i + 1 == std::size(kFamilies) ? " or " : ", ";
    if (with_ids) names += std::to_string(static_cast<uint32_t>(kFamilies[i]->arch)) + " = ";
    names += kFamilies[i]->name;
  }
  return names;
}

DecodeBytes decode_bytes_per_token(const ModelConfig& config, size_t position) {
  DecodeBytes bytes = family_of(config).decode_weight_bytes(config);
  // Per layer and kv head: head_dim floats of K and of V per position; attention reads positions 0..position.
  const double kv_row = 2.0 * config.n_layers * config.n_kv_heads * config.head_dim * sizeof(float);
  bytes.kv_read = kv_row * (static_cast<double>(position) + 1);
  bytes.kv_written = kv_row;
  return bytes;
}

std::vector<TensorSpec> family_tensors(const ModelConfig& config) { return family_of(config).tensors(config); }
uint64_t family_tensor_count(const ModelConfig& config) { return family_of(config).tensor_count(config); }

const char* arch_name(Arch arch) {
  const ModelFamily* f = find_family(arch);
  return f ? f->name : "unknown";
}

}  // namespace sqrtdk
