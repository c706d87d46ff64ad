// sqrtdk calibrate: measure which attention path (fused or unfused) is faster on this machine for a model's heads,
// at every mode and key count of the ladder (ops/attention/attention_paths.h), and cache the table for every later
// load of a model with the same heads (ModelOptions::attention_paths = cached, the default).
#include "tools/cli/cli_util.h"
#include "tools/cli/commands.h"

#include <sqrtdk/model.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>

namespace sqrtdk::cli {

namespace {

struct CalibrateArgs {
  ModelArgs model;
  bool recalibrate = false;
  bool json = false;
};

void calibrate(CalibrateArgs a) {
  a.model.attention_paths = a.recalibrate ? "recalibrate" : "calibrate";
  if (!a.json) std::fprintf(stderr, "sqrtdk calibrate: timing fused and unfused attention (seconds, once)...\n");
  const auto t0 = std::chrono::steady_clock::now();
  auto model = a.model.load();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const ModelConfig& c = model->config();
  if (a.json) {
    nlohmann::json out = {{"model", model->path()},     {"isa", isa_name(model->isa())},
                          {"n_heads", c.n_heads},       {"n_kv_heads", c.n_kv_heads},
                          {"head_dim", c.head_dim},     {"source", model->attention_paths_source()},
                          {"table", model->attention_paths_table()}, {"seconds", seconds}};
    std::printf("%s\n", out.dump(2).c_str());
    return;
  }
  std::printf("model   %s (%u heads / %u kv heads x %u, ISA %s)\n", model->path().c_str(), c.n_heads, c.n_kv_heads,
              c.head_dim, isa_name(model->isa()));
  std::printf("source  %s\n", model->attention_paths_source().c_str());
  std::printf("table   keys, fused time / unfused time, path taken (shapes between take the nearest key count):\n%s",
              model->attention_paths_table().c_str());
  std::printf("time    %.1f s (load and calibration)\n", seconds);
}

}  // namespace

void add_calibrate_command(CLI::App& app) {
  auto a = std::make_shared<CalibrateArgs>();
  CLI::App* cmd = app.add_subcommand(
      "calibrate", "Measure which attention path is faster here for a model's heads, and cache it for later loads.");
  cmd->footer(
      "Times the fused and unfused attention paths for the model's head configuration at 64 .. 8192 keys, up to\n"
      "the model's context (decode; a causal whole prompt; a causal 512-query chunk of a longer prompt; non-causal\n"
      "prefill; points over 80 GFLOP a call are skipped) at 1 thread and at all cores,\n"
      "and stores the ratios in ($XDG_CACHE_HOME or ~/.cache)/sqrtdk/attention_paths.json. Later loads of any model\n"
      "with the same heads on this CPU and ISA take the measured path (--attention-paths cached, the default).\n"
      "SQRTDK_VERBOSE=1 prints each point as it is measured.\n"
      "Examples:\n  sqrtdk calibrate\n  sqrtdk calibrate --model m.sqdk --recalibrate");
  a->model.add_to(*cmd, /*with_threads=*/false, /*with_attention_paths=*/false);
  cmd->add_flag("--recalibrate", a->recalibrate, "measure again even if a table is cached, and replace it");
  cmd->add_flag("--json", a->json, "print JSON instead of text");
  cmd->callback([a] { calibrate(*a); });
}

}  // namespace sqrtdk::cli
