// sqrtdk bench: prefill and decode throughput, load time and peak RSS, each beside its roofline.
//
// Rooflines: prefill tokens/s ≤ FMA peak ÷ FLOPs per token; decode tokens/s ≤ DRAM bandwidth ÷ bytes read per
// token (all packed weights + the KV cache read at that position). Medians of --reps runs.
#include "tools/cli/cli_util.h"
#include "tools/cli/commands.h"

#include "models/family.h"

#include <sqrtdk/error.h>
#include <sqrtdk/profiler.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
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

// FLOPs of one token at position pos (linear layers + attention over pos + 1 keys + lm head). Prefill computes the
// lm head for its last position only: the prefill count subtracts it for the others (lm_head_flops).
double lm_head_flops(const ModelConfig& c) { return 2.0 * c.d_model * c.n_vocab; }
double flops_per_token(const ModelConfig& c, size_t pos) {
  const double hd = c.head_dim;
  const double linear = family_of(c).block_linear_macs(c);
  const double attention = 4.0 * hd * c.n_heads * (pos + 1);
  return c.n_layers * (2 * linear + attention) + 2.0 * c.d_model * c.n_vocab;
}

struct Row {
  int threads = 1;
  std::vector<std::pair<size_t, double>> prefill;  // (tokens, tokens/s)
  std::vector<double> prefill_roof_pct;
  double decode_tps = 0, decode_roof_pct = 0, decode_roof_tps = 0;
  double decode_tps_profiled = 0;  // with a Profiler attached (--profiler-overhead), else 0
};

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
    // Measured in this run by default (~0.5 s), so the % of roofline compares figures taken under the same
    // conditions; --cached-roofs reuses the per-machine cache instead.
    // The DRAM probe reads a 256 MiB buffer: keep it out of the reported peak RSS (the peak so far is kept, the
    // kernel's counter restarts after the probe).
    peak_before_roofs = std::max(peak_before_roofs, peak_rss_bytes());
    const MachineRoofs roofs = a.cached_roofs ? cached_machine_roofs(model->isa(), static_cast<int>(t))
                                              : measure_machine_roofs(model->isa(), static_cast<int>(t));
    if (!reset_peak_rss()) peak_before_roofs = 0;  // cannot reset: report the plain peak
    Row row;
    row.threads = static_cast<int>(t);
    for (uint32_t n : prefill_list) {
      std::vector<double> tps;
      for (int r = 0; r <= a.reps; ++r) {  // rep 0 is the warm-up
        session.reset();
        const auto t0 = std::chrono::steady_clock::now();
        session.prefill(std::span<const uint32_t>(tokens.data(), n));
        if (r > 0) tps.push_back(n / seconds_since(t0));
        progress.update(++step);
      }
      double flops = 0;
      for (size_t p = 0; p < n; ++p) flops += flops_per_token(c, p);
      flops -= (n - 1) * lm_head_flops(c);  // logits of the last position only
      const double roof_tps = roofs.peak_gflops * 1e9 / (flops / n);
      row.prefill.emplace_back(n, median(tps));
      row.prefill_roof_pct.push_back(100.0 * median(tps) / roof_tps);
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
    // Bytes per decoded token: every packed weight once + K and V of the mean cache length.
    const double mean_keys = decode_prompt + 0.5 * decode;
    const double bytes_per_token =
        weight_bytes + 2.0 * c.n_layers * c.n_kv_heads * c.head_dim * mean_keys * sizeof(float);
    row.decode_tps = median(tps);
    row.decode_roof_tps = roofs.dram_gbs * 1e9 / bytes_per_token;
    row.decode_roof_pct = 100.0 * row.decode_tps / row.decode_roof_tps;
    nlohmann::json jr = {{"threads", t}, {"decode_tokens_per_s", row.decode_tps},
                         {"decode_ms_per_token", 1e3 / row.decode_tps}, {"decode_roof_tokens_per_s", row.decode_roof_tps},
                         {"decode_pct_of_roofline", row.decode_roof_pct}, {"peak_gflops", roofs.peak_gflops},
                         {"dram_gbs", roofs.dram_gbs}, {"roofs_source", roofs.source}};
    if (a.profiler_overhead) {
      jr["decode_tokens_per_s_profiler_on"] = row.decode_tps_profiled;
      jr["profiler_overhead_pct"] = 100.0 * (1.0 - row.decode_tps_profiled / row.decode_tps);
    }
    for (size_t i = 0; i < row.prefill.size(); ++i)
      jr["prefill"].push_back({{"tokens", row.prefill[i].first}, {"tokens_per_s", row.prefill[i].second},
                               {"pct_of_roofline", row.prefill_roof_pct[i]}});
    jrows.push_back(jr);
    rows.push_back(row);
  }
  const double rss_mb = std::max(peak_before_roofs, peak_rss_bytes()) / 1048576.0;
  const double model_mb = weight_bytes / 1048576.0, kv_mb = kv_bytes / 1048576.0, scratch_mb = scratch_bytes / 1048576.0;

  if (a.json) {
    nlohmann::json j = {{"model", model->path()}, {"arch", arch_name(c.arch)}, {"n_params", model->n_params()},
                        {"isa", isa_name(model->isa())}, {"load_seconds", load_seconds}, {"peak_rss_mb", rss_mb},
                        {"packed_weights_mb", model_mb}, {"session_scratch_mb", scratch_mb}, {"kv_cache_mb", kv_mb},
                        {"decode_prompt", decode_prompt}, {"decode_tokens", decode}, {"reps", a.reps},
                        {"results", jrows}};
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  if (a.csv) {
    std::printf("threads,kind,tokens,tokens_per_s,pct_of_roofline\n");
    for (const Row& r : rows) {
      for (size_t i = 0; i < r.prefill.size(); ++i)
        std::printf("%d,prefill,%zu,%.2f,%.1f\n", r.threads, r.prefill[i].first, r.prefill[i].second,
                    r.prefill_roof_pct[i]);
      std::printf("%d,decode,%zu,%.2f,%.1f\n", r.threads, decode, r.decode_tps, r.decode_roof_pct);
    }
    return;
  }
  std::printf("model %s: %s, %.2f M params, ISA %s; load %.3f s; peak RSS %.1f MiB (packed weights %.1f + "
              "session %.1f, of which KV cache %.1f)\n\n",
              model->path().c_str(), arch_name(c.arch), model->n_params() / 1e6, isa_name(model->isa()), load_seconds,
              rss_mb, model_mb, scratch_mb, kv_mb);
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
      std::printf(" %.1f (%.0f%%) |", r.prefill[i].second, r.prefill_roof_pct[i]);
    std::printf(" %.1f (%.0f%%) | %.2f |\n", r.decode_tps, r.decode_roof_pct, 1e3 / r.decode_tps);
  }
  for (const Row& r : rows)
    if (a.profiler_overhead)
      std::printf("\nthreads %d: decode with the profiler on %.1f tok/s: overhead %.1f%% (medians, runs interleaved)",
                  r.threads, r.decode_tps_profiled, 100.0 * (1.0 - r.decode_tps_profiled / r.decode_tps));
  std::printf("\ndecode: %zu tokens after a %zu-token prompt; medians of %d runs; roofline = FMA peak / FLOPs per "
              "token (prefill), DRAM bandwidth / bytes per token (decode)\n",
              decode, decode_prompt, a.reps);
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
