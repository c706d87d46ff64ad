// A model's attention path table (ops/attention/attention_paths.h) by ModelOptions::attention_paths: from the
// per-machine cache, measured now, or none (the built-in rule). Kept in
// ($XDG_CACHE_HOME or ~/.cache)/sqrtdk/attention_paths.json, one entry per CPU (machine_cache::cpu_identity), ISA
// and head configuration.
#pragma once

#include <sqrtdk/model.h>

#include "ops/attention/attention_paths.h"

#include <string>

namespace sqrtdk {

struct ResolvedAttentionPaths {
  ops::AttentionPathTable table;  // empty (no points): the built-in rule
  std::string source;             // "built-in rule (...)", "cache <file> (measured <when>)", "measured now (...)"
};

// The cache entry's key: "v<ops::kAttentionPathsRevision>|<cpu identity>|<isa>|<heads>/<kv heads>x<head_dim>". An
// entry of another revision is ignored (and replaced when measured again).
std::string attention_paths_entry_key(Isa isa, size_t n_heads, size_t n_kv_heads, size_t head_dim);

// Thread counts a calibration measures: 1 and the machine's logical cores (once each).
std::vector<int> calibration_threads();

// The ladder's largest point a model of this context needs: the first at or above max_seq (at most the ladder's
// end). A calibration for the model measures up to it; a cached entry measured to fewer keys is measured again
// (extended) under AttentionPaths::calibrate, and used as it is under cached.
size_t ladder_keys_for_context(size_t max_seq);

ResolvedAttentionPaths resolve_attention_paths(Isa isa, size_t n_heads, size_t n_kv_heads, size_t head_dim,
                                               size_t max_seq, AttentionPaths policy);

}  // namespace sqrtdk
