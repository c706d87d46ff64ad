// sqrtdk profile: per-op timings of a prefill and a few decode steps, against the machine's roofline.
#include "tools/cli/cli_util.h"
#include "tools/cli/commands.h"

#include <sqrtdk/error.h>
#include <sqrtdk/profiler.h>

#include <cstdio>
#include <fstream>

namespace sqrtdk::cli {

namespace {

struct ProfileArgs {
  ModelArgs model;
  size_t prefill = 128;
  size_t decode = 32;
  std::string trace, roofline;
  bool json = false, by_layer = false, quiet = false, recalibrate = false;
  double peak_gflops = 0, dram_gbs = 0, l3_gbs = 0, l2_gbs = 0;
  bool lengths_given = false;  // --prefill or --decode given: no clamping to the context
};

void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  if (!(out << text) || !out.flush()) throw Error(path + ": cannot write");
}

void run(const ProfileArgs& a) {
  auto model = a.model.load();
  const ModelConfig& c = model->config();
  SessionOptions so;
  so.n_threads = a.model.threads;
  Session session(model, so);
  size_t prefill = a.prefill, decode = a.decode;
  if (!a.lengths_given && prefill + decode > session.max_context()) {  // defaults fit any model, with a note
    prefill = std::max<size_t>(1, session.max_context() * 3 / 4);
    decode = std::min(decode, session.max_context() - prefill);
    std::fprintf(stderr, "profile: the model's context is %zu tokens, so the defaults were clamped: prefill %zu, "
                 "decode %zu (pass --prefill, --decode to choose)\n", session.max_context(), prefill, decode);
  }
  if (prefill + decode > session.max_context())
    throw CLI::ValidationError("--prefill/--decode", "prefill + decode = " + std::to_string(prefill + decode) +
                                                         " exceeds the context " +
                                                         std::to_string(session.max_context()));
  MachineRoofs roofs;
  if (a.peak_gflops > 0 && a.dram_gbs > 0) {
    roofs.isa = model->isa();
    roofs.n_threads = session.n_threads();
    roofs.peak_gflops = a.peak_gflops;
    roofs.dram_gbs = a.dram_gbs;
    roofs.l3_gbs = a.l3_gbs;
    roofs.l2_gbs = a.l2_gbs;
    // The cache sizes still come from the machine: a cache-resident model is then told its level has no roof
    // given, not compared with DRAM.
    detect_cache_sizes(roofs);
    roofs.source = "given";
  } else {
    // Said only when it measures: a cache hit is instant, and the roofs line below names the source.
    auto say = [&] {
      if (!a.quiet) std::fprintf(stderr, "calibrating the machine's roofs (about a second)...\n");
    };
    if (a.recalibrate) {
      say();
      roofs = measure_machine_roofs(model->isa(), session.n_threads());
      roofs.source = "measured (--recalibrate: not cached)";
    } else {
      roofs = cached_machine_roofs(model->isa(), session.n_threads(), say);
    }
  }
  const auto tokens = synthetic_tokens(c, prefill + decode);
  // Warm-up pass outside the profile, over the whole prompt (and one decode step): the session's activation rows
  // and KV-cache pages are first touched here, not in the timed pass (an 8-token warm-up left the rest of the
  // rows to fault in the timed one: 1.3 ms of "embedding" and 1.1 ms of layer 0's attn_norm at T = 128).
  session.prefill(std::span<const uint32_t>(tokens.data(), prefill));
  if (decode > 0) session.decode(tokens[prefill]);
  session.reset();

  Profiler prof(roofs);
  // Faulted in before timing; prefill runs in chunks of at most 512 tokens (the reserve is only a hint).
  prof.reserve((decode + prefill / 256 + 2) * profiler_events_per_call(c));
  session.set_op_observer(prof.observer());
  prof.set_phase("prefill");
  prof.begin_step("prefill " + std::to_string(prefill) + " tokens");
  session.prefill(std::span<const uint32_t>(tokens.data(), prefill));
  prof.end_step();
  prof.set_phase("decode");
  Progress progress("decode", decode, a.quiet);
  for (size_t i = 0; i < decode; ++i) {
    prof.begin_step("decode pos " + std::to_string(prefill + i));
    session.decode(tokens[prefill + i]);
    prof.end_step();
    progress.update(i + 1);
  }
  session.set_op_observer(nullptr);

  if (!a.trace.empty()) write_file(a.trace, prof.chrome_trace());
  if (!a.roofline.empty()) write_file(a.roofline, prof.roofline_svg());
  if (a.json) {
    std::printf("%s\n", prof.json().c_str());
    return;
  }
  std::printf("model %s: %s, %u layers, d_model %u, %.2f M params, ISA %s, %d threads\n", model->path().c_str(),
              arch_name(c.arch), c.n_layers, c.d_model, model->n_params() / 1e6, isa_name(model->isa()),
              session.n_threads());
  std::printf("roofs (%s), %d threads: FMA peak %.1f GFLOP/s; read DRAM %.1f, L3 %.1f, L2 %.1f GB/s (0: not "
              "measured); caches L1d %zu KiB and L2 %zu KiB per core, L3 %zu MiB\n",
              roofs.source.c_str(), roofs.n_threads, roofs.peak_gflops, roofs.dram_gbs, roofs.l3_gbs, roofs.l2_gbs,
              roofs.l1d_bytes >> 10, roofs.l2_bytes >> 10, roofs.l3_bytes >> 20);
  std::printf("each phase is set against the read roof of the level its working set (bytes per step) fits in; "
              "bound: compute or memory by intensity vs that roof's ridge point, overhead under 10%% of the roofline\n");
  hw_counters_note();
  for (const char* phase : {"prefill", "decode"}) {
    const double secs = prof.phase_seconds(phase);
    const size_t n_tok = std::string(phase) == "prefill" ? prefill : decode;
    std::printf("\n== %s: %zu tokens, %.3f ms (%.1f tokens/s)\n", phase, n_tok, secs * 1e3, n_tok / secs);
    std::printf("%s", prof.table(phase).c_str());
    if (a.by_layer) {
      std::printf("-- by layer --\n");
      for (const auto& s : prof.by_layer(phase))
        std::printf("layer %3d %-11s %9.3f ms %8.1f GFLOP/s %7.1f GB/s\n", s.layer, s.op.c_str(), s.seconds * 1e3,
                    s.gflops(), s.gbs());
    }
  }
  if (!a.trace.empty()) std::printf("\ntrace: %s (open in https://ui.perfetto.dev or chrome://tracing)\n", a.trace.c_str());
  if (!a.roofline.empty()) std::printf("roofline: %s\n", a.roofline.c_str());
}

}  // namespace

void hw_counters_note() {
  // Hardware counters per op need perf_event_open; many VMs (this one) do not expose them. Say so once.
  std::printf("hardware counters: %s\n", hw_counters_available()
                                             ? "available (use `perf stat` / `perf record` on sqrtdk bench)"
                                             : "not supported here (perf_event_open refused cycles); timings only");
}

void add_profile_command(CLI::App& app) {
  auto a = std::make_shared<ProfileArgs>();
  CLI::App* cmd = app.add_subcommand("profile", "Per-op timings of prefill and decode against the roofline.");
  cmd->footer("Examples:\n  sqrtdk profile\n  sqrtdk profile --prefill 512 --decode 64 --by-layer\n"
              "  sqrtdk profile --trace trace.json --roofline roofline.svg\n"
              "The roofs are measured once and cached in ~/.cache/sqrtdk/roofs.json; --peak-gflops and\n"
              "--bandwidth-gbs give them instead.");
  a->model.add_to(*cmd);
  cmd->add_option("--prefill", a->prefill, "prompt tokens to prefill")->check(at_least(1))->capture_default_str();
  cmd->add_option("--decode", a->decode, "decode steps after the prompt")->check(at_least(0))->capture_default_str();
  cmd->add_option("--trace", a->trace, "write a Chrome trace-event JSON (Perfetto) here");
  cmd->add_option("--roofline", a->roofline, "write the roofline picture (SVG) here");
  cmd->add_option("--peak-gflops", a->peak_gflops, "FMA peak to use instead of measuring");
  cmd->add_option("--bandwidth-gbs", a->dram_gbs, "DRAM read bandwidth to use instead of measuring");
  cmd->add_option("--l3-gbs", a->l3_gbs, "with --peak-gflops and --bandwidth-gbs: the L3-resident read bandwidth");
  cmd->add_option("--l2-gbs", a->l2_gbs, "with --peak-gflops and --bandwidth-gbs: the L2-resident read bandwidth "
                                         "(of the threads' L2s together)");
  cmd->add_flag("--recalibrate", a->recalibrate, "measure the roofs now (e.g. the cache was made on a busy machine)");
  cmd->add_flag("--by-layer", a->by_layer, "also print every (layer, op)");
  cmd->add_flag("--json", a->json, "print JSON");
  cmd->add_flag("-q,--quiet", a->quiet, "no progress output");
  cmd->callback([a, cmd] {
    a->lengths_given = cmd->count("--prefill") + cmd->count("--decode") > 0;
    run(*a);
  });
}

}  // namespace sqrtdk::cli
