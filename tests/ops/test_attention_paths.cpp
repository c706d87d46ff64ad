// The attention path table (ops/attention/attention_paths.h): lookup by nearest measured key count, the fallbacks
// to the built-in rule, that attention() follows the table, and the calibration that measures one. The rule's
// mechanism is checked here, never one machine's numbers.
#include <doctest/doctest.h>

#include "ops/attention/attention.h"
#include "ops/attention/attention_paths.h"

#include <sqrtdk/error.h>
#include <sqrtdk/isa.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

using namespace sqrtdk;
using namespace sqrtdk::ops;

namespace {

AttentionParams shape(size_t heads, size_t kv_heads, size_t d, size_t n, size_t m, bool causal) {
  AttentionParams p;
  p.n_heads = heads, p.n_kv_heads = kv_heads, p.head_dim = d, p.n_queries = n, p.pos0 = m - n, p.causal = causal;
  return p;
}

size_t mode_index(AttentionMode mode) { return static_cast<size_t>(mode); }

// A table for 12/12x64 with every decode point fused (0.8), causal prefill unfused (1.25) at 128 keys only, and no
// non-causal point.
AttentionPathTable sample_table() {
  AttentionPathTable t;
  t.n_heads = 12, t.n_kv_heads = 12, t.head_dim = 64, t.threads = {1, 2};
  for (double& r : t.fused_over_unfused[mode_index(AttentionMode::decode)]) r = 0.8;
  t.fused_over_unfused[mode_index(AttentionMode::causal_prefill)][1] = 1.25;  // 128 keys
  return t;
}

}  // namespace

TEST_CASE("attention paths: a table decides where it covers the shape, the built-in rule elsewhere") {
  const AttentionPathTable t = sample_table();
  // Decode, MHA, 8192 keys: the built-in rule says unfused (past 4096 keys); the table's measured 0.8 says fused.
  const AttentionParams decode = shape(12, 12, 64, 1, 8192, true);
  REQUIRE(builtin_attention_path(decode) == AttentionPath::unfused);
  CHECK(choose_attention_path(decode, &t) == AttentionPath::fused);
  // Causal prefill: the one point (128 keys, ratio 1.25) is the nearest for every key count: unfused, where the
  // built-in rule says fused.
  for (size_t m : {64, 128, 1000, 8192}) {
    CAPTURE(m);
    const AttentionParams p = shape(12, 12, 64, m, m, true);
    CHECK(builtin_attention_path(p) == AttentionPath::fused);
    CHECK(choose_attention_path(p, &t) == AttentionPath::unfused);
  }
  // A chunk of a longer prompt (pos0 >= n_queries) is its own mode, with no point here: the built-in rule.
  const AttentionParams chunk = shape(12, 12, 64, 512, 4096, true);
  CHECK(attention_mode(chunk) == AttentionMode::causal_chunk);
  CHECK(attention_mode(shape(12, 12, 64, 512, 1023, true)) == AttentionMode::causal_prefill);
  CHECK(choose_attention_path(chunk, &t) == builtin_attention_path(chunk));
  CHECK(ladder_queries(AttentionMode::causal_chunk, 512) == 0);
  CHECK(ladder_queries(AttentionMode::causal_chunk, 1024) == kChunkQueries);
  CHECK(ladder_queries(AttentionMode::full_prefill, 256) == 256);
  // No non-causal point: the built-in rule.
  const AttentionParams full = shape(12, 12, 64, 4096, 4096, false);
  CHECK(t.nearest_point(full) == -1);
  CHECK(choose_attention_path(full, &t) == builtin_attention_path(full));
  // Another head configuration: the built-in rule.
  const AttentionParams other = shape(32, 8, 128, 1, 2048, true);
  CHECK_FALSE(t.covers(other));
  CHECK(choose_attention_path(other, &t) == builtin_attention_path(other));
  // The probabilities hook: unfused whatever the table says.
  AttentionProbs probs;
  AttentionParams observed = decode;
  observed.observe = &probs;
  CHECK(choose_attention_path(observed, &t) == AttentionPath::unfused);
  CHECK(t.measured_points() == kPathLadderSize + 1);
}

TEST_CASE("attention paths: the nearest measured key count in log2, ties to the larger, ratio 1 is unfused") {
  AttentionPathTable t;
  t.n_heads = 4, t.n_kv_heads = 2, t.head_dim = 32;
  auto& row = t.fused_over_unfused[mode_index(AttentionMode::full_prefill)];
  row[1] = 0.9;  // 128 keys: fused
  row[4] = 1.0;  // 1024 keys: a tie in time goes to unfused
  // log2 distance to 128 (7) and 1024 (10): 300 and 362 (8.4998) are nearer 128, 363 (8.5038) nearer 1024.
  CHECK(t.nearest_point(shape(4, 2, 32, 300, 300, false)) == 1);
  CHECK(t.nearest_point(shape(4, 2, 32, 362, 362, false)) == 1);
  CHECK(t.nearest_point(shape(4, 2, 32, 363, 363, false)) == 4);
  CHECK(t.nearest_point(shape(4, 2, 32, 2, 2, false)) == 1);
  CHECK(t.nearest_point(shape(4, 2, 32, 9000, 9000, false)) == 4);
  CHECK(t.lookup(shape(4, 2, 32, 100, 100, false)) == AttentionPath::fused);
  CHECK(t.lookup(shape(4, 2, 32, 1000, 1000, false)) == AttentionPath::unfused);
  // A chunk of a longer prompt (pos0 > 0) is placed by its key count.
  CHECK(t.lookup(shape(4, 2, 32, 64, 1000, false)) == AttentionPath::unfused);
  CHECK(t.lookup(shape(4, 2, 32, 1, 100, true)) == AttentionPath::automatic);  // no decode point
}

TEST_CASE("attention paths: attention() follows p.paths (its output is the chosen path's, bit for bit)") {
  const size_t heads = 4, kv = 2, d = 32, n = 24, m = 40;
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> q(n * heads * d), k(kv * m * d), v(kv * m * d);
  for (auto* b : {&q, &k, &v})
    for (float& x : *b) x = 2.0f * u(rng);
  AttentionParams p = shape(heads, kv, d, n, m, true);
  p.scale = 1.0f / std::sqrt(float(d));
  p.q = q.data(), p.ldq = heads * d, p.k_cache = k.data(), p.v_cache = v.data(), p.cache_stride = m;
  p.ldo = heads * d;
  const Isa isa = supported_isas().back();
  AttentionWorkspace ws;
  auto run = [&](AttentionPath path, const AttentionPathTable* table) {
    std::vector<float> out(n * heads * d);
    AttentionParams c = p;
    c.out = out.data();
    c.paths = table;
    attention(isa, c, ws, 1, path);
    return out;
  };
  const std::vector<float> fused = run(AttentionPath::fused, nullptr), unfused = run(AttentionPath::unfused, nullptr);
  if (isa != Isa::ref)  // the paths round differently (else this test could not tell them apart)
    REQUIRE(std::memcmp(fused.data(), unfused.data(), fused.size() * sizeof(float)) != 0);
  for (double ratio : {0.5, 2.0}) {
    CAPTURE(ratio);
    AttentionPathTable t;
    t.n_heads = heads, t.n_kv_heads = kv, t.head_dim = d;
    t.fused_over_unfused[mode_index(AttentionMode::causal_prefill)][0] = ratio;
    const std::vector<float> got = run(AttentionPath::automatic, &t);
    const std::vector<float>& want = ratio < 1 ? fused : unfused;
    CHECK(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0);
    // A forced path is not overridden by the table.
    const std::vector<float> forced = run(ratio < 1 ? AttentionPath::unfused : AttentionPath::fused, &t);
    CHECK(std::memcmp(forced.data(), (ratio < 1 ? unfused : fused).data(), got.size() * sizeof(float)) == 0);
  }
}

TEST_CASE("attention paths: calibration measures every mode within its budget, and rejects bad settings") {
  AttentionCalibration cal;
  cal.threads = {1, 2};
  cal.reps = 1;
  cal.max_keys = 128;             // ladder points 64 and 128
  // FLOPs per call 4·pairs·d·heads (causal pairs m(m+1)/2): 64 keys 524 288 (causal 266 240), 128 keys
  // 2 097 152 (causal 1 056 768): all fit but non-causal 128. causal_chunk starts at 1024 keys: none.
  cal.max_flops_per_call = 1.5e6;
  cal.evict_bytes = 1 << 20;
  std::vector<std::string> lines;
  auto progress = [](const std::string& line, void* ctx) { static_cast<std::vector<std::string>*>(ctx)->push_back(line); };
  const AttentionPathTable t = calibrate_attention_paths(supported_isas().back(), 2, 1, 16, cal, progress, &lines);
  CHECK(t.n_heads == 2);
  CHECK(t.n_kv_heads == 1);
  CHECK(t.head_dim == 16);
  CHECK(t.threads == std::vector<int>{1, 2});
  auto measured = [&](AttentionMode mode, size_t i) { return t.fused_over_unfused[mode_index(mode)][i]; };
  for (AttentionMode mode : {AttentionMode::decode, AttentionMode::causal_prefill, AttentionMode::full_prefill}) {
    CAPTURE(std::string(attention_mode_name(mode)));
    CHECK(std::isfinite(measured(mode, 0)));
    CHECK(measured(mode, 0) > 0);
    for (size_t i = 2; i < kPathLadderSize; ++i) CHECK(measured(mode, i) == 0);  // past max_keys
  }
  CHECK(measured(AttentionMode::decode, 1) > 0);           // decode has no FLOP budget
  CHECK(measured(AttentionMode::causal_prefill, 1) > 0);   // causal 128: within
  CHECK(measured(AttentionMode::full_prefill, 1) == 0);    // non-causal 128: over the budget
  for (size_t i = 0; i < kPathLadderSize; ++i) CHECK(measured(AttentionMode::causal_chunk, i) == 0);
  // A line per point measured, then a "recheck: " line for each point whose first ratio lay within
  // recheck_band of a tie (the tiny shapes here land on either side, run to run).
  std::vector<std::string> first, rechecked;
  for (const std::string& line : lines) (line.rfind("recheck: ", 0) == 0 ? rechecked : first).push_back(line);
  CHECK(first.size() == t.measured_points());
  CHECK(first.at(0).find("decode, 1 queries x 64 keys") == 0);
  for (const std::string& line : first) {
    CAPTURE(line);
    const double ratio = std::stod(line.substr(line.find("fused/unfused time ") + 19));
    // The line rounds to 3 decimals: a ratio that close to the band's edge may fall either way.
    if (std::fabs(std::fabs(std::log(ratio)) - std::log(cal.recheck_band)) < 2e-3) continue;
    const std::string point = line.substr(0, line.find(':'));
    const bool was_rechecked = std::any_of(rechecked.begin(), rechecked.end(), [&](const std::string& r) {
      return r.compare(9, point.size() + 1, point + ":") == 0;
    });
    CHECK(was_rechecked == needs_recheck(ratio, cal.recheck_band));
  }
  for (const std::string& line : rechecked) CHECK(line.find("; first pass ") != std::string::npos);
  CHECK(describe_attention_paths(t).find("full_prefill: 64 ") != std::string::npos);

  // Only near ties are measured again; a band of 1 or less turns the recheck off.
  CHECK(needs_recheck(1.10, 1.15));
  CHECK(needs_recheck(1.0 / 1.10, 1.15));
  CHECK_FALSE(needs_recheck(1.20, 1.15));
  CHECK_FALSE(needs_recheck(0.85, 1.15));  // |ln 0.85| = 0.163 > ln 1.15 = 0.140
  CHECK_FALSE(needs_recheck(1.0, 1.0));
  CHECK_FALSE(needs_recheck(0.0, 1.15));  // not measured

  AttentionCalibration bad = cal;
  bad.threads = {};
  CHECK_THROWS_WITH_AS(calibrate_attention_paths(Isa::ref, 2, 1, 16, bad), doctest::Contains("thread count"), Error);
  bad = cal;
  bad.threads = {0};
  CHECK_THROWS_WITH_AS(calibrate_attention_paths(Isa::ref, 2, 1, 16, bad), doctest::Contains(">= 1"), Error);
  CHECK_THROWS_WITH_AS(calibrate_attention_paths(Isa::ref, 3, 2, 16, cal), doctest::Contains("dividing"), Error);
}
