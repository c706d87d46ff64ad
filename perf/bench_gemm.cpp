// bench-gemm: sqrtdk's GEMM against oneDNN's matmul and OpenBLAS, all measured in the same run and interleaved,
// with the machine's FMA peak and DRAM read bandwidth measured in that run too.
//
// Cases (M × N × K, weights [N, K]): decode 1 × {768, 2048, 3072, 32000} × {768, 2048, 3072}; small batch
// 4 × 3072 × 768; prefill {32, 128, 512} × {768, 2048, 3072} × {768, 2048, 3072}; lm-head 128 × 32000 × 768;
// square 2048³. Reports GFLOP/s, % of the FMA peak (M > 1) or GB/s of weights streamed and % of the read bandwidth
// (M = 1), and the ratios ours / oneDNN and ours / OpenBLAS, at each thread count, medians of --reps runs.
//
// Method (what a reader of the figures needs to know): wall-clock time; each sample repeats one call until it
// lasts ≥ 5 ms and takes the mean, and samples of ours, oneDNN and OpenBLAS alternate (ours, oneDNN, OpenBLAS,
// ours, ...) so noise from other processes on a shared machine hits all three alike; the figure is the median of
// --reps samples. Caches are warm (the same weights every call: decode shapes that fit in the L3 are read from it).
// Each peer gets its best configuration, prepared outside the timed loop:
//   ours:     weights packed once; gemm() with the thread count as its argument.
//   oneDNN:   per shape and thread count, a matmul primitive created for that exact M with that OpenMP thread
//             count in effect, weights reordered once into its preferred layout, memory objects and stream
//             created once (perf/common/onednn_peer.h); only primitive.execute + stream.wait are timed.
//   OpenBLAS: the call a user would make: cblas_sgemv for M = 1, cblas_sgemm otherwise; thread count set once
//             per block; its best kernels for this CPU. Debian's OpenBLAS 0.3.21 does not recognise every CPU we
//             run on (on the Xeon, family 6 model 207, its own detection picks "Prescott": SSE3 kernels), and the
//             project environment sets OPENBLAS_CORETYPE=Haswell (AVX2) and OPENBLAS_L2_SIZE for old bugs. Both
//             variables are read when libopenblas loads, so this program re-executes itself once (its own
//             environment only) with OPENBLAS_CORETYPE naming the kernels of the best ISA we detect (SkylakeX for
//             AVX-512 F/BW/DQ/VL, Haswell for AVX2 + FMA; --openblas-coretype to choose) and OPENBLAS_L2_SIZE
//             removed. The core OpenBLAS reports (openblas_get_corename) is printed and kept in --json.
// Flags: --isa ref|avx2|avx512 (our kernels: the entry of gemm_kernels() that ISA selects, named in the output;
// default: SQRTDK_ISA or the best), --only SUBSTRING (cases whose name contains it), --no-openblas,
// --openblas-coretype NAME (default from the CPU, see above; "auto" = OpenBLAS's own detection), plus the common
// ones (--json, --smoke, --reps, --threads).
#include "perf/common/bench_util.h"
#include "perf/common/onednn_peer.h"

#include "ops/gemm/gemm.h"
#include "ops/gemm/gemm_kernels.h"

#include <sqrtdk/error.h>

#include <cblas.h>

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

using namespace sqrtdk;
using namespace sqrtdk::perf;
using sqrtdk::ops::PackedWeights;

extern "C" void openblas_set_num_threads(int);
extern "C" char* openblas_get_corename(void);

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

double gflops(const Case& c, double seconds) { return 2.0 * c.M * c.N * c.K / seconds * 1e-9; }

// Median seconds per call of each of fns, timed in turn (fns[0], fns[1], ..., fns[0], ...) so that noise from
// other processes on this shared machine hits all alike. Each sample repeats a call enough times to last ≥ 5 ms.
std::vector<double> interleaved_medians(const std::vector<std::function<void()>>& fns, int reps) {
  auto inner_count = [](const std::function<void()>& fn) {
    fn();  // warm-up: faults in scratch and outputs, wakes the thread pools
    const double t0 = now_seconds();
    fn();
    const double once = now_seconds() - t0;
    return std::max(1, static_cast<int>(std::min(1000.0, 0.005 / std::max(once, 1e-9))));
  };
  std::vector<int> inner;
  for (const auto& fn : fns) inner.push_back(inner_count(fn));
  auto sample = [](const std::function<void()>& fn, int n) {
    wait_for_idle_threads();  // the previous contender's spinning workers must not hold this one's cores
    const double t0 = now_seconds();
    for (int i = 0; i < n; ++i) fn();
    return (now_seconds() - t0) / n;
  };
  std::vector<std::vector<double>> samples(fns.size());
  for (int r = 0; r < reps; ++r)
    for (size_t i = 0; i < fns.size(); ++i) samples[i].push_back(sample(fns[i], inner[i]));
  std::vector<double> out;
  for (auto& s : samples) out.push_back(median(s));
  return out;
}

// Throws if a peer's output differs from ours by more than float rounding allows (relative to the largest |value|;
// inputs in [-1, 1], K ≤ 3072: rounding stays near 1e-6 of it).
void check_agree(const Case& c, const char* peer, const std::vector<float>& ours, const std::vector<float>& theirs) {
  double scale = 0, worst = 0;
  for (size_t i = 0; i < ours.size(); ++i) {
    scale = std::max(scale, static_cast<double>(std::fabs(ours[i])));
    worst = std::max(worst, static_cast<double>(std::fabs(ours[i] - theirs[i])));
  }
  if (!(worst <= 1e-4 * scale))
    throw Error("bench-gemm: " + c.name() + ": " + peer + "'s result differs from ours by " + std::to_string(worst) +
                " (largest |value| " + std::to_string(scale) + ")");
}

// OpenBLAS's kernels for the best ISA this CPU runs ("" = leave the choice to OpenBLAS's own detection).
std::string default_openblas_coretype() {
  switch (best_isa()) {
    case Isa::avx512:
    case Isa::avx512_vnni:
    case Isa::avx512_bf16: return "SkylakeX";
    case Isa::avx2: return "Haswell";
    default: return "";
  }
}

// OpenBLAS reads OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE when it is loaded: unless they already are as wanted
// (coretype set, or unset if empty; no L2 override), run this program again with them so (its own environment only).
void reexec_for_openblas(const std::string& coretype, char** argv) {
  const char* have = std::getenv("OPENBLAS_CORETYPE");
  const bool coretype_ok = coretype.empty() ? have == nullptr : have != nullptr && coretype == have;
  if (coretype_ok && std::getenv("OPENBLAS_L2_SIZE") == nullptr) return;
  if (coretype.empty())
    unsetenv("OPENBLAS_CORETYPE");
  else
    setenv("OPENBLAS_CORETYPE", coretype.c_str(), 1);
  unsetenv("OPENBLAS_L2_SIZE");
  execv("/proc/self/exe", argv);
  throw Error(std::string("bench-gemm: cannot re-execute itself with OpenBLAS's environment set: ") +
              std::strerror(errno));
}

}  // namespace

int main(int argc, char** argv) try {
  // Read before anything else: they decide whether this process re-executes itself for OpenBLAS.
  bool with_openblas = true;
  std::string coretype = default_openblas_coretype();
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--no-openblas") with_openblas = false;
    if (std::string(argv[i]) == "--openblas-coretype" && i + 1 < argc) {
      coretype = argv[i + 1];
      if (coretype == "auto") coretype.clear();
    }
  }
  if (with_openblas) reexec_for_openblas(coretype, argv);
  BenchArgs args = BenchArgs::parse(
      argc, argv,
      "bench-gemm: sqrtdk GEMM vs oneDNN matmul and OpenBLAS sgemv/sgemm, interleaved (GFLOP/s, % of measured "
      "peak, ratios)\n"
      "  --isa ref|avx2|avx512  our kernels' ISA (default: SQRTDK_ISA or the best)\n"
      "  --only SUBSTRING       only cases whose name contains it (e.g. 'decode', '512x3072')\n"
      "  --no-openblas          skip OpenBLAS\n"
      "  --openblas-coretype NAME  OpenBLAS's kernels (default: SkylakeX on AVX-512, Haswell on AVX2; auto = its "
      "own detection)");
  Isa isa = default_isa();
  std::string only;
  for (size_t i = 0; i < args.rest.size(); ++i) {
    const std::string& a = args.rest[i];
    if (a == "--isa" && i + 1 < args.rest.size()) {
      isa = parse_isa(args.rest[++i]);
      if (!cpu_supports(isa)) throw Error("--isa " + std::string(isa_name(isa)) + ": not supported by this CPU");
    } else if (a == "--only" && i + 1 < args.rest.size()) {
      only = args.rest[++i];
    } else if (a == "--no-openblas") {  // both read before BenchArgs::parse: they decide the re-execution
    } else if (a == "--openblas-coretype" && i + 1 < args.rest.size()) {
      ++i;
    } else {
      std::fprintf(stderr, "bench-gemm: unknown argument '%s' (see --help)\n", a.c_str());
      return 1;
    }
  }
  const std::vector<Case> cases = make_cases(args.smoke, only);
  const std::map<int, MachineRoofs> roofs = measure_roofs(isa, args.threads, args.smoke);

  const char* kernel = ops::select_kernel(ops::gemm_detail::gemm_kernels(), isa).name;
  nlohmann::json out = {
      {"machine", machine_json(roofs, "wall-clock median of " + std::to_string(args.reps) +
                                          " interleaved samples, warm caches", args.threads)},
      {"isa", isa_name(isa)},
      {"kernel", kernel},
      {"method",
       {{"clock", "wall"},
        {"statistic", "median of --reps samples; a sample is the mean of repeated calls lasting >= 5 ms"},
        {"order", "interleaved per sample: sqrtdk, oneDNN, OpenBLAS"},
        {"caches", "warm (same weights every call): decode weight GB/s is set against the read roof of the level "
                   "the weights fit in (L2, L3 or DRAM)"},
        {"reps", args.reps},
        {"onednn", "primitive per shape and thread count, weights reordered and memory objects made outside the "
                   "timed loop; only execute + wait timed"},
        {"openblas", with_openblas ? "cblas_sgemv for M = 1, cblas_sgemm otherwise; OPENBLAS_CORETYPE set to the "
                                     "best ISA's kernels, OPENBLAS_L2_SIZE unset"
                                   : "not run (--no-openblas)"},
        {"openblas_core", with_openblas ? std::string(openblas_get_corename()) : std::string("-")}}},
      {"results", nlohmann::json::array()}};
  Table table({"case", "thr", "sqrtdk GFLOP/s", "% peak", "GB/s", "% read roof", "oneDNN GFLOP/s", "x oneDNN",
               "OpenBLAS GFLOP/s", "x OpenBLAS"});
  for (const Case& c : cases) {
    const auto src = random_vector(c.M * c.K, 1), w = random_vector(c.N * c.K, 2);
    // One output per contestant, so none finds another's output in its cache.
    std::vector<float> dst(c.M * c.N), dst_dnnl(c.M * c.N), dst_blas(c.M * c.N);
    const PackedWeights ours = PackedWeights::pack(w.data(), c.N, c.K, c.K, isa);
    const int M = static_cast<int>(c.M), N = static_cast<int>(c.N), K = static_cast<int>(c.K);
    for (int t : args.threads) {
      // oneDNN and OpenBLAS take their thread counts from state (the OpenMP ICV, OpenBLAS's own): set for this
      // block, restored on every exit. Ours takes t as an argument.
      const ScopedOmpThreads omp_threads(t);
      if (with_openblas) openblas_set_num_threads(t);
      OnednnMatmul dnnl(w.data(), c.N, c.K, c.K, c.M, c.K, c.N, {}, nullptr, t);
      dnnl.bind(src.data(), dst_dnnl.data());
      std::vector<std::function<void()>> fns = {
          [&] { ops::gemm(src.data(), c.M, c.K, ours, dst.data(), c.N, {}, t); }, [&] { dnnl.execute(); }};
      if (with_openblas)
        fns.push_back([&] {
          if (c.M == 1)
            cblas_sgemv(CblasRowMajor, CblasNoTrans, N, K, 1.0f, w.data(), K, src.data(), 1, 0.0f, dst_blas.data(),
                        1);
          else
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, src.data(), K, w.data(), K, 0.0f,
                        dst_blas.data(), N);
        });
      const std::vector<double> s = interleaved_medians(fns, args.reps);
      // The three computed the same product (a peer called wrongly would be timed doing something else).
      check_agree(c, "oneDNN", dst, dst_dnnl);
      if (with_openblas) check_agree(c, "OpenBLAS", dst, dst_blas);
      const double s_ours = s[0], s_dnnl = s[1], s_blas = with_openblas ? s[2] : 0.0;
      const double g = gflops(c, s_ours), g_dnnl = gflops(c, s_dnnl), g_blas = s_blas > 0 ? gflops(c, s_blas) : 0;
      const double weight_gbs = 4.0 * c.N * c.K / s_ours * 1e-9;
      const bool decode = c.M == 1;
      // Warm weights: the roof is the level they fit in (an L3-resident shape is never set against DRAM).
      ReadRoof read_roof;
      const RoofShare bw_share = share_of_read_roof(weight_gbs, 4.0 * c.N * c.K, roofs.at(t), &read_roof);
      const RoofShare peak_share = share_of_roof(g, roofs.at(t).peak_gflops, "FMA peak");
      table.add({c.name(), std::to_string(t), fmt(g), pct_cell(peak_share), decode ? fmt(weight_gbs) : "",
                 decode ? pct_cell(bw_share) + " " + memory_level_name(read_roof.level) : "",
                 fmt(g_dnnl), fmt(g / g_dnnl, 2), s_blas > 0 ? fmt(g_blas) : "-",
                 s_blas > 0 ? fmt(g / g_blas, 2) : "-"});
      nlohmann::json r = {{"case", c.group}, {"M", c.M}, {"N", c.N}, {"K", c.K}, {"threads", t},
                          {"sqrtdk_gflops", g}, {"pct_peak", pct_json(peak_share)}, {"onednn_gflops", g_dnnl},
                          {"ratio_onednn", g / g_dnnl}, {"onednn_impl", dnnl.impl_name()}};
      if (decode) {
        r["sqrtdk_weight_gbs"] = weight_gbs;
        r["read_roof"] = memory_level_name(read_roof.level);
        r["pct_read_roof"] = pct_json(bw_share);
        r["read_roof_note"] = bw_share.text;
      }
      if (s_blas > 0) {
        r["openblas_gflops"] = g_blas;
        r["ratio_openblas"] = g / g_blas;
        r["openblas_call"] = decode ? "cblas_sgemv" : "cblas_sgemm";
      }
      out["results"].push_back(r);
    }
  }
  if (args.json) {
    std::printf("%s\n", out.dump(2).c_str());
  } else {
    std::printf("bench-gemm: isa %s (%s) on %s; wall-clock medians of %d interleaved samples, warm caches; "
                "roofs measured in this run (decode GB/s against the read roof of the level the weights fit in):\n",
                isa_name(isa), kernel, out["machine"]["cpu"].get<std::string>().c_str(), args.reps);
    for (int t : args.threads)
      std::printf("  %d thread(s): FMA peak %.1f GFLOP/s; read DRAM %.1f, L3 %.1f, L2 %.1f GB/s\n", t,
                  roofs.at(t).peak_gflops, roofs.at(t).dram_gbs, roofs.at(t).l3_gbs, roofs.at(t).l2_gbs);
    if (with_openblas) std::printf("OpenBLAS core: %s\n", openblas_get_corename());
    std::printf("%s", table.str().c_str());
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench-gemm: %s\n", e.what());
  return 1;
}
