// bench-attention: multi-head attention, prefill and decode, fused vs unfused (ours) vs an unfused path built
// from oneDNN primitives (matmul with output scale [+ causal mask as a binary-add post-op], softmax, matmul), same
// run, prefill samples interleaved (fused, unfused, oneDNN, fused, ...). Prefill (whole prompts, and causal chunks of 512 queries at the end of a longer prompt, as the engine runs
// them): GFLOP/s counting 4·d per head and (query, key) pair computed, % of the FMA peak measured in this run,
// peak scratch memory. Decode (one query against a cache of m keys): GB/s of K and V read with the caches cold
// (96 MiB written before each call, so K/V come from DRAM as in a real forward pass) and, for reference, warm;
// % of the DRAM read bandwidth measured in this run: the roofs are measured before and again after each thread
// count's rows, and the higher of each figure is the one the shares are of (as `sqrtdk bench` does: on a shared VM
// one measurement before the rows once read the 2-thread DRAM roof at 50 GB/s where a decode row then read 71,
// and the cell said roof?). "auto": the path the engine's automatic choice takes for the
// shape, from this machine's measured table for the head configuration (attention_paths.h; measured now and cached
// when absent, as `sqrtdk calibrate` does), and how much slower it is than the faster of the two here (+0%: it is
// the faster); the last lines give the worst such loss.
//   --max-seq N   skip prefill sequences / decode caches longer than N
//   --builtin     judge the built-in rule instead of this machine's table
#include "ops/attention/attention.h"
#include "ops/attention/attention_kernels.h"
#include "ops/attention/attention_paths.h"
#include "engine/src/runtime/attention_paths_cache.h"
#include "perf/common/bench_util.h"

#include "ops/base/aligned_buffer.h"

#include <dnnl.hpp>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <limits>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

using namespace sqrtdk;
using namespace sqrtdk::perf;
using ops::AttentionParams;
using ops::AttentionPath;
using ops::AttentionWorkspace;

namespace {

struct HeadConfig {
  const char* name;
  size_t n_heads, n_kv_heads, head_dim;
};

// Q, K/V cache and output for one shape (the cache holds exactly n_keys rows per kv head).
struct Problem {
  AlignedBuffer<float> q, k, v, out;
  AttentionParams p;
  Problem(const HeadConfig& hc, size_t n_queries, size_t n_keys, bool causal) {
    const size_t width = hc.n_heads * hc.head_dim;
    q.allocate(n_queries * width);
    k.allocate(hc.n_kv_heads * n_keys * hc.head_dim);
    v.allocate(hc.n_kv_heads * n_keys * hc.head_dim);
    out.allocate(n_queries * width);
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (float& x : q) x = u(rng);
    for (float& x : k) x = u(rng);
    for (float& x : v) x = u(rng);
    out.zero();
    p.n_heads = hc.n_heads, p.n_kv_heads = hc.n_kv_heads, p.head_dim = hc.head_dim;
    p.n_queries = n_queries, p.pos0 = n_keys - n_queries, p.causal = causal;
    p.scale = 1.0f / std::sqrt(float(hc.head_dim));
    p.q = q.data(), p.ldq = width, p.k_cache = k.data(), p.v_cache = v.data(), p.cache_stride = n_keys;
    p.out = out.data(), p.ldo = width;
  }
};

// The oneDNN peer: per head, scores = scale·Q·Kᵀ (+ causal mask) -> softmax -> ·V, primitives created once.
struct OnednnAttention {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  dnnl::matmul qk, pv;
  dnnl::softmax_forward sm;
  dnnl::memory::desc q_md, k_md, s_md, v_md, o_md, mask_md;
  AlignedBuffer<float> scores, mask;
  const AttentionParams& p;

  explicit OnednnAttention(const AttentionParams& params) : p(params) {
    using dim = dnnl::memory::dim;
    using dt = dnnl::memory::data_type;
    const dim n = dim(p.n_queries), m = dim(p.n_keys()), d = dim(p.head_dim);
    q_md = dnnl::memory::desc({n, d}, dt::f32, dnnl::memory::dims{dim(p.ldq), 1});
    k_md = dnnl::memory::desc({d, m}, dt::f32, dnnl::memory::dims{1, d});  // Kᵀ view of K [m][d]
    s_md = dnnl::memory::desc({n, m}, dt::f32, dnnl::memory::dims{m, 1});
    v_md = dnnl::memory::desc({m, d}, dt::f32, dnnl::memory::dims{d, 1});
    o_md = dnnl::memory::desc({n, d}, dt::f32, dnnl::memory::dims{dim(p.ldo), 1});
    dnnl::primitive_attr qk_attr;
    qk_attr.set_output_scales(0, {p.scale});
    if (p.causal) {
      mask_md = s_md;
      mask.allocate(size_t(n * m));
      for (size_t i = 0; i < p.n_queries; ++i)
        for (size_t j = 0; j < p.n_keys(); ++j)
          mask[i * size_t(m) + j] = j > p.pos0 + i ? -std::numeric_limits<float>::infinity() : 0.0f;
      dnnl::post_ops ops;
      ops.append_binary(dnnl::algorithm::binary_add, mask_md);
      qk_attr.set_post_ops(ops);
    }
    qk = dnnl::matmul(dnnl::matmul::primitive_desc(dnnl::matmul::desc(q_md, k_md, s_md), qk_attr, engine));
    pv = dnnl::matmul(dnnl::matmul::primitive_desc(dnnl::matmul::desc(s_md, v_md, o_md), engine));
    sm = dnnl::softmax_forward(dnnl::softmax_forward::primitive_desc(
        dnnl::softmax_forward::desc(dnnl::prop_kind::forward_inference, s_md, 1), engine));
    scores.allocate(size_t(n * m));
  }
  size_t bytes() const { return (scores.size() + mask.size()) * sizeof(float); }
  void run() {
    const size_t d = p.head_dim, group = p.n_heads / p.n_kv_heads;
    dnnl::memory s_mem(s_md, engine, scores.data());
    dnnl::memory mask_mem = p.causal ? dnnl::memory(mask_md, engine, mask.data()) : dnnl::memory();
    for (size_t h = 0; h < p.n_heads; ++h) {
      const size_t g = h / group;
      dnnl::memory q_mem(q_md, engine, const_cast<float*>(p.q + h * d));
      dnnl::memory k_mem(k_md, engine, const_cast<float*>(p.k_cache + g * p.cache_stride * d));
      dnnl::memory v_mem(v_md, engine, const_cast<float*>(p.v_cache + g * p.cache_stride * d));
      dnnl::memory o_mem(o_md, engine, p.out + h * d);
      std::unordered_map<int, dnnl::memory> qk_args = {
          {DNNL_ARG_SRC, q_mem}, {DNNL_ARG_WEIGHTS, k_mem}, {DNNL_ARG_DST, s_mem}};
      if (p.causal) qk_args[DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1] = mask_mem;
      qk.execute(stream, qk_args);
      sm.execute(stream, {{DNNL_ARG_SRC, s_mem}, {DNNL_ARG_DST, s_mem}});
      pv.execute(stream, {{DNNL_ARG_SRC, s_mem}, {DNNL_ARG_WEIGHTS, v_mem}, {DNNL_ARG_DST, o_mem}});
    }
    stream.wait();
  }
};

// Each row also goes to stderr as soon as it is measured, so a long run that is stopped still leaves its figures.
void progress(const std::vector<std::string>& cells) {
  std::string line;
  for (const auto& c : cells) line += "| " + c + " ";
  std::fprintf(stderr, "%s|\n", line.c_str());
}

std::string mib(size_t bytes) { return fmt(double(bytes) / (1 << 20), 2); }

}  // namespace

int main(int argc, char** argv) {
  BenchArgs args = BenchArgs::parse(
      argc, argv,
      "bench-attention: attention prefill GFLOP/s and decode GB/s, fused vs unfused vs oneDNN (matmul + softmax)\n"
      "  --max-seq N  skip sequences / caches longer than N\n  --prefill-only, --decode-only\n"
      "  --builtin    judge the built-in path rule instead of this machine's measured table");
  size_t max_seq = std::numeric_limits<size_t>::max();
  bool run_prefill = true, run_decode = true, builtin = false;
  for (size_t i = 0; i < args.rest.size(); ++i) {
    if (args.rest[i] == "--max-seq" && i + 1 < args.rest.size()) max_seq = std::stoul(args.rest[i + 1]);
    if (args.rest[i] == "--decode-only") run_prefill = false;
    if (args.rest[i] == "--prefill-only") run_decode = false;
    if (args.rest[i] == "--builtin") builtin = true;
  }
  const Isa isa = default_isa();
  const char* kernel = ops::select_kernel(ops::attention_kernels(), isa).name;  // the fused path's table entry
  std::map<int, MachineRoofs> roofs = measure_roofs(isa, args.threads, args.smoke);
  const std::string timing = "wall-clock median of " + std::to_string(args.reps) +
                             " runs; prefill warm caches; decode cold (caches evicted before each call; " +
                             std::to_string(3 * args.reps) +
                             " interleaved runs) and warm, as labelled; roofs measured before and after each thread "
                             "count's rows, the higher of each figure kept";
  nlohmann::json out = {{"machine", machine_json(roofs, timing, args.threads)},
                        {"isa", isa_name(isa)}, {"kernel", kernel},
                        {"prefill", nlohmann::json::array()}, {"decode", nlohmann::json::array()}};
  out["note"] =
      "prefill GFLOP/s = 4*pairs*d*n_heads / s, pairs = n*m (causal: n*(m-n) + n(n+1)/2; seq = n queries, keys = m "
      "keys); decode GB/s = K+V bytes / s; medians of reps";

  const HeadConfig prefill_configs[] = {{"12x64", 12, 12, 64}, {"32x128", 32, 32, 128}, {"32/8x128", 32, 8, 128}};
  std::vector<size_t> seqs = {128, 512, 2048, 4096};
  const HeadConfig decode_configs[] = {{"12x64", 12, 12, 64}, {"32/8x128", 32, 8, 128}};
  std::vector<size_t> caches = {128, 512, 2048, 8192};
  if (args.smoke) seqs = {64}, caches = {300};

  Table prefill({"threads", "heads", "seq", "causal", "fused GF/s", "% peak", "unfused GF/s", "oneDNN GF/s",
                 "fused/unfused", "fused/oneDNN", "auto", "fused MiB", "unfused MiB", "oneDNN MiB"});
  Table decode({"threads", "heads", "cache", "K+V MiB", "fused GB/s", "% DRAM", "unfused GB/s", "fused/unfused",
                "auto", "warm fused GB/s", "warm fused/unfused", "fused us"});
  // The path table of each head configuration (the engine's: cached, or measured once now), and the worst loss of
  // the automatic choice against the faster path over every row.
  std::map<std::string, ops::AttentionPathTable> tables;
  std::map<std::string, std::string> table_sources;
  auto table_for = [&](const HeadConfig& hc) -> const ops::AttentionPathTable* {
    if (builtin) return nullptr;
    if (!tables.count(hc.name)) {
      if (args.smoke) {  // the mechanism on a tiny ladder, not cached
        ops::AttentionCalibration cal;
        cal.max_keys = 128, cal.reps = 1, cal.evict_bytes = 1 << 20;
        tables[hc.name] = ops::calibrate_attention_paths(isa, hc.n_heads, hc.n_kv_heads, hc.head_dim, cal);
        table_sources[hc.name] = "measured now (smoke: 64-128 keys, 1 rep)";
      } else {
        ResolvedAttentionPaths r =
            resolve_attention_paths(isa, hc.n_heads, hc.n_kv_heads, hc.head_dim, 8192, AttentionPaths::calibrate);
        tables[hc.name] = r.table;
        table_sources[hc.name] = r.source;
      }
    }
    return &tables[hc.name];
  };
  double worst_loss = 0;
  std::string worst_where = "none";
  size_t rows_within_3pct = 0, n_rows = 0;
  auto auto_cell = [&](AttentionPath path, double s_fused, double s_unfused, const std::string& where) {
    const double chosen = path == AttentionPath::fused ? s_fused : s_unfused;
    const double loss = chosen / std::min(s_fused, s_unfused) - 1.0;
    ++n_rows;
    rows_within_3pct += loss <= 0.03 ? 1 : 0;
    if (loss > worst_loss) worst_loss = loss, worst_where = where;
    return std::pair<std::string, double>(
        std::string(ops::attention_path_name(path)) + " (+" + fmt(100 * loss, 0) + "%)", loss);
  };
  // A row's share of a roof waits for the roof's second measurement, after the thread count's rows: prefill rows
  // are shares of the FMA peak, decode rows of the DRAM read roof, both in column 5; table row = JSON array index.
  struct PendingShare {
    bool decode;
    size_t row;
    double value;
  };
  constexpr size_t kShareColumn = 5;
  for (int t : args.threads) {
    std::vector<PendingShare> pending;
    const int saved_threads = omp_get_max_threads();
    for (const HeadConfig& hc : prefill_configs) {
      if (!run_prefill) break;
      // Whole prompts (n = m, causal and not), then causal chunks of kChunkQueries queries at the end of a longer
      // prompt: what the engine runs past its first prefill chunk (max_batch 512).
      struct Shape {
        size_t n, m;
        bool causal;
      };
      std::vector<Shape> shapes;
      for (size_t n : seqs)
        for (bool causal : {false, true}) shapes.push_back({n, n, causal});
      for (size_t m : seqs)
        if (m >= 2 * ops::kChunkQueries && !args.smoke) shapes.push_back({ops::kChunkQueries, m, true});
      for (const Shape& shape : shapes) {
        const size_t n = shape.n, m = shape.m;
        const bool causal = shape.causal;
        if (m > max_seq) continue;
        {
          Problem pr(hc, n, m, causal);
          const double pairs = causal ? double(n) * double(m - n) + 0.5 * double(n) * double(n + 1) : double(n) * double(m);
          const double flops = 4.0 * pairs * double(hc.head_dim) * double(hc.n_heads);
          AttentionWorkspace ws_fused, ws_unfused;
          omp_set_num_threads(t);  // oneDNN plans its split at creation and runs on the OpenMP default
          OnednnAttention dnnl_attn(pr.p);
          omp_set_num_threads(saved_threads);
          // The three interleaved per sample, so drift in the VM's load falls on all alike.
          const std::vector<double> secs = interleaved_medians(
              {[&] { ops::attention(isa, pr.p, ws_fused, t, AttentionPath::fused); },
               [&] { ops::attention(isa, pr.p, ws_unfused, t, AttentionPath::unfused); },
               [&] {
                 omp_set_num_threads(t);
                 dnnl_attn.run();
                 omp_set_num_threads(saved_threads);
               }},
              args.reps);
          const double s_fused = secs[0], s_unfused = secs[1], s_dnnl = secs[2];
          const double gf = flops / s_fused / 1e9, gu = flops / s_unfused / 1e9, gd = flops / s_dnnl / 1e9;
          const AttentionPath chosen = ops::choose_attention_path(pr.p, table_for(hc));
          const auto [auto_text, auto_loss] =
              auto_cell(chosen, s_fused, s_unfused,
                        std::to_string(t) + " thread(s), " + hc.name + ", " + std::to_string(n) + " queries x " +
                            std::to_string(m) + " keys, " + (causal ? "causal" : "non-causal") + " prefill");
          const std::vector<std::string> cells = {
              std::to_string(t), hc.name,           n == m ? std::to_string(n) : std::to_string(n) + "@" + std::to_string(m),
              causal ? "yes" : "no",
              fmt(gf),           "…", fmt(gu), fmt(gd),
              fmt(gf / gu, 2),   fmt(gf / gd, 2),   auto_text, mib(ws_fused.bytes()), mib(ws_unfused.bytes()),
              mib(dnnl_attn.bytes())};
          prefill.add(cells);
          progress(cells);
          out["prefill"].push_back({{"threads", t}, {"heads", hc.name}, {"seq", n}, {"keys", m}, {"causal", causal},
                                    {"fused_gflops", gf}, {"pct_peak", nullptr}, {"unfused_gflops", gu},
                                    {"onednn_gflops", gd}, {"ratio_unfused", gf / gu}, {"ratio_onednn", gf / gd},
                                    {"auto_path", ops::attention_path_name(chosen)}, {"auto_loss", auto_loss},
                                    {"fused_scratch_bytes", ws_fused.bytes()},
                                    {"unfused_scratch_bytes", ws_unfused.bytes()},
                                    {"onednn_scratch_bytes", dnnl_attn.bytes()}});
          pending.push_back({false, prefill.rows() - 1, gf});
        }
      }
    }
    for (const HeadConfig& hc : decode_configs) {
      if (!run_decode) break;
      for (size_t m : caches) {
        if (m > max_seq) continue;
        Problem pr(hc, 1, m, true);
        const double bytes = 2.0 * double(hc.n_kv_heads) * double(m) * double(hc.head_dim) * sizeof(float);
        AttentionWorkspace ws_fused, ws_unfused;
        auto fused = [&] { ops::attention(isa, pr.p, ws_fused, t, AttentionPath::fused); };
        auto unfused = [&] { ops::attention(isa, pr.p, ws_unfused, t, AttentionPath::unfused); };
        // Cold: the K/V cache comes from DRAM, as in a forward pass (each layer's cache and weights evict the
        // previous layer's). Warm: repeated on the same cache (L2/L3-resident when it fits). A cold sample is one
        // call of 30 us - 3 ms: three times --reps of them, as the calibration takes (attention_paths.cpp). With 5,
        // 12x64 at 512 keys, 2 threads read unfused 10% faster in one run where five runs of 21 samples in separate
        // processes found the two within 3% (Zen 5, 2026-12-07).
        const std::vector<double> cold = interleaved_medians_cold({fused, unfused}, 3 * args.reps, t);
        const double s_fused = cold[0], s_unfused = cold[1];
        const double w_fused = median_seconds(fused, args.reps), w_unfused = median_seconds(unfused, args.reps);
        const double gb = bytes / s_fused / 1e9, gbu = bytes / s_unfused / 1e9;
        const double wgb = bytes / w_fused / 1e9, wgbu = bytes / w_unfused / 1e9;
        const AttentionPath chosen = ops::choose_attention_path(pr.p, table_for(hc));
        const auto [auto_text, auto_loss] = auto_cell(
            chosen, s_fused, s_unfused,
            std::to_string(t) + " thread(s), " + hc.name + ", decode over " + std::to_string(m) + " keys");
        const std::vector<std::string> cells = {std::to_string(t), hc.name,         std::to_string(m),
                                                mib(size_t(bytes)), fmt(gb),
                                                "…",
                                                fmt(gbu),          fmt(gb / gbu, 2), auto_text, fmt(wgb),
                                                fmt(wgb / wgbu, 2), fmt(s_fused * 1e6)};
        decode.add(cells);
        progress(cells);
        out["decode"].push_back({{"threads", t}, {"heads", hc.name}, {"cache", m}, {"fused_gbs", gb},
                                 {"pct_dram", nullptr}, {"unfused_gbs", gbu}, {"ratio_unfused", gb / gbu},
                                 {"auto_path", ops::attention_path_name(chosen)}, {"auto_loss", auto_loss},
                                 {"warm_fused_gbs", wgb}, {"warm_unfused_gbs", wgbu}, {"warm_ratio_unfused", wgb / wgbu},
                                 {"fused_seconds", s_fused}, {"kv_bytes", bytes}});
        pending.push_back({true, decode.rows() - 1, gb});
      }
    }
    // The roofs again, now the rows are measured; the higher of each figure bounds them (better_roofs).
    roofs[t] = better_roofs(roofs.at(t), measure_roofs(isa, {t}, args.smoke).at(t));
    const double peak = roofs.at(t).peak_gflops, bw = roofs.at(t).dram_gbs;
    for (const PendingShare& share : pending) {
      const RoofShare r = share.decode ? share_of_roof(share.value, bw, "DRAM read")
                                       : share_of_roof(share.value, peak, "FMA peak");
      (share.decode ? decode : prefill).set(share.row, kShareColumn, pct_cell(r));
      out[share.decode ? "decode" : "prefill"][share.row][share.decode ? "pct_dram" : "pct_peak"] = pct_json(r);
    }
    if (!args.json)
      std::printf("threads %d: FMA peak %.1f GFLOP/s (%s), DRAM read %.1f GB/s; fused kernels %s\n", t, peak,
                  isa_name(isa), bw, kernel);
  }
  out["machine"] = machine_json(roofs, timing, args.threads);  // the roofs the shares are of
  warn_if_host_busy(roofs, "bench-attention");
  out["auto"] = {{"rule", builtin ? "built-in" : "this machine's table"}, {"worst_loss", worst_loss},
                 {"worst_at", worst_where}, {"rows", n_rows}, {"rows_within_3pct", rows_within_3pct},
                 {"tables", nlohmann::json::object()}};
  for (const auto& [name, source] : table_sources)
    out["auto"]["tables"][name] = {{"source", source}, {"table", ops::describe_attention_paths(tables[name])}};
  if (args.json) {
    std::printf("%s\n", out.dump(2).c_str());
  } else {
    std::printf("\nprefill (seq n = m queries and keys, or n@m: a chunk of n queries at the end of m keys; GF/s counts "
                "4·d per head and (query, key) pair computed: n·m, causal n·(m−n) + n(n+1)/2)\n%s",
                prefill.str().c_str());
    std::printf("\ndecode (1 query; GB/s of K+V read; caches cold unless marked warm)\n%s", decode.str().c_str());
    std::printf("\nauto (%s): %zu of %zu rows within 3%% of the faster path; worst +%.1f%% (%s)\n",
                builtin ? "the built-in rule" : "this machine's measured table", rows_within_3pct, n_rows,
                100 * worst_loss, worst_where.c_str());
    for (const auto& [name, source] : table_sources)
      std::printf("table %s: %s\n%s", name.c_str(), source.c_str(), ops::describe_attention_paths(tables[name]).c_str());
    std::printf("(the machine is a shared 2-core VM: expect 5-20%% noise)\n");
  }
  return 0;
}
