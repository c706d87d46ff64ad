// ModelConfig's checks and counts: the rules every family shares, then the family's own (models/family.h).
#include <sqrtdk/config.h>
#include <sqrtdk/error.h>

#include "models/family.h"

#include <cmath>
#include <cstdio>
#include <utility>

namespace sqrtdk {
namespace {

// A float as "%g" ("nan", "-1", "1e-30"): std::to_string prints 1e-30 as 0.000000.
std::string shortest(float v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", static_cast<double>(v));
  return buf;
}

}  // namespace

void ModelConfig::validate(const std::string& where) const {
  const std::string w = where + ": config: ";
  auto fail = [&](const std::string& what) { throw Error(w + what); };
  const ModelFamily* family = find_family(arch);
  if (!family)
    fail("unknown arch " + std::to_string(static_cast<uint32_t>(arch)) + " (expected " + family_names(true) + ")");
  const std::pair<const char*, uint32_t> widths[] = {{"d_model", d_model}, {"n_heads", n_heads},
                                                     {"n_kv_heads", n_kv_heads}, {"head_dim", head_dim},
                                                     {"d_ff", d_ff}, {"n_vocab", n_vocab}, {"max_seq", max_seq}};
  for (const auto& [name, value] : widths) {
    if (value == 0) fail(std::string(name) + " is 0 (expected >= 1)");
    if (value > kMaxWidth)
      fail(std::string(name) + " " + std::to_string(value) + " is absurd (expected <= " + std::to_string(kMaxWidth) +
           ")");
  }
  if (n_layers == 0) fail("n_layers is 0 (expected >= 1)");
  if (n_layers > kMaxLayers)
    fail("n_layers " + std::to_string(n_layers) + " is absurd (expected <= " + std::to_string(kMaxLayers) + ")");
  if (uint64_t{n_heads} * head_dim > kMaxWidth)
    fail("n_heads " + std::to_string(n_heads) + " x head_dim " + std::to_string(head_dim) + " is absurd (expected <= " +
         std::to_string(kMaxWidth) + ")");
  if (n_heads % n_kv_heads != 0)
    fail("n_kv_heads " + std::to_string(n_kv_heads) + " does not divide n_heads " + std::to_string(n_heads));
  family->validate(*this, fail);
  if (!(std::isfinite(norm_eps) && norm_eps > 0 && norm_eps < 1))
    fail("norm_eps " + std::to_string(norm_eps) + " (expected finite, > 0 and < 1)");
  if (attention_scale && !(std::isfinite(*attention_scale) && *attention_scale > 0))
    fail("attention_scale " + shortest(*attention_scale) +
         " (expected finite and > 0, or absent for the default 1/sqrt(head_dim))");
  if (tokenizer != TokenizerKind::none && tokenizer != TokenizerKind::byte_level && tokenizer != TokenizerKind::bpe)
    fail("unknown tokenizer " + std::to_string(static_cast<uint32_t>(tokenizer)) +
         " (expected 0 = none, 1 = byte_level or 2 = bpe)");
  if (tokenizer == TokenizerKind::byte_level && n_vocab < 256)
    fail("n_vocab " + std::to_string(n_vocab) + " is too small for the byte-level tokenizer (expected >= 256)");
  for (const auto& [name, id] : {std::pair<const char*, uint32_t>{"bos_id", bos_id}, {"eos_id", eos_id}}) {
    if (id == kNoToken) continue;
    if (id >= n_vocab)
      fail(std::string(name) + " " + std::to_string(id) + " is outside the vocabulary (expected < n_vocab " +
           std::to_string(n_vocab) + " or 0xFFFFFFFF for none)");
    if (tokenizer == TokenizerKind::byte_level && id < 256)
      fail(std::string(name) + " " + std::to_string(id) +
           " is a byte id (the byte-level tokenizer needs special tokens >= 256)");
  }
}

float ModelConfig::attention_scale_or_default() const {
  return attention_scale ? *attention_scale : static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)));
}

uint64_t ModelConfig::n_params() const {
  const ModelFamily* family = find_family(arch);
  return family ? family->n_params(*this) : 0;
}

}  // namespace sqrtdk
