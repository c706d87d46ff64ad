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

PrefillWork prefill_work(const ModelConfig& c, size_t n, size_t max_batch) {
  const double block = family_of(c).block_linear_macs(c);
  const double qkv = double(c.d_model) * (c.n_heads + 2.0 * c.n_kv_heads) * c.head_dim;  // fused in every family
  const double head = double(c.d_model) * c.n_vocab;
  PrefillWork w;
  for (size_t p = 0; p < n; ++p) {
    const bool chunk_last_row = (p + 1) % max_batch == 0 || p + 1 == n;
    const double attention = 4.0 * c.head_dim * c.n_heads * (p + 1);  // q·k and p·v over p + 1 keys
    const double macs = chunk_last_row ? c.n_layers * block : (c.n_layers - 1) * block + qkv;
    w.linear_macs += macs;
    w.flops += 2 * macs + (chunk_last_row ? c.n_layers : c.n_layers - 1) * attention;
  }
  w.linear_macs += head;
  w.flops += 2 * head;
  return w;
}

std::vector<TensorSpec> family_tensors(const ModelConfig& config) { return family_of(config).tensors(config); }
uint64_t family_tensor_count(const ModelConfig& config) { return family_of(config).tensor_count(config); }

const char* arch_name(Arch arch) {
  const ModelFamily* f = find_family(arch);
  return f ? f->name : "unknown";
}

}  // namespace sqrtdk
