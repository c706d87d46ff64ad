// ModelOptions::attention_paths: where a model's attention path table comes from (engine/src/runtime/
// attention_paths_cache.cpp): the per-machine cache, a measurement, or the built-in rule; and what a damaged or
// short cache entry does.
#include <doctest/doctest.h>

#include "engine/src/runtime/attention_paths_cache.h"
#include "engine/src/runtime/machine_cache.h"
#include "engine/src/runtime/model_impl.h"
#include "tests/common/cache_home.h"

#include <sqrtdk/model.h>

#include <fstream>
#include <string>

using namespace sqrtdk;

namespace {

const std::string kBundled = SQRTDK_SOURCE_DIR "/models/tiny-llama-bytes.sqdk";  // 8 heads / 4 kv heads x 32

using test::CacheHome;

std::shared_ptr<const Model> load(AttentionPaths policy) {
  ModelOptions mo;
  mo.attention_paths = policy;
  return Model::load(kBundled, mo);
}

// A cache entry for the bundled model's heads on this machine, every point with `ratio`, measured up to max_keys.
void write_entry(const std::filesystem::path& file, Isa isa, double ratio, size_t max_keys) {
  nlohmann::json rows = nlohmann::json::object();
  for (size_t mode = 0; mode < ops::kAttentionModes; ++mode) {
    const auto kind = static_cast<ops::AttentionMode>(mode);
    nlohmann::json row = nlohmann::json::array();
    for (size_t keys : ops::kPathLadderKeys)
      row.push_back(keys <= max_keys && ops::ladder_queries(kind, keys) > 0 ? nlohmann::json(ratio) : nlohmann::json());
    rows[ops::attention_mode_name(kind)] = row;
  }
  nlohmann::json cache = nlohmann::json::object();
  cache[attention_paths_entry_key(isa, 8, 4, 32)] = {
      {"keys", ops::kPathLadderKeys},
      {"threads", {1, 2}},
      {"fused_over_unfused", rows},
      {"measured_at", "2026-12-01T00:00:00Z"},
      {"max_keys", max_keys}};
  REQUIRE(machine_cache::write_atomically(file, cache).empty());
}

}  // namespace

TEST_CASE("attention paths cache: builtin reads nothing; cached without an entry says how to measure one") {
  CacheHome home;
  const auto builtin = load(AttentionPaths::builtin);
  CHECK(builtin->attention_paths_source().rfind("built-in rule (ModelOptions", 0) == 0);
  CHECK(builtin->attention_paths_table().empty());
  const auto cached = load(AttentionPaths::cached);
  CHECK(cached->attention_paths_source().find("sqrtdk calibrate") != std::string::npos);
  CHECK(cached->impl().weights.attention_paths.measured_points() == 0);
  CHECK_FALSE(std::filesystem::exists(home.file("attention_paths.json")));  // cached never measures or writes
}

TEST_CASE("attention paths cache: an entry for this CPU, ISA and heads is the model's table") {
  CacheHome home;
  const Isa isa = default_isa();
  write_entry(home.file("attention_paths.json"), isa, 2.0, 256);  // unfused everywhere, up to the bundled model's context (256)
  const auto m = load(AttentionPaths::cached);
  CAPTURE(m->attention_paths_source());
  CHECK(m->attention_paths_source().rfind("cache " + home.file("attention_paths.json").string(), 0) == 0);
  CHECK(m->attention_paths_source().find("up to 256 keys") != std::string::npos);
  const ops::AttentionPathTable& t = m->impl().weights.attention_paths;
  CHECK(t.measured_points() == 3 * 3);  // 64, 128, 256 in each mode but causal_chunk (1024 keys and up)
  ops::AttentionParams p;
  p.n_heads = 8, p.n_kv_heads = 4, p.head_dim = 32, p.n_queries = 1, p.pos0 = 99;
  CHECK(ops::choose_attention_path(p, &t) == ops::AttentionPath::unfused);
  CHECK(m->attention_paths_table().find("decode: 64 2.00 unfused") == 0);
  // `calibrate` uses it too: it was measured up to the keys this model's context needs.
  CHECK(load(AttentionPaths::calibrate)->attention_paths_source().rfind("cache ", 0) == 0);
}

TEST_CASE("attention paths cache: a damaged file or entry falls back to the built-in rule, never an error") {
  CacheHome home;
  std::filesystem::create_directories(home.file("attention_paths.json").parent_path());
  { std::ofstream(home.file("attention_paths.json")) << "{ not json"; }
  CHECK(load(AttentionPaths::cached)->attention_paths_source().rfind("built-in rule", 0) == 0);
  nlohmann::json cache = {{attention_paths_entry_key(default_isa(), 8, 4, 32),
                           {{"keys", {1, 2, 3}}, {"threads", {1}}}}};  // another ladder
  REQUIRE(machine_cache::write_atomically(home.file("attention_paths.json"), cache).empty());
  CHECK(load(AttentionPaths::cached)->attention_paths_source().rfind("built-in rule", 0) == 0);
}

TEST_CASE("attention paths cache: a table of an older revision is not used (measured by another build's kernels)") {
  CacheHome home;
  const Isa isa = default_isa();
  write_entry(home.file("attention_paths.json"), isa, 2.0, 256);
  nlohmann::json cache = nlohmann::json::parse(std::ifstream(home.file("attention_paths.json")));
  const std::string key = attention_paths_entry_key(isa, 8, 4, 32);
  REQUIRE(key.rfind("v" + std::to_string(ops::kAttentionPathsRevision) + "|", 0) == 0);
  CHECK(load(AttentionPaths::cached)->attention_paths_source().rfind("cache ", 0) == 0);  // this revision: used
  const std::string older = "v" + std::to_string(ops::kAttentionPathsRevision - 1) + key.substr(key.find('|'));
  cache[older] = cache[key];
  cache.erase(key);
  REQUIRE(machine_cache::write_atomically(home.file("attention_paths.json"), cache).empty());
  CHECK(load(AttentionPaths::cached)->attention_paths_source().rfind("built-in rule", 0) == 0);
}

TEST_CASE("attention paths cache: the ladder point a context needs") {
  CHECK(ladder_keys_for_context(1) == 64);
  CHECK(ladder_keys_for_context(256) == 256);
  CHECK(ladder_keys_for_context(257) == 512);
  CHECK(ladder_keys_for_context(1u << 20) == 8192);
}

TEST_CASE("machine cache: the CPU identity carries the model numbers, not only the name") {
  const std::string id = machine_cache::cpu_identity();
  CAPTURE(id);
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  bool has_family = false;
  while (std::getline(in, line) && !line.empty()) has_family |= line.rfind("cpu family", 0) == 0;
  if (has_family) CHECK(id.find(" model ") != std::string::npos);
}
