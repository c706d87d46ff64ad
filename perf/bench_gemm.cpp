// bench-gemm: sqrtdk's GEMM against oneDNN's matmul and OpenBLAS cblas_sgemm, all measured in the same run, with
// the machine's FMA peak and DRAM read bandwidth measured in that run too.
//
// Cases (M × N × K, weights [N, K]): decode 1 × {768, 2048, 3072, 32000} × {768, 2048, 3072}; small batch
// 4 × 3072 × 768; prefill {32, 128, 512} × {768, 2048, 3072} × {768, 2048, 3072}; lm-head 128 × 32000 × 768;
// square 2048³. Reports GFLOP/s, % of the FMA peak (M > 1) or GB/s of weights streamed and % of the read bandwidth
// (M = 1), and the ratios ours / oneDNN and ours / OpenBLAS, at each thread count, medians of --reps runs.
// OpenBLAS runs in a child process of this binary with OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE removed from its
// environment (the project environment sets them for old OpenBLAS bugs; with them set it runs AVX2 kernels).
// Flags: --isa ref|avx2|avx512 (our kernels: the entry of gemm_kernels() that ISA selects, named in the output;
// default: SQRTDK_ISA or the best), --only SUBSTRING (cases whose name contains it), --no-openblas, plus the common
// ones (--json, --smoke, --reps, --threads).
#include "perf/common/bench_util.h"

#include "ops/gemm/gemm.h"
#include "ops/gemm/gemm_kernels.h"

#include <sqrtdk/error.h>

#include <cblas.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <utility>
#include <map>
#include <random>
#include <string>
#include <vector>

using namespace sqrtdk;
using namespace sqrtdk::perf;
using sqrtdk::ops::GemmBackend;
using sqrtdk::ops::PackedWeights;

extern "C" void openblas_set_num_threads(int);

namespace {

struct Case {
  std::string group;
  size_t M, N, K;
  std::string name() const {
    std::string s = group;
    s.append(" ").append(std::to_string(M)).append("x").append(std::to_string(N)).append("x");
    return s.append(std::to_string(K));
  }
};

std::vector<Case> make_cases(bool smoke, const std::string& only) {
  std::vector<Case> all;
  if (smoke) {
    all = {{"decode", 1, 96, 80}, {"small", 4, 96, 80}, {"prefill", 33, 70, 300}};
  } else {
    for (size_t N : {768, 2048, 3072, 32000})
      for (size_t K : {768, 2048, 3072}) all.push_back({"decode", 1, N, K});
    all.push_back({"small", 4, 3072, 768});
    for (size_t M : {32, 128, 512})
      for (size_t N : {768, 2048, 3072})
        for (size_t K : {768, 2048, 3072}) all.push_back({"prefill", M, N, K});
    all.push_back({"lm-head", 128, 32000, 768});
    all.push_back({"square", 2048, 2048, 2048});
  }
  std::vector<Case> out;
  for (const Case& c : all)
    if (only.empty() || c.name().find(only) != std::string::npos) out.push_back(c);
  return out;
}

std::vector<float> random_vector(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

std::string key(const Case& c, int threads) { return c.name().append(" t").append(std::to_string(threads)); }

double gflops(const Case& c, double seconds) { return 2.0 * c.M * c.N * c.K / seconds * 1e-9; }

// Median seconds per call of a and b, timed alternately (a, b, a, b, ...) so that noise from other processes on
// this shared machine hits both alike. Each sample repeats the call enough times to last ≥ 5 ms.
std::pair<double, double> interleaved_medians(const std::function<void()>& a, const std::function<void()>& b,
                                              int reps) {
  auto inner_count = [](const std::function<void()>& fn) {
    fn();  // warm-up: faults in scratch, creates cached primitives, wakes the thread pool
    const double t0 = now_seconds();
    fn();
    const double once = now_seconds() - t0;
    return std::max(1, static_cast<int>(std::min(1000.0, 0.005 / std::max(once, 1e-9))));
  };
  const int inner_a = inner_count(a), inner_b = inner_count(b);
  auto sample = [](const std::function<void()>& fn, int inner) {
    const double t0 = now_seconds();
    for (int i = 0; i < inner; ++i) fn();
    return (now_seconds() - t0) / inner;
  };
  std::vector<double> sa, sb;
  for (int r = 0; r < reps; ++r) {
    sa.push_back(sample(a, inner_a));
    sb.push_back(sample(b, inner_b));
  }
  return {median(sa), median(sb)};
}

// The child: OpenBLAS only, one JSON object {key: seconds} on stdout.
int run_openblas_worker(const BenchArgs& args, const std::vector<Case>& cases) {
  nlohmann::json out = nlohmann::json::object();
  for (const Case& c : cases) {
    const auto src = random_vector(c.M * c.K, 1), w = random_vector(c.N * c.K, 2);
    std::vector<float> dst(c.M * c.N);
    for (int t : args.threads) {
      openblas_set_num_threads(t);
      const double s = median_seconds(
          [&] {
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(c.M), static_cast<int>(c.N),
                        static_cast<int>(c.K), 1.0f, src.data(), static_cast<int>(c.K), w.data(),
                        static_cast<int>(c.K), 0.0f, dst.data(), static_cast<int>(c.N));
          },
          args.reps);
      out[key(c, t)] = s;
    }
  }
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

// Re-executes this binary as the OpenBLAS worker with the two variables removed from its environment only.
nlohmann::json openblas_in_child(const BenchArgs& args, const std::string& only) {
  std::string threads;
  for (int t : args.threads) threads.append(threads.empty() ? "" : ",").append(std::to_string(t));
  std::string cmd = "env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE /proc/" + std::to_string(getpid()) +
                    "/exe --openblas-worker --reps " + std::to_string(args.reps) + " --threads " + threads;
  if (args.smoke) cmd += " --smoke";
  if (!only.empty()) cmd += " --only '" + only + "'";
  FILE* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr) throw Error("bench-gemm: cannot start the OpenBLAS worker");
  std::string text;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, pipe)) > 0;) text.append(buf, n);
  if (pclose(pipe) != 0) throw Error("bench-gemm: the OpenBLAS worker failed: " + text);
  return nlohmann::json::parse(text);
}

}  // namespace

int main(int argc, char** argv) try {
  BenchArgs args = BenchArgs::parse(
      argc, argv,
      "bench-gemm: sqrtdk GEMM vs oneDNN matmul and OpenBLAS sgemm (GFLOP/s, % of measured peak, ratios)\n"
      "  --isa ref|avx2|avx512  our kernels' ISA (default: SQRTDK_ISA or the best)\n"
      "  --only SUBSTRING       only cases whose name contains it (e.g. 'decode', '512x3072')\n"
      "  --no-openblas          skip OpenBLAS");
  Isa isa = default_isa();
  std::string only;
  bool worker = false, with_openblas = true;
  for (size_t i = 0; i < args.rest.size(); ++i) {
    const std::string& a = args.rest[i];
    if (a == "--isa" && i + 1 < args.rest.size()) {
      isa = parse_isa(args.rest[++i]);
      if (!cpu_supports(isa)) throw Error("--isa " + std::string(isa_name(isa)) + ": not supported by this CPU");
    } else if (a == "--only" && i + 1 < args.rest.size()) {
      only = args.rest[++i];
    } else if (a == "--openblas-worker") {
      worker = true;
    } else if (a == "--no-openblas") {
      with_openblas = false;
    } else {
      std::fprintf(stderr, "bench-gemm: unknown argument '%s' (see --help)\n", a.c_str());
      return 1;
    }
  }
  const std::vector<Case> cases = make_cases(args.smoke, only);
  if (worker) return run_openblas_worker(args, cases);

  const nlohmann::json blas = with_openblas ? openblas_in_child(args, only) : nlohmann::json::object();
  std::map<int, double> peak, bandwidth;
  for (int t : args.threads) {
    peak[t] = measure_fma_peak_gflops(isa, t, args.smoke);
    bandwidth[t] = measure_read_bandwidth_gbs(t, args.smoke);
  }

  const char* kernel = ops::select_kernel(ops::gemm_detail::gemm_kernels(), isa).name;
  nlohmann::json out = {{"machine", machine_json()}, {"isa", isa_name(isa)}, {"kernel", kernel},
                        {"results", nlohmann::json::array()}};
  for (int t : args.threads)
    out["roofs"].push_back({{"threads", t}, {"fma_peak_gflops", peak[t]}, {"dram_read_gbs", bandwidth[t]}});
  Table table({"case", "thr", "sqrtdk GFLOP/s", "% peak", "GB/s", "% DRAM bw", "oneDNN GFLOP/s", "x oneDNN",
               "OpenBLAS GFLOP/s", "x OpenBLAS"});
  for (const Case& c : cases) {
    const auto src = random_vector(c.M * c.K, 1), w = random_vector(c.N * c.K, 2);
    std::vector<float> dst(c.M * c.N);
    const PackedWeights ours = PackedWeights::pack(w.data(), c.N, c.K, c.K, isa, GemmBackend::sqrtdk);
    const PackedWeights dnnl = PackedWeights::pack(w.data(), c.N, c.K, c.K, isa, GemmBackend::onednn);
    for (int t : args.threads) {
      const auto [s_ours, s_dnnl] = interleaved_medians(
          [&] { ops::gemm(src.data(), c.M, c.K, ours, dst.data(), c.N, {}, t); },
          [&] { ops::gemm(src.data(), c.M, c.K, dnnl, dst.data(), c.N, {}, t); }, args.reps);
      const std::string k = key(c, t);
      const double s_blas = blas.contains(k) ? blas[k].get<double>() : 0.0;
      const double g = gflops(c, s_ours), g_dnnl = gflops(c, s_dnnl), g_blas = s_blas > 0 ? gflops(c, s_blas) : 0;
      const double weight_gbs = 4.0 * c.N * c.K / s_ours * 1e-9;
      const bool decode = c.M == 1;
      table.add({c.name(), std::to_string(t), fmt(g), fmt(100 * g / peak[t], 0) + "%",
                 decode ? fmt(weight_gbs) : "", decode ? fmt(100 * weight_gbs / bandwidth[t], 0) + "%" : "",
                 fmt(g_dnnl), fmt(g / g_dnnl, 2), s_blas > 0 ? fmt(g_blas) : "-",
                 s_blas > 0 ? fmt(g / g_blas, 2) : "-"});
      nlohmann::json r = {{"case", c.group}, {"M", c.M}, {"N", c.N}, {"K", c.K}, {"threads", t},
                          {"sqrtdk_gflops", g}, {"pct_peak", 100 * g / peak[t]}, {"onednn_gflops", g_dnnl},
                          {"ratio_onednn", g / g_dnnl}};
      if (decode) {
        r["sqrtdk_weight_gbs"] = weight_gbs;
        r["pct_dram_bw"] = 100 * weight_gbs / bandwidth[t];
      }
      if (s_blas > 0) {
        r["openblas_gflops"] = g_blas;
        r["ratio_openblas"] = g / g_blas;
      }
      out["results"].push_back(r);
    }
  }
  if (args.json) {
    std::printf("%s\n", out.dump(2).c_str());
  } else {
    std::printf("bench-gemm: isa %s (%s), medians of %d runs; roofs measured in this run:\n", isa_name(isa), kernel,
                args.reps);
    for (int t : args.threads)
      std::printf("  %d thread(s): FMA peak %.1f GFLOP/s, DRAM read %.1f GB/s\n", t, peak[t], bandwidth[t]);
    std::printf("%s", table.str().c_str());
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench-gemm: %s\n", e.what());
  return 1;
}
