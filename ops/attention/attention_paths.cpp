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
  constexpr size_t kMhaDecodeUnfusedKeys = 4096;
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

// One ladder point's samples at one thread count (seconds per call), pooled over the passes that measured it.
struct ThreadSamples {
  std::vector<double> fused, unfused;
  int reps = 0;  // samples per path one pass takes
  double ratio() const { return median(fused) / median(unfused); }
};

struct LadderPoint {
  size_t mode = 0, index = 0;
  std::vector<ThreadSamples> per_thread;  // in the order of AttentionCalibration::threads
  // The geometric mean of the thread counts' ratios, and their list for the progress line.
  double ratio(std::string* detail) const {
    double log_ratio = 0;
    for (size_t k = 0; k < per_thread.size(); ++k) {
      const double r = per_thread[k].ratio();
      log_ratio += std::log(r);
      if (detail) {
        char buf[64];
        std::snprintf(buf, sizeof buf, "%s%.3f", k == 0 ? "" : " / ", r);
        *detail += buf;
      }
    }
    return std::exp(log_ratio / static_cast<double>(per_thread.size()));
  }
};

// One pass over a point: both paths warmed (workspace growth, first-touch pages), then their samples interleaved,
// alternating which goes first, so drift in the machine's load falls on both. The first pass sizes the reps.
void measure_point(Isa isa, size_t n_heads, size_t n_kv_heads, size_t head_dim, const AttentionCalibration& options,
                   AlignedBuffer<float>& evict, AttentionWorkspace& ws_fused, AttentionWorkspace& ws_unfused,
                   LadderPoint& point) {
  const AttentionMode kind = static_cast<AttentionMode>(point.mode);
  const size_t m = kPathLadderKeys[point.index], n = ladder_queries(kind, m);
  CalibrationProblem pr(n_heads, n_kv_heads, head_dim, n, m, kind != AttentionMode::full_prefill);
  AlignedBuffer<float>* cold = kind == AttentionMode::decode && evict.size() > 0 ? &evict : nullptr;
  const bool first_pass = point.per_thread.empty();
  if (first_pass) point.per_thread.resize(options.threads.size());
  for (size_t k = 0; k < options.threads.size(); ++k) {
    const int t = options.threads[k];
    ThreadSamples& s = point.per_thread[k];
    attention(isa, pr.p, ws_fused, t, AttentionPath::fused);
    attention(isa, pr.p, ws_unfused, t, AttentionPath::unfused);
    auto take_samples = [&](int count) {
      for (int r = 0; r < count; ++r) {
        const bool fused_first = r % 2 == 0;
        for (int j = 0; j < 2; ++j) {
          const bool f = (j == 0) == fused_first;
          (f ? s.fused : s.unfused)
              .push_back(sample_seconds(isa, pr.p, f ? ws_fused : ws_unfused, t,
                                        f ? AttentionPath::fused : AttentionPath::unfused, cold));
        }
      }
    };
    if (first_pass) {
      // The reps from the second call of each path (the first warmed it). A cold decode sample is one call of
      // 40-600 us after a flush, its noise a tenth of it: three times the samples. With reps 5, 12x64 heads at 512
      // keys chose fused (0.93) in one run and unfused (1.10) in the next, 1 thread, AMD EPYC Zen 5 VM, 2026-12-06.
      // They cost a flush each (~5 ms), about 2 s in all.
      const double call = std::max(sample_seconds(isa, pr.p, ws_fused, t, AttentionPath::fused, nullptr),
                                   sample_seconds(isa, pr.p, ws_unfused, t, AttentionPath::unfused, nullptr));
      s.reps = cold != nullptr ? 3 * options.reps
                               : std::clamp(static_cast<int>(0.1 / call) + 1, std::min(3, options.reps),
                                            options.reps);
    }
    take_samples(s.reps);
    // A near tie (within 5%) is where noise flips the choice: twice the samples there (the first pass; a recheck
    // pools with it).
    if (first_pass && std::fabs(std::log(s.ratio())) < std::log(1.05)) take_samples(s.reps);
  }
}

}  // namespace

bool needs_recheck(double fused_over_unfused, double band) {
  return band > 1.0 && fused_over_unfused > 0 && std::fabs(std::log(fused_over_unfused)) < std::log(band);
}

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
  auto report = [&](const LadderPoint& point, const char* pass, double first_ratio) {
    if (!progress) return;
    const AttentionMode kind = static_cast<AttentionMode>(point.mode);
    const size_t m = kPathLadderKeys[point.index];
    std::string detail;
    const double ratio = point.ratio(&detail);
    char buf[256];
    std::snprintf(buf, sizeof buf, "%s%s, %zu queries x %zu keys: fused/unfused time %.3f (%s at threads", pass,
                  attention_mode_name(kind), ladder_queries(kind, m), m, ratio, detail.c_str());
    std::string line = buf;
    for (size_t k = 0; k < options.threads.size(); ++k)
      line += (k ? " / " : " ") + std::to_string(options.threads[k]);
    if (first_ratio > 0) {
      std::snprintf(buf, sizeof buf, "; first pass %.3f", first_ratio);
      line += buf;
    }
    line += ratio < 1.0 ? ") -> fused" : ") -> unfused";
    progress(line, progress_ctx);
  };

  std::vector<LadderPoint> points;
  for (size_t mode = 0; mode < kAttentionModes; ++mode) {
    const AttentionMode kind = static_cast<AttentionMode>(mode);
    const bool causal = kind != AttentionMode::full_prefill;
    for (size_t i = 0; i < kPathLadderSize; ++i) {
      const size_t m = kPathLadderKeys[i], n = ladder_queries(kind, m);
      if (m > options.max_keys || n == 0) continue;
      // FLOPs of q·k and p·v over the (query, key) pairs a causal call computes: n·(m − n) + n(n + 1)/2.
      const double pairs = causal ? double(n) * double(m - n) + 0.5 * double(n) * double(n + 1) : double(n) * double(m);
      if (4.0 * pairs * double(head_dim) * double(n_heads) > options.max_flops_per_call) continue;
      LadderPoint& point = points.emplace_back();
      point.mode = mode, point.index = i;
      measure_point(isa, n_heads, n_kv_heads, head_dim, options, evict, ws_fused, ws_unfused, point);
      report(point, "", 0);
    }
  }
  // The recheck pass, after the whole sweep (seconds to minutes later): a burst of load on a shared host lasts
  // seconds and can skew every sample of one point, interleaved or not, where a later pass is unlikely to meet it.
  // Seen on Zen 5, 2026-12-06: one calibration read 32x128 heads' 512-query chunk at 2048 keys 1.05 (unfused),
  // three calibrations after it 0.86-0.88, and bench-attention found fused 10-11% faster. Only the points near a
  // tie are measured again (far from one, no burst flips the choice); their samples are pooled with the first.
  for (LadderPoint& point : points) {
    const double first = point.ratio(nullptr);
    if (!needs_recheck(first, options.recheck_band)) continue;
    measure_point(isa, n_heads, n_kv_heads, head_dim, options, evict, ws_fused, ws_unfused, point);
    report(point, "recheck: ", first);
  }
  for (const LadderPoint& point : points) table.fused_over_unfused[point.mode][point.index] = point.ratio(nullptr);
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
