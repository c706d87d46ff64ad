// sqrtdk explain-scaling: why attention divides q·k by √d_k, shown with the engine's own GEMM and softmax
// (the experiment itself is engine/src/scaling_experiment.*).
#include "tools/cli/cli_util.h"
#include "tools/cli/commands.h"

#include <sqrtdk/error.h>

#include "tools/explain/scaling_experiment.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <stdexcept>

namespace sqrtdk::cli {

namespace {

struct ExplainArgs {
  std::vector<size_t> d_ks = {2, 16, 64, 256, 1024};
  std::vector<size_t> keys = {64, 512};
  size_t samples = 10000;
  uint64_t seed = 20261130;
  std::string isa, svg;
  int threads = 1;  // about 1.5 s of one core in all; OpenMP on a busy 2-core machine only adds spinning
  bool json = false;
};

std::string row_text(const std::vector<float>& v, bool sci) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) {
    char buf[32];
    std::snprintf(buf, sizeof buf, sci && v[i] < 1e-3f ? "%.3g" : "%.5g", static_cast<double>(v[i]));
    s += (i ? ", " : "") + std::string(buf);
  }
  return s + "]";
}

void print_table(const ScalingReport& r) {
  const ScalingConfig& c = r.config;
  std::printf("Why attention divides q.k by sqrt(d_k): q, k with iid N(0, 1) components, seed %llu, ISA %s\n"
              "(dot products: the engine's gemm_unpacked, Q·Kᵀ as in attention; softmax: softmax_rows)\n\n",
              static_cast<unsigned long long>(c.seed), isa_name(c.isa));
  std::printf("1. The dot product grows with d_k: N = %zu independent (q, k) pairs\n", c.n_samples);
  std::printf("   theory: E[q.k] = 0, Var[q.k] = d_k;  scaled = q.k/sqrt(d_k): E = 0, Var = 1;  z = (sample - theory) / SE\n");
  std::printf("%6s | %9s %10s %10s %6s | %9s %8s %8s %6s\n", "d_k", "mean", "var", "theory", "z", "mean", "var",
              "theory", "z");
  std::printf("%6s | %9s %10s %10s %6s | %9s %8s %8s %6s\n", "", "q.k", "q.k", "", "", "scaled", "scaled", "", "");
  for (const DotMoments& m : r.moments)
    std::printf("%6zu | %9.3f %10.2f %10zu %+6.2f | %9.4f %8.4f %8d %+6.2f\n", m.d_k, m.mean, m.var, m.d_k,
                (m.var - static_cast<double>(m.d_k)) / m.se_var, m.mean_scaled, m.var_scaled, 1,
                (m.var_scaled - 1) / m.se_var_scaled);
  std::printf("   SE(var) = sqrt((2 d_k^2 + 6 d_k) / N), from E[(q.k)^4] = 3 d_k^2 + 6 d_k; scaled: SE / d_k\n\n");

  std::printf("2. Softmax over m keys turns one-hot without the scale: means over %zu rows\n", c.n_samples);
  std::printf("   (entropy in nats, uniform = ln m; saturation = sum p(1-p), the softmax Jacobian's trace, 0 when "
              "one-hot)\n");
  std::printf("%5s %6s | %8s %8s | %8s %8s %7s | %8s %8s\n", "m", "d_k", "max p", "max p", "entropy", "entropy",
              "ln m", "satur.", "satur.");
  std::printf("%5s %6s | %8s %8s | %8s %8s %7s | %8s %8s\n", "", "", "scaled", "unscaled", "scaled", "unscaled", "",
              "scaled", "unscaled");
  for (size_t i = 0; i + 1 < r.sharpness.size(); i += 2) {
    const Sharpness& s = r.sharpness[i];
    const Sharpness& u = r.sharpness[i + 1];
    std::printf("%5zu %6zu | %8.4f %8.4f | %8.4f %8.4f %7.3f | %8.4f %8.4f\n", s.n_keys, s.d_k, s.max_prob,
                u.max_prob, s.entropy, u.entropy, std::log(static_cast<double>(s.n_keys)), s.saturation,
                u.saturation);
  }
  std::printf("\n3. Textbook rows: the same logits, ten times larger\n");
  std::printf("   softmax([1, 2, 3])    = %s\n", row_text(r.textbook_probs[0], false).c_str());
  std::printf("   softmax([10, 20, 30]) = %s\n", row_text(r.textbook_probs[1], true).c_str());
  std::printf("\nUnscaled scores have standard deviation sqrt(d_k) (%.0f at d_k = %zu): softmax saturates and its "
              "gradient vanishes.\nDividing by sqrt(d_k) keeps the variance at 1 for every d_k.\n",
              std::sqrt(static_cast<double>(r.moments.back().d_k)), r.moments.back().d_k);
}

nlohmann::json to_json(const ScalingReport& r) {
  const ScalingConfig& c = r.config;
  nlohmann::json j = {{"seed", c.seed}, {"samples", c.n_samples}, {"isa", isa_name(c.isa)}, {"d_k", c.d_ks},
                      {"keys", c.n_keys}, {"moments", nlohmann::json::array()},
                      {"sharpness", nlohmann::json::array()}, {"textbook", nlohmann::json::array()}};
  for (const DotMoments& m : r.moments)
    j["moments"].push_back({{"d_k", m.d_k}, {"n", m.n}, {"mean", m.mean}, {"var", m.var},
                            {"mean_scaled", m.mean_scaled}, {"var_scaled", m.var_scaled},
                            {"theory_var", m.d_k}, {"theory_var_scaled", 1}, {"se_mean", m.se_mean},
                            {"se_var", m.se_var}, {"se_mean_scaled", m.se_mean_scaled},
                            {"se_var_scaled", m.se_var_scaled}});
  for (const Sharpness& s : r.sharpness)
    j["sharpness"].push_back({{"keys", s.n_keys}, {"d_k", s.d_k}, {"scaled", s.scaled}, {"max_prob", s.max_prob},
                              {"entropy", s.entropy}, {"log_keys", std::log(static_cast<double>(s.n_keys))},
                              {"saturation", s.saturation}});
  for (size_t i = 0; i < r.textbook_inputs.size(); ++i)
    j["textbook"].push_back({{"logits", r.textbook_inputs[i]}, {"probs", r.textbook_probs[i]}});
  return j;
}

void run(const ExplainArgs& a) {
  ScalingConfig c;
  c.d_ks = a.d_ks;
  c.n_keys = a.keys;
  c.n_samples = a.samples;
  c.seed = a.seed;
  c.isa = a.isa.empty() ? default_isa() : parse_isa(a.isa);
  c.n_threads = a.threads;
  const ScalingReport r = run_scaling_experiment(c);
  if (!a.svg.empty()) {
    std::ofstream out(a.svg, std::ios::binary);
    if (!(out << scaling_svg(r)) || !out.flush()) throw Error(a.svg + ": cannot write");  // exit 2, as every output path
  }
  if (a.json) {
    std::printf("%s\n", to_json(r).dump(2).c_str());
    return;
  }
  print_table(r);
  if (!a.svg.empty()) std::printf("\nplot: %s\n", a.svg.c_str());
}

}  // namespace

void add_explain_scaling_command(CLI::App& app) {
  auto a = std::make_shared<ExplainArgs>();
  CLI::App* cmd = app.add_subcommand(
      "explain-scaling", "Why attention divides q·k by sqrt(d_k): dot-product moments and softmax sharpness.");
  cmd->footer("Examples:\n  sqrtdk explain-scaling\n  sqrtdk explain-scaling --svg scaling.svg\n"
              "  sqrtdk explain-scaling --dk 8,128,2048 --keys 32 --samples 20000 --seed 7 --json\n"
              "Needs no model. Runs in about 1.5 s of one core with the defaults.");
  cmd->add_option("--dk", a->d_ks, "key dimensions d_k, comma-separated")
      ->delimiter(',')
      ->check(number_in(1, 65536))
      ->capture_default_str();
  cmd->add_option("--keys", a->keys, "keys per softmax row m, comma-separated")
      ->delimiter(',')
      ->check(number_in(2, 65536))
      ->capture_default_str();
  cmd->add_option("-n,--samples", a->samples, "samples N per d_k: (q, k) pairs and softmax rows")
      ->check(number_in(2, 10'000'000))
      ->capture_default_str();
  cmd->add_option("--seed", a->seed, "random seed (same seed, same numbers)")->capture_default_str();
  cmd->add_option("-t,--threads", a->threads, "threads for GEMM and softmax (0: all cores)")
      ->check(number_in(0, 1024))
      ->capture_default_str();
  cmd->add_option("--isa", a->isa, "force an ISA (any listed; default: the best this CPU has, or SQRTDK_ISA)")
      ->check(isa_name_check());
  cmd->add_option("--svg", a->svg, "write a plot of entropy and max probability against d_k (SVG) here")
      ->check(non_empty("give the file to write"));
  cmd->add_flag("--json", a->json, "print JSON instead of the table");
  cmd->callback([a] { run(*a); });
}

}  // namespace sqrtdk::cli
