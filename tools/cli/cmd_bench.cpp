// sqrtdk bench: prefill and decode throughput, load time and peak RSS, each beside its roofline.
//
// Rooflines: prefill tokens/s ≤ FMA peak ÷ FLOPs per token; decode tokens/s ≤ read bandwidth ÷ bytes per token
// (decode_bytes_per_token, models/family.h: the weights the forward reads, one embedding row, the KV cache read and
// written at each position), the bandwidth being that of the memory level the bytes per token fit in (L2, L3 or
// DRAM, measured on the same thread count: read_roof_for). A figure above 100% is not printed: the roof is wrong.
// Wall-clock medians of --reps runs after a warm-up run (warm caches).
#include "tools/cli/cli_util.h"
#include "tools/cli/commands.h"

#include "models/family.h"
#include "ops/gemm/gemm.h"

#include <sqrtdk/error.h>
#include <sqrtdk/profiler.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace sqrtdk::cli {

namespace {

struct BenchArgs {
  ModelArgs model;
  std::string threads = "1,2";
  std::string prefill = "32,128,512";
  size_t decode = 128, decode_prompt = 32;
  int reps = 5;
  bool json = false, csv = false, quiet = false, cached_roofs = false, profiler_overhead = false;
  // Which lengths the user gave: defaults longer than the model's context are clamped (with a note), given ones
  // are an error.
  bool prefill_given = false, decode_given = false, decode_prompt_given = false;
};

std::string join(const std::vector<uint32_t>& v) {
  std::string out;
  for (uint32_t x : v) out += (out.empty() ? "" : ",") + std::to_string(x);
  return out;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

struct Row {
  int threads = 1;
  MachineRoofs roofs;
  std::vector<std::pair<size_t, double>> prefill;  // (tokens, tokens/s)
  std::vector<RoofShare> prefill_share;            // of the FMA-peak roof
  double decode_tps = 0, decode_roof_tps = 0;
  ReadRoof decode_roof;
  RoofShare decode_share;
  double decode_tps_profiled = 0;  // with a Profiler attached (--profiler-overhead), else 0
};

// "45%", or "roof?" when the share is above 100% (the roof is wrong: share_of_roof), "-" when there is no roof.
std::string pct_cell(const RoofShare& share) {
  if (share.ok) return std::to_string(static_cast<int>(std::lround(share.percent))) + "%";
  return share.text.rfind("above", 0) == 0 ? "roof?" : "-";
}

void run(const BenchArgs& a) {
  const auto t_load = std::chrono::steady_clock::now();
  auto model = a.model.load();
  const double load_seconds = seconds_since(t_load);
  const ModelConfig& c = model->config();
  const auto thread_list = parse_token_list(a.threads, "--threads");
  auto prefill_list = parse_token_list(a.prefill, "--prefill");
  for (uint32_t n : prefill_list)
    if (n == 0) throw CLI::ValidationError("--prefill", "lengths must be ≥ 1, got 0");
  for (uint32_t t : thread_list)
    if (t > 1024) throw CLI::ValidationError("--threads", "expected thread counts ≤ 1024, got " + std::to_string(t));
  // Defaults fit the model: `sqrtdk bench` with no arguments runs on any model, saying what it changed.
  const uint32_t context = c.max_seq;
  std::string clamped;
  if (!a.prefill_given) {
    const auto kept = clamp_default_lengths(prefill_list, context);
    if (kept != prefill_list) clamped += " prefill " + a.prefill + " -> " + join(kept) + ";";
    prefill_list = kept;
  }
  size_t decode = a.decode, decode_prompt = a.decode_prompt;
  if (decode_prompt + decode > context) {
    if (!a.decode_prompt_given) decode_prompt = std::min<size_t>(decode_prompt, std::max<size_t>(1, context / 4));
    if (!a.decode_given && decode_prompt < context) decode = std::min(decode, context - decode_prompt);
    if (decode != a.decode || decode_prompt != a.decode_prompt)
      clamped += " decode " + std::to_string(decode) + " tokens after a " + std::to_string(decode_prompt) +
                 "-token prompt;";
  }
  if (!clamped.empty()) {
    clamped.pop_back();
    std::fprintf(stderr, "bench: the model's context is %u tokens, so the defaults were clamped:%s (pass --prefill, "
                 "--decode, --decode-prompt to choose)\n", context, clamped.c_str());
  }
  size_t longest = decode_prompt + decode;
  for (auto n : prefill_list) longest = std::max<size_t>(longest, n);
  if (longest > c.max_seq)
    throw CLI::ValidationError("--prefill/--decode", "needs a context of " + std::to_string(longest) +
                                                         " but the model's max_seq is " + std::to_string(c.max_seq));
  const auto tokens = synthetic_tokens(c, longest);
  const double weight_bytes = static_cast<double>(model->packed_bytes());
  // Bytes moved by the whole decode run, position by position; per token = run / decode.
  DecodeBytes decode_bytes;
  for (size_t pos = decode_prompt; pos < decode_prompt + decode; ++pos) {
    const DecodeBytes b = decode_bytes_per_token(c, pos);
    decode_bytes.weights += b.weights / decode;
    decode_bytes.embedding += b.embedding / decode;
    decode_bytes.kv_read += b.kv_read / decode;
    decode_bytes.kv_written += b.kv_written / decode;
  }
  // The linear layers (lm head included) in the types they were packed in (bf16/q8 models read 1/2 or ~1/4 of
  // f32's bytes): the family's f32 count of them is replaced by the packed bytes. Panels pad N to the tile width;
  // those zeros are read too, so they count.
  const double linear_f32_bytes = (c.n_layers * family_of(c).block_linear_macs(c) + double(c.n_vocab) * c.d_model) * 4;
  double linear_packed_bytes = 0;
  for (const auto& [type, bytes] : model->packed_bytes_by_type()) linear_packed_bytes += static_cast<double>(bytes);
  decode_bytes.weights += linear_packed_bytes - linear_f32_bytes;
  const double bytes_per_token = decode_bytes.total();
  // Prefill's compute roof: each linear layer's MACs at the peak of the instruction its type runs on (f32 and the
  // widening bf16 kernel: FMA; the vdpbf16ps kernel: the BF16 dot peak; q8 on avx512_vnni: the int8 peak, 2 ops
  // per MAC like an FMA's 2 FLOPs), the rest (attention, norms) at the FMA peak. Shares of the linear MACs by type
  // come from the packed bytes per element.
  double linear_share_f32 = 0, linear_share_bf16 = 0, linear_share_q8 = 0;
  {
    double f32e = 0, bf16e = 0, q8e = 0;
    for (const auto& [type, bytes] : model->packed_bytes_by_type()) {
      if (type == "f32") f32e = bytes / 4.0;
      if (type == "bf16") bf16e = bytes / 2.0;
      if (type == "q8") q8e = bytes * 32.0 / 34.0;
    }
    const double all = std::max(1.0, f32e + bf16e + q8e);
    linear_share_f32 = f32e / all;
    linear_share_bf16 = bf16e / all;
    linear_share_q8 = q8e / all;
  }
  const bool bf16_dot = ops::bf16_weights_isa(model->isa()) >= Isa::avx512_bf16;
  const bool q8_vnni = model->isa() >= Isa::avx512_vnni;
  auto compute_roof_tps = [&](const MachineRoofs& roofs, size_t n, const PrefillWork& work) {
    const double flops = work.flops, linear_flops = 2.0 * work.linear_macs;
    const double fma = roofs.peak_gflops * 1e9;
    const double bf16_peak = bf16_dot && roofs.bf16_peak_gflops > 0 ? roofs.bf16_peak_gflops * 1e9 : fma;
    const double q8_peak = q8_vnni && roofs.int8_peak_gops > 0 ? roofs.int8_peak_gops * 1e9 : fma;
    const double seconds = (flops - linear_flops) / fma + linear_flops * (linear_share_f32 / fma +
                           linear_share_bf16 / bf16_peak + linear_share_q8 / q8_peak);
    return n / seconds;
  };

  const std::string compute_roof_name = linear_share_f32 > 0.999 ? "FMA peak" : "compute peak of the weight types";
  std::vector<Row> rows;
  nlohmann::json jrows = nlohmann::json::array();
  size_t total_steps = thread_list.size() * (prefill_list.size() + 1) * (a.reps + 1), step = 0;
  Progress progress("bench", total_steps, a.quiet);
  size_t kv_bytes = 0, scratch_bytes = 0, peak_before_roofs = 0;
  for (uint32_t t : thread_list) {
    SessionOptions so;
    so.n_threads = static_cast<int>(t);
    so.max_context = longest;
    Session session(model, so);
    kv_bytes = session.kv_cache_bytes();
    scratch_bytes = session.scratch_bytes();
    // Measured in this run by default (~1 s each), just before and just after this thread count's runs, keeping
    // the higher of each figure, so the % of roofline compares figures taken under the same conditions: one
    // measurement before the runs read the 2-thread DRAM roof at 51 GB/s where bench-machine read 75 a minute
    // later, and decode then ran above it (Zen 5 VM, 2026-12-06). --cached-roofs reuses the per-machine cache.
    // The DRAM probe reads up to 1 GiB: keep it out of the reported peak RSS (the peak so far is kept, the
    // kernel's counter restarts after the probe).
    auto measure_roofs = [&] {
      peak_before_roofs = std::max(peak_before_roofs, peak_rss_bytes());
      const MachineRoofs measured = a.cached_roofs ? cached_machine_roofs(model->isa(), static_cast<int>(t))
                                                   : measure_machine_roofs(model->isa(), static_cast<int>(t));
      if (!reset_peak_rss()) peak_before_roofs = 0;  // cannot reset: report the plain peak
      return measured;
    };
    MachineRoofs roofs = measure_roofs();
    Row row;
    row.threads = static_cast<int>(t);
    std::vector<PrefillWork> prefill_works;  // per prefill length: its share of the roof is taken after the runs
    for (uint32_t n : prefill_list) {
      std::vector<double> tps;
      for (int r = 0; r <= a.reps; ++r) {  // rep 0 is the warm-up
        session.reset();
        const auto t0 = std::chrono::steady_clock::now();
        session.prefill(std::span<const uint32_t>(tokens.data(), n));
        if (r > 0) tps.push_back(n / seconds_since(t0));
        progress.update(++step);
      }
      prefill_works.push_back(prefill_work(c, n, session.max_batch()));
      row.prefill.emplace_back(n, median(tps));
    }
    std::vector<double> tps, tps_profiled;
    auto decode_run = [&](Profiler* prof) {
      session.reset();
      session.prefill(std::span<const uint32_t>(tokens.data(), decode_prompt));
      if (prof) session.set_op_observer(prof->observer());
      const auto t0 = std::chrono::steady_clock::now();
      for (size_t i = 0; i < decode; ++i) session.decode(tokens[decode_prompt + i]);
      const double tokens_per_s = decode / seconds_since(t0);
      session.set_op_observer(nullptr);
      return tokens_per_s;
    };
    for (int r = 0; r <= a.reps; ++r) {
      const double off = decode_run(nullptr);
      if (r > 0) tps.push_back(off);
      if (a.profiler_overhead) {  // interleaved with the plain runs, so drift hits both alike
        Profiler prof(roofs);
        prof.reserve(decode * profiler_events_per_call(c));
        const double on = decode_run(&prof);
        if (r > 0) tps_profiled.push_back(on);
      }
      progress.update(++step);
    }
    if (a.profiler_overhead) row.decode_tps_profiled = median(tps_profiled);
    if (!a.cached_roofs) roofs = better_roofs(roofs, measure_roofs());
    row.roofs = roofs;
    for (size_t i = 0; i < row.prefill.size(); ++i)
      row.prefill_share.push_back(share_of_roof(row.prefill[i].second,
                                                compute_roof_tps(roofs, row.prefill[i].first, prefill_works[i]),
                                                compute_roof_name));
    // Each decode step re-reads all it touched the step before: the bytes per token are the working set, and the
    // level they fit in is where decode reads from (a model that fits in L3 decodes from L3, not DRAM).
    row.decode_tps = median(tps);
    row.decode_roof = read_roof_for(roofs, bytes_per_token);
    row.decode_roof_tps = row.decode_roof.gbs * 1e9 / bytes_per_token;
    row.decode_share = share_of_roof(row.decode_tps, row.decode_roof_tps,
                                     std::string(memory_level_name(row.decode_roof.level)) + " read");
    auto pct_json = [](const RoofShare& r) { return r.ok ? nlohmann::json(r.percent) : nlohmann::json(nullptr); };
    nlohmann::json jr = {{"threads", t}, {"decode_tokens_per_s", row.decode_tps},
                         {"decode_ms_per_token", 1e3 / row.decode_tps},
                         {"decode_read_roof", memory_level_name(row.decode_roof.level)},
                         {"decode_read_roof_gbs", row.decode_roof.gbs},
                         {"decode_roof_tokens_per_s", row.decode_roof_tps},
                         {"decode_pct_of_roofline", pct_json(row.decode_share)},
                         {"decode_roof_note", row.decode_share.text}, {"peak_gflops", roofs.peak_gflops},
                         {"dram_gbs", roofs.dram_gbs}, {"l3_gbs", roofs.l3_gbs}, {"l2_gbs", roofs.l2_gbs},
                         {"roofs_source", roofs.source}};
    if (a.profiler_overhead) {
      jr["decode_tokens_per_s_profiler_on"] = row.decode_tps_profiled;
      jr["profiler_overhead_pct"] = 100.0 * (1.0 - row.decode_tps_profiled / row.decode_tps);
    }
    for (size_t i = 0; i < row.prefill.size(); ++i)
      jr["prefill"].push_back({{"tokens", row.prefill[i].first}, {"tokens_per_s", row.prefill[i].second},
                               {"pct_of_roofline", pct_json(row.prefill_share[i])},
                               {"roof_note", row.prefill_share[i].text}});
    jrows.push_back(jr);
    rows.push_back(row);
  }
  const double rss_mb = std::max(peak_before_roofs, peak_rss_bytes()) / 1048576.0;
  const double model_mb = weight_bytes / 1048576.0, kv_mb = kv_bytes / 1048576.0, scratch_mb = scratch_bytes / 1048576.0;

  const std::string timing =
      "wall-clock median of " + std::to_string(a.reps) +
      " runs after one warm-up run; warm caches (the weights stay in whatever cache holds them between runs); roofs " +
      (a.cached_roofs ? "from the per-machine cache"
                      : "measured in this run, before and after each thread count's runs, the higher of each kept") +
      ", per thread count";
  std::vector<MachineRoofs> all_roofs;
  for (const Row& r : rows) all_roofs.push_back(r.roofs);
  if (const std::string busy = busy_host_warning(all_roofs); !busy.empty())
    std::fprintf(stderr, "sqrtdk bench: warning: %s\n", busy.c_str());
  if (a.json) {
    nlohmann::json j = {{"machine", nlohmann::json::parse(machine_json(all_roofs, timing))},
                        {"decode_bytes_per_token", {{"weights", decode_bytes.weights},
                                                    {"embedding_rows", decode_bytes.embedding},
                                                    {"kv_read", decode_bytes.kv_read},
                                                    {"kv_written", decode_bytes.kv_written},
                                                    {"total", bytes_per_token}}},
                        {"model", model->path()}, {"arch", arch_name(c.arch)}, {"n_params", model->n_params()},
                        {"isa", isa_name(model->isa())}, {"load_seconds", load_seconds}, {"peak_rss_mb", rss_mb},
                        {"packed_weights_mb", model_mb}, {"session_scratch_mb", scratch_mb}, {"kv_cache_mb", kv_mb},
                        {"decode_prompt", decode_prompt}, {"decode_tokens", decode}, {"reps", a.reps},
                        {"attention_paths", model->attention_paths_source()},
                        {"bf16_kernel", linear_share_bf16 > 0 ? (bf16_dot ? "vdpbf16ps" : "widen") : "none"},
                        {"results", jrows}};
    for (const auto& [type, bytes] : model->packed_bytes_by_type()) j["linear_bytes_by_type"][type] = bytes;
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  if (a.csv) {
    // pct_of_roofline is empty where no share can be given (above the roof, or no roof measured); roof names it.
    auto pct = [](const RoofShare& r) {
      char buf[32] = "";
      if (r.ok) std::snprintf(buf, sizeof buf, "%.1f", r.percent);
      return std::string(buf);
    };
    std::printf("threads,kind,tokens,tokens_per_s,pct_of_roofline,roof\n");
    for (const Row& r : rows) {
      for (size_t i = 0; i < r.prefill.size(); ++i)
        std::printf("%d,prefill,%zu,%.2f,%s,FMA peak\n", r.threads, r.prefill[i].first, r.prefill[i].second,
                    pct(r.prefill_share[i]).c_str());
      std::printf("%d,decode,%zu,%.2f,%s,%s read\n", r.threads, decode, r.decode_tps, pct(r.decode_share).c_str(),
                  memory_level_name(r.decode_roof.level));
    }
    return;
  }
  std::printf("model %s: %s, %.2f M params, ISA %s; load %.3f s; peak RSS %.1f MiB (packed weights %.1f + "
              "session %.1f, of which KV cache %.1f)\n\n",
              model->path().c_str(), arch_name(c.arch), model->n_params() / 1e6, isa_name(model->isa()), load_seconds,
              rss_mb, model_mb, scratch_mb, kv_mb);
  std::printf("attention paths: %s\n", model->attention_paths_source().c_str());
  std::printf("linear weights as packed:");
  for (const auto& [type, bytes] : model->packed_bytes_by_type()) std::printf(" %s %.1f MiB", type.c_str(), bytes / 1048576.0);
  std::printf("%s\n\n", linear_share_bf16 > 0 ? (bf16_dot ? " (bf16 on vdpbf16ps)" : " (bf16 widened to f32 in the kernel)") : "");
  std::ostringstream head, sep;
  head << "| threads |";
  sep << "|---|";
  for (auto n : prefill_list) {
    head << " prefill " << n << " tok/s (% roof) |";
    sep << "---|";
  }
  head << " decode tok/s (% roof) | ms/token |";
  sep << "---|---|";
  std::printf("%s\n%s\n", head.str().c_str(), sep.str().c_str());
  for (const Row& r : rows) {
    std::printf("| %d |", r.threads);
    for (size_t i = 0; i < r.prefill.size(); ++i)
      std::printf(" %.1f (%s) |", r.prefill[i].second, pct_cell(r.prefill_share[i]).c_str());
    std::printf(" %.1f (%s) | %.2f |\n", r.decode_tps, pct_cell(r.decode_share).c_str(), 1e3 / r.decode_tps);
  }
  std::printf("\ndecode bytes per token (mean over the run): %.2f MiB = weights %.2f + embedding rows %.4f + KV read "
              "%.3f + KV written %.4f\n", bytes_per_token / 1048576.0, decode_bytes.weights / 1048576.0,
              decode_bytes.embedding / 1048576.0, decode_bytes.kv_read / 1048576.0,
              decode_bytes.kv_written / 1048576.0);
  for (const Row& r : rows) {
    std::printf("threads %d: decode roof = %s read %.1f GB/s (%.2f MiB per token fits in %s) -> %.1f tok/s: %s",
                r.threads, memory_level_name(r.decode_roof.level), r.decode_roof.gbs, bytes_per_token / 1048576.0,
                memory_level_name(r.decode_roof.level), r.decode_roof_tps, r.decode_share.text.c_str());
    std::printf("; FMA peak %.1f GFLOP/s", r.roofs.peak_gflops);
    if (r.roofs.bf16_peak_gflops > 0) std::printf(", BF16 dot %.1f GFLOP/s", r.roofs.bf16_peak_gflops);
    if (r.roofs.int8_peak_gops > 0) std::printf(", int8 dot %.1f GOP/s", r.roofs.int8_peak_gops);
    std::printf("; roofs %s\n", r.roofs.source.c_str());
    for (size_t i = 0; i < r.prefill.size(); ++i)
      if (!r.prefill_share[i].ok)
        std::printf("threads %d: prefill %zu: %s\n", r.threads, r.prefill[i].first, r.prefill_share[i].text.c_str());
  }
  for (const Row& r : rows)
    if (a.profiler_overhead)
      std::printf("\nthreads %d: decode with the profiler on %.1f tok/s: overhead %.1f%% (medians, runs interleaved)",
                  r.threads, r.decode_tps_profiled, 100.0 * (1.0 - r.decode_tps_profiled / r.decode_tps));
  std::printf("\ndecode: %zu tokens after a %zu-token prompt; %s; roofline = FMA peak / FLOPs per token "
              "(prefill), read bandwidth of the level the bytes per token fit in / bytes per token (decode)\n",
              decode, decode_prompt, timing.c_str());
}

}  // namespace

void add_bench_command(CLI::App& app) {
  auto a = std::make_shared<BenchArgs>();
  CLI::App* cmd = app.add_subcommand("bench", "Prefill and decode tokens/s, load time, peak RSS, % of roofline.");
  cmd->footer("Examples:\n  sqrtdk bench\n  sqrtdk bench --model llama110m.sqdk --threads 1,2 --json\n"
              "  sqrtdk bench --prefill 32,128,512 --decode 128 --decode-prompt 32 --csv");
  a->model.add_to(*cmd, /*with_threads=*/false);
  cmd->add_option("-t,--threads", a->threads, "thread counts, comma-separated")->capture_default_str();
  cmd->add_option("--prefill", a->prefill, "prefill lengths, comma-separated")->capture_default_str();
  cmd->add_option("--decode", a->decode, "decode steps")->check(at_least(1))->capture_default_str();
  cmd->add_option("--decode-prompt", a->decode_prompt, "prompt tokens before decoding")
      ->check(at_least(1))->capture_default_str();
  cmd->add_option("--reps", a->reps, "repetitions (median reported)")->check(number_in(1, 1000))->capture_default_str();
  auto* j = cmd->add_flag("--json", a->json, "print JSON");
  cmd->add_flag("--csv", a->csv, "print CSV")->excludes(j);
  cmd->add_flag("-q,--quiet", a->quiet, "no progress bar");
  cmd->add_flag("--profiler-overhead", a->profiler_overhead,
                "also time decode with a Profiler attached (runs interleaved) and print the overhead");
  cmd->add_flag("--cached-roofs", a->cached_roofs,
                "use the cached machine roofs (~/.cache/sqrtdk/roofs.json) instead of measuring them in this run");
  cmd->callback([a, cmd] {
    a->prefill_given = cmd->count("--prefill") > 0;
    a->decode_given = cmd->count("--decode") > 0;
    a->decode_prompt_given = cmd->count("--decode-prompt") > 0;
    run(*a);
  });
}

}  // namespace sqrtdk::cli
