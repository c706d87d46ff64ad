// Path tables: lookup, the built-in rule, and the calibration that measures a table (attention_paths.h).
#include "ops/attention/attention_paths.h"

#include "ops/base/aligned_buffer.h"
#include "ops/base/thread_pool.h"

#include <sqrtdk/error.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>

namespace sqrtdk::ops {

const char* attention_mode_name(AttentionMode mode) {
  switch (mode) {
    case AttentionMode::decode: return "decode";
    case AttentionMode::causal_prefill: return "causal_prefill";
    case AttentionMode::causal_chunk: return "causal_chunk";
    case AttentionMode::full_prefill: return "full_prefill";
  }
  return "unknown";
}

AttentionMode attention_mode(const AttentionParams& p) {
  if (p.n_queries == 1) return AttentionMode::decode;
  if (!p.causal) return AttentionMode::full_prefill;
  return p.pos0 >= p.n_queries ? AttentionMode::causal_chunk : AttentionMode::causal_prefill;
}

size_t ladder_queries(AttentionMode mode, size_t n_keys) {
  switch (mode) {
    case AttentionMode::decode: return 1;
    case AttentionMode::causal_chunk: return n_keys >= 2 * kChunkQueries ? kChunkQueries : 0;
    case AttentionMode::causal_prefill:
    case AttentionMode::full_prefill: return n_keys;
  }
  return 0;
}

int AttentionPathTable::nearest_point(const AttentionParams& p) const {
  if (!covers(p)) return -1;
  const auto& row = fused_over_unfused[static_cast<size_t>(attention_mode(p))];
  const double want = std::log2(static_cast<double>(std::max<size_t>(p.n_keys(), 1)));
  int best = -1;
  double best_distance = 0;
  for (size_t i = 0; i < kPathLadderSize; ++i) {
    if (!(row[i] > 0)) continue;
    const double distance = std::fabs(std::log2(static_cast<double>(kPathLadderKeys[i])) - want);
    if (best < 0 || distance <= best_distance) best = static_cast<int>(i), best_distance = distance;
  }
  return best;
}

AttentionPath AttentionPathTable::lookup(const AttentionParams& p) const {
  const int i = nearest_point(p);
  if (i < 0) return AttentionPath::automatic;
  const double ratio = fused_over_unfused[static_cast<size_t>(attention_mode(p))][static_cast<size_t>(i)];
  return ratio < 1.0 ? AttentionPath::fused : AttentionPath::unfused;
}

size_t AttentionPathTable::measured_points() const {
  size_t n = 0;
  for (const auto& row : fused_over_unfused)
    for (double r : row) n += r > 0 ? 1 : 0;
  return n;
}

AttentionPath builtin_attention_path(const AttentionParams& p) {
  constexpr size_t kUnfusedScoreCap = size_t{4} << 20;  // floats of one head's scores (see attention.cpp)
  constexpr size_t kMhaDecodeUnfusedKeys = 1024;
  const bool mha = p.n_heads == p.n_kv_heads;
  const size_t n = p.n_queries, m = p.n_keys();
  if (n == 1) return mha && m > kMhaDecodeUnfusedKeys ? AttentionPath::unfused : AttentionPath::fused;
  if (!p.causal) return n * m <= kUnfusedScoreCap ? AttentionPath::unfused : AttentionPath::fused;
  if (mha && p.head_dim >= 128 && m <= 256) return AttentionPath::unfused;
  return AttentionPath::fused;
}

AttentionPath choose_attention_path(const AttentionParams& p, const AttentionPathTable* table) {
  if (p.observe != nullptr) return AttentionPath::unfused;
  if (table != nullptr)
    if (const AttentionPath path = table->lookup(p); path != AttentionPath::automatic) return path;
  return builtin_attention_path(p);
}

// ---- calibration ----

namespace {

using Clock = std::chrono::steady_clock;

// One shape's Q, K/V cache (exactly n_keys rows per kv head) and output, random in [-1, 1].
struct CalibrationProblem {
  AlignedBuffer<float> q, k, v, out;
  AttentionParams p;
  CalibrationProblem(size_t n_heads, size_t n_kv_heads, size_t head_dim, size_t n_queries, size_t n_keys,
                     bool causal) {
    const size_t width = n_heads * head_dim;
    q.allocate(n_queries * width);
    k.allocate(n_kv_heads * n_keys * head_dim);
    v.allocate(n_kv_heads * n_keys * head_dim);
    out.allocate(n_queries * width);
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (AlignedBuffer<float>* b : {&q, &k, &v})
      for (float& x : *b) x = u(rng);
    out.zero();
    p.n_heads = n_heads, p.n_kv_heads = n_kv_heads, p.head_dim = head_dim;
    p.n_queries = n_queries, p.pos0 = n_keys - n_queries, p.causal = causal;
    p.scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
    p.q = q.data(), p.ldq = width, p.k_cache = k.data(), p.v_cache = v.data(), p.cache_stride = n_keys;
    p.out = out.data(), p.ldo = width;
  }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Seconds per call of path `path`: a sample repeats the call until 10 ms have passed (short shapes), or, cold,
// runs it once after writing `evict` (decode: K/V from DRAM).
double sample_seconds(Isa isa, const AttentionParams& p, AttentionWorkspace& ws, int threads, AttentionPath path,
                      AlignedBuffer<float>* evict) {
  if (evict != nullptr) {
    float* e = evict->data();
    const size_t n = evict->size();
    for (size_t i = 0; i < n; i += 16) e[i] = static_cast<float>(i);  // one store per 64-byte line
    // The flush outlasted the helpers' spin: wake them untimed, as a forward pass's previous op would have, so
    // the sample times the attention and not an idle vCPU's wake-up (which both paths paid, hiding their gap).
    wake_pool_helpers(threads);
    const auto t0 = Clock::now();
    attention(isa, p, ws, threads, path);
    return std::chrono::duration<double>(Clock::now() - t0).count();
  }
  int calls = 0;
  const auto t0 = Clock::now();
  double elapsed = 0;
  do {
    attention(isa, p, ws, threads, path);
    ++calls;
    elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
  } while (elapsed < 1e-2);
  return elapsed / calls;
}

}  // namespace

AttentionPathTable calibrate_attention_paths(Isa isa, size_t n_heads, size_t n_kv_heads, size_t head_dim,
                                             const AttentionCalibration& options,
                                             void (*progress)(const std::string& line, void* ctx),
                                             void* progress_ctx) {
  const std::string where = "calibrate_attention_paths(" + std::to_string(n_heads) + " heads, " +
                            std::to_string(n_kv_heads) + " kv heads, head_dim " + std::to_string(head_dim) + ")";
  if (n_heads == 0 || n_kv_heads == 0 || head_dim == 0 || n_heads % n_kv_heads != 0)
    throw Error(where + ": n_heads, n_kv_heads and head_dim must be > 0, n_kv_heads dividing n_heads");
  if (options.threads.empty() || options.reps < 1)
    throw Error(where + ": needs at least one thread count and one rep");
  for (int t : options.threads)
    if (t < 1) throw Error(where + ": thread counts must be >= 1, got " + std::to_string(t));
  if (!cpu_supports(isa)) throw Error(where + ": ISA " + isa_name(isa) + " is not supported by this CPU");

  AttentionPathTable table;
  table.n_heads = n_heads, table.n_kv_heads = n_kv_heads, table.head_dim = head_dim;
  table.threads = options.threads;
  AlignedBuffer<float> evict;
  if (options.evict_bytes > 0) evict.allocate(options.evict_bytes / sizeof(float));
  AttentionWorkspace ws_fused, ws_unfused;
  for (size_t mode = 0; mode < kAttentionModes; ++mode) {
    const AttentionMode kind = static_cast<AttentionMode>(mode);
    const bool decode = kind == AttentionMode::decode, causal = kind != AttentionMode::full_prefill;
    for (size_t i = 0; i < kPathLadderSize; ++i) {
      const size_t m = kPathLadderKeys[i], n = ladder_queries(kind, m);
      if (m > options.max_keys || n == 0) continue;
      // FLOPs of q·k and p·v over the (query, key) pairs a causal call computes: n·(m − n) + n(n + 1)/2.
      const double pairs = causal ? double(n) * double(m - n) + 0.5 * double(n) * double(n + 1) : double(n) * double(m);
      if (4.0 * pairs * double(head_dim) * double(n_heads) > options.max_flops_per_call) continue;
      CalibrationProblem pr(n_heads, n_kv_heads, head_dim, n, m, causal);
      AlignedBuffer<float>* cold = decode && evict.size() > 0 ? &evict : nullptr;
      double log_ratio = 0;
      std::string detail;
      for (int t : options.threads) {
        // Warm both paths (workspace growth, first-touch pages), timing the second call of each to size the reps;
        // then interleave their samples, alternating which goes first, so drift in the machine's load falls on both.
        attention(isa, pr.p, ws_fused, t, AttentionPath::fused);
        attention(isa, pr.p, ws_unfused, t, AttentionPath::unfused);
        const double call = std::max(sample_seconds(isa, pr.p, ws_fused, t, AttentionPath::fused, nullptr),
                                     sample_seconds(isa, pr.p, ws_unfused, t, AttentionPath::unfused, nullptr));
        // A cold decode sample is one call of 40-600 us after a flush, its noise a tenth of it: three times the
        // samples. With reps 5, 12x64 heads at 512 keys chose fused (0.93) in one run and unfused (1.10) in the next,
        // 1 thread, AMD EPYC Zen 5 VM, 2026-12-06. They cost a flush each (~5 ms), about 2 s in all.
        const int reps = cold != nullptr ? 3 * options.reps
                                         : std::clamp(static_cast<int>(0.1 / call) + 1, std::min(3, options.reps),
                                                      options.reps);
        std::vector<double> fused, unfused;
        auto take_samples = [&](int count) {
          for (int r = 0; r < count; ++r) {
            const bool fused_first = r % 2 == 0;
            for (int k = 0; k < 2; ++k) {
              const bool f = (k == 0) == fused_first;
              (f ? fused : unfused)
                  .push_back(sample_seconds(isa, pr.p, f ? ws_fused : ws_unfused, t,
                                            f ? AttentionPath::fused : AttentionPath::unfused, cold));
            }
          }
        };
        take_samples(reps);
        // A near tie (within 5%) is where noise flips the choice: twice the samples there.
        if (std::fabs(std::log(median(fused) / median(unfused))) < std::log(1.05)) take_samples(reps);
        const double ratio = median(fused) / median(unfused);
        log_ratio += std::log(ratio);
        char buf[96];
        std::snprintf(buf, sizeof buf, "%s%d thread%s %.3f", detail.empty() ? "" : ", ", t, t == 1 ? "" : "s",
                      ratio);
        detail += buf;
      }
      const double ratio = std::exp(log_ratio / static_cast<double>(options.threads.size()));
      table.fused_over_unfused[mode][i] = ratio;
      if (progress) {
        char buf[192];
        std::snprintf(buf, sizeof buf, "%s, %zu queries x %zu keys: fused/unfused time %.3f (%s) -> %s",
                      attention_mode_name(kind), n, m, ratio, detail.c_str(), ratio < 1.0 ? "fused" : "unfused");
        progress(buf, progress_ctx);
      }
    }
  }
  return table;
}

std::string describe_attention_paths(const AttentionPathTable& table) {
  std::string s;
  for (size_t mode = 0; mode < kAttentionModes; ++mode) {
    s += attention_mode_name(static_cast<AttentionMode>(mode));
    s += ":";
    bool any = false;
    for (size_t i = 0; i < kPathLadderSize; ++i) {
      const double r = table.fused_over_unfused[mode][i];
      if (!(r > 0)) continue;
      char buf[64];
      std::snprintf(buf, sizeof buf, "%s %zu %.2f %s", any ? "," : "", kPathLadderKeys[i], r,
                    r < 1.0 ? "fused" : "unfused");
      s += buf;
      any = true;
    }
    if (!any) s += " (not measured: the built-in rule)";
    s += "\n";
  }
  return s;
}

}  // namespace sqrtdk::ops
