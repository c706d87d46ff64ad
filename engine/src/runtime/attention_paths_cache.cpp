#include "engine/src/runtime/attention_paths_cache.h"

#include "engine/src/runtime/machine_cache.h"
#include "ops/base/threading.h"

#include <cstdio>
#include <fstream>
#include <thread>

namespace sqrtdk {

std::string attention_paths_entry_key(Isa isa, size_t n_heads, size_t n_kv_heads, size_t head_dim) {
  // Appended piece by piece: GCC 12 warns (-Wrestrict, a false positive) on "literal" + a temporary std::string.
  std::string key = "v";
  key += std::to_string(ops::kAttentionPathsRevision);
  key += '|';
  key += machine_cache::cpu_identity();
  key += '|';
  key += isa_name(isa);
  key += '|';
  key += std::to_string(n_heads);
  key += '/';
  key += std::to_string(n_kv_heads);
  key += 'x';
  key += std::to_string(head_dim);
  return key;
}

namespace {

nlohmann::json to_json(const ops::AttentionPathTable& t) {
  nlohmann::json ratios = nlohmann::json::object();
  for (size_t mode = 0; mode < ops::kAttentionModes; ++mode) {
    nlohmann::json row = nlohmann::json::array();
    for (double r : t.fused_over_unfused[mode]) row.push_back(r > 0 ? nlohmann::json(r) : nlohmann::json());
    ratios[ops::attention_mode_name(static_cast<ops::AttentionMode>(mode))] = row;
  }
  return {{"keys", ops::kPathLadderKeys}, {"threads", t.threads}, {"fused_over_unfused", ratios}};
}

// Throws (caught by the caller: the entry is then re-measured) when a field is missing or of another ladder.
ops::AttentionPathTable from_json(const nlohmann::json& e, size_t n_heads, size_t n_kv_heads, size_t head_dim) {
  ops::AttentionPathTable t;
  t.n_heads = n_heads, t.n_kv_heads = n_kv_heads, t.head_dim = head_dim;
  if (e.at("keys").get<std::vector<size_t>>() !=
      std::vector<size_t>(ops::kPathLadderKeys.begin(), ops::kPathLadderKeys.end()))
    throw std::runtime_error("another ladder");
  t.threads = e.at("threads").get<std::vector<int>>();
  for (size_t mode = 0; mode < ops::kAttentionModes; ++mode) {
    const auto& row = e.at("fused_over_unfused").at(ops::attention_mode_name(static_cast<ops::AttentionMode>(mode)));
    if (row.size() != ops::kPathLadderSize) throw std::runtime_error("row size");
    for (size_t i = 0; i < ops::kPathLadderSize; ++i) t.fused_over_unfused[mode][i] = row[i].is_null() ? 0 : row[i].get<double>();
  }
  return t;
}

void print_progress(const std::string& line, void*) { std::fprintf(stderr, "sqrtdk: calibrate: %s\n", line.c_str()); }

}  // namespace

std::vector<int> calibration_threads() {
  const int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  return cores == 1 ? std::vector<int>{1} : std::vector<int>{1, cores};
}

size_t ladder_keys_for_context(size_t max_seq) {
  for (size_t keys : ops::kPathLadderKeys)
    if (keys >= max_seq) return keys;
  return ops::kPathLadderKeys.back();
}

ResolvedAttentionPaths resolve_attention_paths(Isa isa, size_t n_heads, size_t n_kv_heads, size_t head_dim,
                                               size_t max_seq, AttentionPaths policy) {
  ResolvedAttentionPaths out;
  if (policy == AttentionPaths::builtin) {
    out.source = "built-in rule (ModelOptions::attention_paths = builtin)";
    return out;
  }
  const std::filesystem::path dir = machine_cache::folder();
  const std::filesystem::path file = dir / "attention_paths.json";
  const std::string key = attention_paths_entry_key(isa, n_heads, n_kv_heads, head_dim);
  nlohmann::json cache = dir.empty() ? nlohmann::json::object() : machine_cache::read_object(file);
  const size_t max_keys = ladder_keys_for_context(max_seq);
  if (policy != AttentionPaths::recalibrate && cache.contains(key)) {
    try {
      const nlohmann::json& e = cache[key];
      out.table = from_json(e, n_heads, n_kv_heads, head_dim);
      const size_t measured_to = e.at("max_keys").get<size_t>();
      out.source = "cache " + file.string() + " (measured " + e.value("measured_at", std::string("?")) + " up to " +
                   std::to_string(measured_to) + " keys)";
      if (policy == AttentionPaths::cached || measured_to >= max_keys) return out;
    } catch (const std::exception&) {
      out.table = {};  // a damaged entry: measured again below when asked to, else the built-in rule
    }
  }
  if (policy == AttentionPaths::cached) {
    out.table = {};
    out.source = "built-in rule (this machine has no measured table for " + std::to_string(n_heads) + "/" +
                 std::to_string(n_kv_heads) + "x" + std::to_string(head_dim) + " heads: `sqrtdk calibrate`)";
    return out;
  }
  ops::AttentionCalibration options;
  options.threads = calibration_threads();
  options.max_keys = max_keys;
  out.table = ops::calibrate_attention_paths(isa, n_heads, n_kv_heads, head_dim, options,
                                             verbose() ? print_progress : nullptr);
  if (dir.empty()) {
    out.source = "measured now (not cached: neither XDG_CACHE_HOME nor HOME is set)";
    return out;
  }
  nlohmann::json entry = to_json(out.table);
  entry["measured_at"] = machine_cache::utc_now();
  entry["max_keys"] = max_keys;
  cache[key] = entry;
  const std::string failed = machine_cache::write_atomically(file, cache);
  out.source = failed.empty() ? "measured now (cached in " + file.string() + ")" : "measured now (not cached: " + failed + ")";
  return out;
}

}  // namespace sqrtdk
