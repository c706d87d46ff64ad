// bench-gemm: sqrtdk's GEMM against oneDNN's matmul and OpenBLAS, all measured in the same run and interleaved,
// with the machine's FMA peak and DRAM read bandwidth measured in that run too.
//
// Cases (M × N × K, weights [N, K]): decode 1 × {768, 2048, 3072, 32000} × {768, 2048, 3072}; small batch
// 4 × 3072 × 768; prefill {32, 128, 512} × {768, 2048, 3072} × {768, 2048, 3072} and the fused QKV of a 768-wide
// model, {32, 128, 512} × 2304 × 768 (a panel count, 36, that no power-of-two split divides); lm-head 128 × 32000 × 768;
// square 2048³. Reports GFLOP/s, % of the FMA peak (M > 1) or GB/s of weights streamed and % of the read bandwidth
// (M = 1), and the ratios ours / oneDNN and ours / OpenBLAS, at each thread count, medians of --reps runs.
//
// Method (what a reader of the figures needs to know): wall-clock time; each sample repeats one call until it
// lasts ≥ 5 ms and takes the mean, and samples of ours, oneDNN and OpenBLAS alternate (ours, oneDNN, OpenBLAS,
// ours, ...) so noise from other processes on a shared machine hits all three alike; the figure is the median of
// --reps samples. Caches are warm by default (the same weights every call: decode shapes that fit in the L3 are
// read from it). --cold (f32) gives each contender copies of the weights, together at least twice the L3 (96 MiB at
// least), and each call reads the next copy: its weights come from DRAM, as each layer's do in a forward pass
// (every layer's weights are read once per prefill or decode step); src and dst stay warm, as the activations do.
// Every contender cycles its own copies the same way, so the comparison stays like for like.
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
//
// --dtype bf16|q8 (default f32): the same cases with bf16 or q8 weights (gemm.h, WeightType; K a multiple of 32 for
// q8), ours against oneDNN's matmul in the same type (OnednnTypedMatmul: weights reordered once into its preferred
// layout, outside the timed loop); OpenBLAS is not run. What each side does inside the timed loop differs, and
// each difference is in oneDNN's favour (its best case):
//   bf16: ours takes f32 src and rounds it to bf16 inside the call (as the engine does); oneDNN is given src
//         already in bf16 (converted outside). dst f32 for both.
//   q8:   ours takes f32 src and quantizes it per row inside the call, then block-of-32 weight scales (GGUF
//         Q8_0); oneDNN is given u8 src quantized outside (one scale for the whole src, zero point 128) and s8
//         weights with one scale per output column (oneDNN 2.6 has no per-K-block scales), f32 dst.
// Figures: GFLOP/s (2·M·N·K per call); % of the type's peak measured in this run: bf16 against the BF16 dot peak
// (vdpbf16ps; the FMA peak at an ISA below avx512_bf16, whose kernels widen to f32), q8 as a MAC rate (M·N·K/s)
// against the int8 dot peak's MAC rate (vpdpbusd, 64 MACs per instruction; none below avx512_vnni); decode rows
// (M = 1): GB/s of our packed weights read per call against the read roof of the level they fit in (as f32).
// Results are checked (a peer called wrongly would be timed doing something else): bf16 ours against oneDNN
// (both take bf16 weights; they differ by src rounding and summation order); q8 each against the f32 product of
// the unquantized weights (the two quantize differently), with bounds justified at check_typed.
// Flags: --isa ref|avx2|avx512|avx512_vnni|avx512_bf16 (our kernels: the entry of the dtype's table that ISA
// selects, named in the output; default: SQRTDK_ISA or the best), --dtype f32|bf16|q8, --quick (a few real shapes
// of each group, for a fast look), --only SUBSTRING (cases whose name contains it), --no-openblas,
// --openblas-coretype NAME (default from the CPU, see above; "auto" = OpenBLAS's own detection), --onednn-isa NAME
// (caps oneDNN's ISA, e.g. avx512_core_bf16 to keep it off AMX; default: its best), plus the common ones (--json,
// --smoke, --reps, --threads).
#include "perf/common/bench_util.h"
#include "perf/common/onednn_peer.h"

#include "ops/base/float16.h"
#include "ops/gemm/gemm.h"
#include "ops/gemm/gemm_blocking.h"
#include "ops/gemm/gemm_kernels.h"
#include "ops/gemm/gemm_typed_kernels.h"

#include <sqrtdk/error.h>

#include <cblas.h>

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <utility>
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

// smoke: tiny shapes that still reach the tails (typed: K a multiple of 32, as q8 needs); quick: a few real shapes
// of each group.
std::vector<Case> make_cases(bool smoke, bool quick, bool typed, const std::string& only) {
  std::vector<Case> all;
  if (smoke && typed) {
    all = {{"decode", 1, 96, 96}, {"small", 4, 96, 96}, {"prefill", 33, 70, 320}};
  } else if (smoke) {
    all = {{"decode", 1, 96, 80}, {"small", 4, 96, 80}, {"prefill", 33, 70, 300}};
  } else if (quick) {
    all = {{"decode", 1, 768, 768},   {"decode", 1, 3072, 768},    {"small", 4, 3072, 768},
           {"prefill", 32, 768, 768}, {"prefill", 128, 2048, 768}};
  } else {
    for (size_t N : {768, 2048, 3072, 32000})
      for (size_t K : {768, 2048, 3072}) all.push_back({"decode", 1, N, K});
    all.push_back({"small", 4, 3072, 768});
    for (size_t M : {32, 128, 512})
      for (size_t N : {768, 2048, 3072})
        for (size_t K : {768, 2048, 3072}) all.push_back({"prefill", M, N, K});
    for (size_t M : {32, 128, 512}) all.push_back({"prefill", M, 2304, 768});  // the 134M Llama's QKV
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

// OpenBLAS's idle threads spin for 2^OPENBLAS_THREAD_TIMEOUT cycles after a call before they sleep; unset, 2^28
// (~0.1 s here). We wait for them before each sample (wait_for_idle_threads), but on a VM a vCPU that has just
// spun 0.1 s is then slow to get the host's CPU back, so the next contender's second thread came late: on Zen 5
// (2 vCPUs, 2026-12-04) with the default, our 2-thread GEMM ran at one thread's speed in most samples (27 of 42
// shapes below 0.9x oneDNN), and oneDNN's 2-thread decode was 1.47x faster with 2^20. With 2^20 (~0.3 ms: still
// spinning between back-to-back calls) every contender did as well or better, OpenBLAS included (its GFLOP/s
// median 1.03x / 0.99x the default's for M > 1 at 1 / 2 threads, 1.11x / 1.23x for M = 1). A value already set is
// kept.
constexpr const char* kOpenblasThreadTimeout = "20";

// OpenBLAS reads OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE / OPENBLAS_THREAD_TIMEOUT when it is loaded: unless they
// already are as wanted (coretype set, or unset if empty; no L2 override; a timeout), run this program again with
// them so (its own environment only).
void reexec_for_openblas(const std::string& coretype, char** argv) {
  const char* have = std::getenv("OPENBLAS_CORETYPE");
  const bool coretype_ok = coretype.empty() ? have == nullptr : have != nullptr && coretype == have;
  if (coretype_ok && std::getenv("OPENBLAS_L2_SIZE") == nullptr && std::getenv("OPENBLAS_THREAD_TIMEOUT") != nullptr)
    return;
  if (coretype.empty())
    unsetenv("OPENBLAS_CORETYPE");
  else
    setenv("OPENBLAS_CORETYPE", coretype.c_str(), 1);
  unsetenv("OPENBLAS_L2_SIZE");
  setenv("OPENBLAS_THREAD_TIMEOUT", kOpenblasThreadTimeout, 0);
  execv("/proc/self/exe", argv);
  throw Error(std::string("bench-gemm: cannot re-execute itself with OpenBLAS's environment set: ") +
              std::strerror(errno));
}

// ---- --dtype bf16 | q8 ----

// Per-row and per-column magnitudes the checks' bounds are made of.
struct Magnitudes {
  std::vector<double> src_l1, weight_max;  // Σ_k |src[m, k]| per row; max_k |w[n, k]| per weight row
  double src_max = 0;                      // max |src|
};
Magnitudes magnitudes(const Case& c, const std::vector<float>& src, const std::vector<float>& w) {
  Magnitudes g;
  g.src_l1.assign(c.M, 0);
  g.weight_max.assign(c.N, 0);
  for (size_t m = 0; m < c.M; ++m)
    for (size_t k = 0; k < c.K; ++k) {
      g.src_l1[m] += std::fabs(src[m * c.K + k]);
      g.src_max = std::max(g.src_max, static_cast<double>(std::fabs(src[m * c.K + k])));
    }
  for (size_t n = 0; n < c.N; ++n)
    for (size_t k = 0; k < c.K; ++k)
      g.weight_max[n] = std::max(g.weight_max[n], static_cast<double>(std::fabs(w[n * c.K + k])));
  return g;
}

// Throws unless `got` is close to `want` element by element (|got - want| ≤ bound(m, n): a rigorous worst case,
// catches garbage and NaN) and as a whole (‖got - want‖ / ‖want‖ ≤ max_relative_rms, Frobenius norms: the
// worst-case bounds grow like K where values grow like √K, so this is what catches a systematically wrong call).
// Returns the relative difference (kept in --json).
double check_typed(const Case& c, const std::string& what, const std::vector<float>& got,
                   const std::vector<float>& want, const std::function<double(size_t, size_t)>& bound,
                   double max_relative_rms) {
  double diff2 = 0, want2 = 0;
  for (size_t m = 0; m < c.M; ++m)
    for (size_t n = 0; n < c.N; ++n) {
      const double d = static_cast<double>(got[m * c.N + n]) - want[m * c.N + n];
      if (!(std::fabs(d) <= bound(m, n)))
        throw Error("bench-gemm: " + c.name() + ": " + what + " differs at (" + std::to_string(m) + ", " +
                    std::to_string(n) + ") by " + std::to_string(d) + ", above its bound " +
                    std::to_string(bound(m, n)));
      diff2 += d * d;
      want2 += static_cast<double>(want[m * c.N + n]) * want[m * c.N + n];
    }
  const double relative = want2 > 0 ? std::sqrt(diff2 / want2) : std::sqrt(diff2);
  if (!(relative <= max_relative_rms))
    throw Error("bench-gemm: " + c.name() + ": " + what + " differs by " + std::to_string(relative) +
                " (relative, Frobenius), above " + std::to_string(max_relative_rms));
  return relative;
}

struct TypedPeak {
  double value = 0;  // in the unit of the achieved figure it is compared with; 0: none measured
  const char* name = "";
};
// The roof a dtype's GEMM is set against (see the header): BF16 dot peak (GFLOP/s), or the FMA peak below
// avx512_bf16; q8: the int8 dot peak as MACs/s (GOP/s / 2), none below avx512_vnni.
TypedPeak typed_peak(ops::WeightType type, const MachineRoofs& r) {
  if (type == ops::WeightType::bf16)
    return r.bf16_peak_gflops > 0 ? TypedPeak{r.bf16_peak_gflops, "BF16 peak"} : TypedPeak{r.peak_gflops, "FMA peak"};
  return {r.int8_peak_gops / 2, "int8 MAC peak"};
}

// oneDNN's int8 inputs (quantized outside its timed loop): s8 weights with one scale per column n
// (max|w_n|/127, round to nearest), u8 src with one scale for all of src (max|src|/127) and zero point 128, and
// the output scales src_scale · weight_scale[n] that turn its int32 sums into the f32 product.
struct OnednnInt8Inputs {
  std::vector<int8_t> weights;
  std::vector<uint8_t> src;
  std::vector<float> output_scales;
  static constexpr int32_t kZeroPoint = 128;
};
OnednnInt8Inputs onednn_int8_inputs(const Case& c, const std::vector<float>& src, const std::vector<float>& w) {
  OnednnInt8Inputs in;
  in.weights.resize(c.N * c.K);
  in.output_scales.resize(c.N);
  float src_max = 0;
  for (float x : src) src_max = std::max(src_max, std::fabs(x));
  const float src_scale = src_max > 0 ? src_max / 127 : 1.0f;
  in.src.resize(src.size());
  for (size_t i = 0; i < src.size(); ++i)
    in.src[i] = static_cast<uint8_t>(std::nearbyint(src[i] / src_scale) + OnednnInt8Inputs::kZeroPoint);
  for (size_t n = 0; n < c.N; ++n) {
    float wmax = 0;
    for (size_t k = 0; k < c.K; ++k) wmax = std::max(wmax, std::fabs(w[n * c.K + k]));
    const float scale = wmax > 0 ? wmax / 127 : 1.0f;
    for (size_t k = 0; k < c.K; ++k)
      in.weights[n * c.K + k] = static_cast<int8_t>(std::nearbyint(w[n * c.K + k] / scale));
    in.output_scales[n] = src_scale * scale;
  }
  return in;
}

// The roofs again, now every case is timed; the higher of each figure bounds them (better_roofs), as in sqrtdk
// bench and bench-attention: a single probe before the cases read the 1-thread FMA peak at 236 GFLOP/s where a
// GEMM of the run then did 239 (AMD EPYC Zen 5, 2026-12-07).
void remeasure_roofs(Isa isa, const BenchArgs& args, std::map<int, MachineRoofs>& roofs) {
  for (const auto& [t, again] : measure_roofs(isa, args.threads, args.smoke))
    roofs[t] = better_roofs(roofs.at(t), again);
  warn_if_host_busy(roofs, "bench-gemm");
}

// The --dtype bf16|q8 run: fills `out` (JSON; its "results") and returns the text table. Measures the roofs again
// after the cases and keeps the higher of each figure in `roofs` (remeasure_roofs).
std::string run_typed(ops::WeightType type, Isa isa, const BenchArgs& args, const std::vector<Case>& cases,
                      std::map<int, MachineRoofs>& roofs, nlohmann::json& out) {
  const bool bf16 = type == ops::WeightType::bf16;
  struct Timed {
    const Case* c;
    int t;
    double s_ours, s_dnnl, weight_bytes, onednn_weight_bytes;
    std::string impl;
    nlohmann::json check;
  };
  std::vector<Timed> timed;
  for (const Case& c : cases) {
    const auto src = random_vector(c.M * c.K, 1), w = random_vector(c.N * c.K, 2);
    const Magnitudes mag = magnitudes(c, src, w);
    // Ours: weights in the type, packed once.
    std::vector<uint16_t> w_bf16, src_bf16;
    std::vector<ops::Q8Block> w_q8;
    PackedWeights ours;
    if (bf16) {
      w_bf16.resize(w.size());
      for (size_t i = 0; i < w.size(); ++i) w_bf16[i] = ops::float_to_bf16(w[i]);
      ours = PackedWeights::pack_bf16(w_bf16.data(), c.N, c.K, c.K, isa);
      src_bf16.resize(src.size());  // oneDNN's src, converted outside its timed loop
      for (size_t i = 0; i < src.size(); ++i) src_bf16[i] = ops::float_to_bf16(src[i]);
    } else {
      w_q8.resize(c.N * (c.K / ops::kQ8BlockSize));
      for (size_t n = 0; n < c.N; ++n)
        ops::quantize_row_q8(w.data() + n * c.K, c.K, w_q8.data() + n * (c.K / ops::kQ8BlockSize));
      ours = PackedWeights::pack_q8(w_q8.data(), c.N, c.K, c.K / ops::kQ8BlockSize, isa);
    }
    const OnednnInt8Inputs int8 = bf16 ? OnednnInt8Inputs{} : onednn_int8_inputs(c, src, w);
    // q8 is checked against the f32 product of the unquantized weights (our f32 GEMM, itself checked against
    // oneDNN's f32 matmul by the default run and the tests).
    std::vector<float> want;
    if (!bf16) {
      want.resize(c.M * c.N);
      ops::gemm(src.data(), c.M, c.K, PackedWeights::pack(w.data(), c.N, c.K, c.K, isa), want.data(), c.N);
    }
    std::vector<float> dst(c.M * c.N), dst_dnnl(c.M * c.N);
    for (int t : args.threads) {
      const ScopedOmpThreads omp_threads(t);
      OnednnTypedMatmul dnnl =
          bf16 ? OnednnTypedMatmul::bf16(w_bf16.data(), c.N, c.K, c.K, c.M, c.K, c.N, t)
               : OnednnTypedMatmul::int8(int8.weights.data(), c.N, c.K, c.K, int8.output_scales.data(),
                                         OnednnInt8Inputs::kZeroPoint, c.M, c.K, c.N, t);
      dnnl.bind(bf16 ? static_cast<const void*>(src_bf16.data()) : static_cast<const void*>(int8.src.data()),
                dst_dnnl.data());
      const std::vector<double> s = interleaved_medians(
          {[&] { ops::gemm(src.data(), c.M, c.K, ours, dst.data(), c.N, {}, t); }, [&] { dnnl.execute(); }},
          args.reps);
      nlohmann::json check;
      if (bf16) {
        // Ours against oneDNN, per element: each is within gemm.h's bf16 bound of the exact product,
        // (K·2^-24 + 2^-8)·Σ|a·w| (the 2^-8 for src rounded to bf16, which oneDNN's src is and ours may be), so
        // they differ by at most twice that; Σ_k|a·w| ≤ ‖a_m‖₁·max|w_n|. As a whole: src rounding is the only
        // modelled difference, a relative error ≤ 2^-9 per src element with random signs: ~2^-9/√3 ≈ 1.1e-3 of
        // the product's norm, plus summation order (~1e-6); 1e-2 leaves 9x, a wrongly called peer is off by ~1.
        const double eps = c.K * std::ldexp(1.0, -24) + std::ldexp(1.0, -8);
        check["relative_diff_ours_onednn"] = check_typed(
            c, "oneDNN's bf16 result vs ours", dst_dnnl, dst,
            [&](size_t m, size_t n) { return 2 * eps * mag.src_l1[m] * mag.weight_max[n]; }, 1e-2);
      } else {
        // Each against the f32 product. Per element (worst case): a weight is off by at most one quantization
        // step d_w ≤ max|w_n|/127 (half a step from rounding, the rest covers the f16 rounding of our block
        // scale and the clamp at ±127), a src element by at most one step max|src|/127 (ours per row, oneDNN
        // per tensor: the larger), and |a·w - â·ŵ| ≤ |a|·|w - ŵ| + |a - â|·|ŵ|: ≤ (‖a_m‖₁ + K·max|src|·(1 +
        // 1/127))·max|w_n|/127; 5% on top for f32 summation. As a whole: uniform data in [-1, 1], rounding errors
        // uniform within ±step/2: each operand's error is 1/(2·127) ≈ 0.4% of its RMS, together ≈ 0.55% of the
        // product's norm; 3% leaves 5x, a wrongly called peer (scales, zero point, layout) is off by far more.
        auto bound = [&](size_t m, size_t n) {
          return 1.05 * (mag.src_l1[m] + c.K * mag.src_max * (1 + 1.0 / 127)) * mag.weight_max[n] / 127;
        };
        check["relative_diff_ours_f32"] = check_typed(c, "our q8 result vs the f32 product", dst, want, bound, 3e-2);
        check["relative_diff_onednn_f32"] =
            check_typed(c, "oneDNN's int8 result vs the f32 product", dst_dnnl, want, bound, 3e-2);
      }
      timed.push_back({&c, t, s[0], s[1], static_cast<double>(ours.bytes()),
                       static_cast<double>(dnnl.weight_bytes()), dnnl.impl_name(), check});
    }
  }
  remeasure_roofs(isa, args, roofs);
  Table table({"case", "thr", "sqrtdk GFLOP/s", bf16 ? "% bf16 peak" : "% int8 MAC peak", "GB/s", "% read roof",
               "oneDNN GFLOP/s", "x oneDNN", "oneDNN impl"});
  for (const Timed& m : timed) {
    const Case& c = *m.c;
    const double g = gflops(c, m.s_ours), g_dnnl = gflops(c, m.s_dnnl);
    const TypedPeak peak = typed_peak(type, roofs.at(m.t));
    // q8's figure is a MAC rate: M·N·K/s = GFLOP/s / 2, against MACs/s.
    const RoofShare peak_share = share_of_roof(bf16 ? g : g / 2, peak.value, peak.name);
    const double weight_gbs = m.weight_bytes / m.s_ours * 1e-9;
    const bool decode = c.M == 1;
    ReadRoof read_roof;
    const RoofShare bw_share = share_of_read_roof(weight_gbs, m.weight_bytes, roofs.at(m.t), &read_roof);
    table.add({c.name(), std::to_string(m.t), fmt(g), pct_cell(peak_share), decode ? fmt(weight_gbs) : "",
               decode ? pct_cell(bw_share) + " " + memory_level_name(read_roof.level) : "", fmt(g_dnnl),
               fmt(g / g_dnnl, 2), m.impl});
    nlohmann::json r = {{"case", c.group}, {"M", c.M}, {"N", c.N}, {"K", c.K}, {"threads", m.t},
                        {"dtype", ops::weight_type_name(type)}, {"sqrtdk_gflops", g},
                        {"type_peak", peak.name}, {"type_peak_value", peak.value > 0 ? nlohmann::json(peak.value)
                                                                                     : nlohmann::json()},
                        {"pct_type_peak", pct_json(peak_share)}, {"type_peak_note", peak_share.text},
                        {"onednn_gflops", g_dnnl}, {"ratio_onednn", g / g_dnnl},
                        {"onednn_impl", m.impl}, {"onednn_weight_bytes", m.onednn_weight_bytes},
                        {"sqrtdk_weight_bytes", m.weight_bytes}, {"check", m.check}};
    if (!bf16) r["sqrtdk_gmacs"] = g / 2;
    if (decode) {
      r["sqrtdk_weight_gbs"] = weight_gbs;
      r["read_roof"] = memory_level_name(read_roof.level);
      r["pct_read_roof"] = pct_json(bw_share);
      r["read_roof_note"] = bw_share.text;
    }
    out["results"].push_back(r);
  }
  return table.str();
}

// What the table's figures are, per dtype (printed under the table and kept in --json).
std::vector<std::string> typed_notes(ops::WeightType type) {
  if (type == ops::WeightType::bf16)
    return {"ours: f32 src rounded to bf16 inside the timed call; oneDNN: src given in bf16, converted outside "
            "its timed loop (its best case); both bf16 weights, f32 dst",
            "% bf16 peak: GFLOP/s (2*M*N*K) against the vdpbf16ps loop's peak (the FMA peak below avx512_bf16, "
            "whose kernels widen bf16 to f32)",
            "GB/s: our packed bf16 weights read per call (decode), against the read roof of the level they fit in"};
  return {"ours: f32 src quantized per row inside the timed call, int8 weights in blocks of 32 with an f16 scale "
          "each (GGUF Q8_0); oneDNN: u8 src quantized outside its timed loop (one scale, zero point 128: its best "
          "case), s8 weights with one scale per output column (oneDNN 2.6 has no per-K-block scales), f32 dst",
          "checks: ours and oneDNN each against the f32 product of the unquantized weights (they quantize "
          "differently)",
          "% int8 MAC peak: M*N*K/s against the vpdpbusd loop's MAC rate (64 MACs per instruction); none below "
          "avx512_vnni",
          "GB/s: our packed Q8_0 weights (34 bytes per 32) read per call (decode), against the read roof of the "
          "level they fit in"};
}

}  // namespace


// ---- --sweep: the f32 block sizes around the machine's choice ----

// The configurations a sweep times: the choice, then each of kc, mc, nc moved alone (kc over the usual range, mc
// and nc halved and doubled), so the table shows whether the cache model's choice sits at the top of its
// neighbourhood on this machine.
std::vector<ops::gemm_detail::BlockSizes> sweep_configs(const ops::gemm_detail::BlockSizes& chosen) {
  using ops::gemm_detail::BlockSizes;
  std::vector<BlockSizes> out = {chosen};
  auto add = [&](BlockSizes b) {
    b.mc = std::max(b.mr, b.mc / b.mr * b.mr);
    b.nc = std::max(b.nr, b.nc / b.nr * b.nr);
    for (const BlockSizes& o : out)
      if (o.kc == b.kc && o.mc == b.mc && o.nc == b.nc) return;
    out.push_back(b);
  };
  for (size_t kc : {256, 512, 768, 1024, 1536, 2048}) add({chosen.mr, chosen.nr, kc, chosen.mc, chosen.nc});
  for (size_t mc : {chosen.mc / 2, chosen.mc * 2, chosen.mc * 4}) add({chosen.mr, chosen.nr, chosen.kc, mc, chosen.nc});
  for (size_t nc : {chosen.nc / 2, chosen.nc * 2}) add({chosen.mr, chosen.nr, chosen.kc, chosen.mc, nc});
  return out;
}

std::string config_name(const ops::gemm_detail::BlockSizes& b) {
  return "kc " + std::to_string(b.kc) + " mc " + std::to_string(b.mc) + " nc " + std::to_string(b.nc);
}

// Times every configuration on every M > 1 case (interleaved per sample), fills `out` and returns the table: per
// case and thread count, GFLOP/s and the ratio to the choice; then per configuration the geometric mean of those
// ratios over the cases.
std::string run_sweep(Isa isa, const BenchArgs& args, const std::vector<Case>& all_cases, nlohmann::json& out) {
  using ops::gemm_detail::BlockSizes;
  const auto& entry = ops::select_kernel(ops::gemm_detail::gemm_kernels(), isa);
  if (entry.isa == Isa::ref) throw Error("bench-gemm --sweep: the reference kernel has no block sizes to sweep");
  const std::vector<BlockSizes> configs = sweep_configs(entry.kernels.bs);
  std::vector<Case> cases;
  for (const Case& c : all_cases)
    if (c.M > 1) cases.push_back(c);
  std::string table = "| case | thr | block sizes | GFLOP/s | x choice |\n|---|---|---|---|---|\n";
  std::map<std::pair<int, size_t>, std::vector<double>> ratios;  // (threads, config) -> per-case ratios
  for (int threads : args.threads) {
    for (const Case& c : cases) {
      const auto src = random_vector(c.M * c.K, 1), w = random_vector(c.N * c.K, 2);
      std::vector<float> dst(c.M * c.N);
      const PackedWeights packed = PackedWeights::pack(w.data(), c.N, c.K, c.K, isa);
      std::vector<std::function<void()>> fns;
      for (const BlockSizes& b : configs)
        fns.push_back([&, b] {
          ops::gemm_detail::gemm_with_block_sizes(b, src.data(), c.M, c.K, packed, dst.data(), c.N, threads);
        });
      const std::vector<double> secs = interleaved_medians(fns, args.reps);
      for (size_t i = 0; i < configs.size(); ++i) {
        const double ratio = secs[0] / secs[i];
        ratios[{threads, i}].push_back(ratio);
        char row[256];
        std::snprintf(row, sizeof row, "| %s | %d | %s%s | %.1f | %.3f |\n", c.name().c_str(), threads,
                      config_name(configs[i]).c_str(), i == 0 ? " (choice)" : "", gflops(c, secs[i]), ratio);
        table += row;
        out["results"].push_back({{"case", c.name()}, {"M", c.M}, {"N", c.N}, {"K", c.K}, {"threads", threads},
                                  {"kc", configs[i].kc}, {"mc", configs[i].mc}, {"nc", configs[i].nc},
                                  {"choice", i == 0}, {"gflops", gflops(c, secs[i])}, {"x_choice", ratio}});
      }
    }
  }
  table += "\nGeometric mean over the cases of (time of the choice / time of the configuration): above 1 beats the "
           "choice\n| thr | block sizes | geomean x choice | worst | best |\n|---|---|---|---|---|\n";
  for (const auto& [key, r] : ratios) {
    double log_sum = 0;
    for (double x : r) log_sum += std::log(x);
    const double geo = std::exp(log_sum / r.size());
    char row[256];
    std::snprintf(row, sizeof row, "| %d | %s%s | %.3f | %.3f | %.3f |\n", key.first,
                  config_name(configs[key.second]).c_str(), key.second == 0 ? " (choice)" : "", geo,
                  *std::min_element(r.begin(), r.end()), *std::max_element(r.begin(), r.end()));
    table += row;
    out["summary"].push_back({{"threads", key.first}, {"kc", configs[key.second].kc}, {"mc", configs[key.second].mc},
                              {"nc", configs[key.second].nc}, {"choice", key.second == 0}, {"geomean_x_choice", geo}});
  }
  return table;
}

int main(int argc, char** argv) try {
  // Read before anything else: they decide whether this process re-executes itself for OpenBLAS (not run for
  // bf16 or q8).
  bool with_openblas = true;
  std::string coretype = default_openblas_coretype();
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--no-openblas") with_openblas = false;
    if (std::string(argv[i]) == "--dtype" && i + 1 < argc && std::string(argv[i + 1]) != "f32")
      with_openblas = false;
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
      "  --isa ref|avx2|avx512|avx512_vnni|avx512_bf16  our kernels' ISA (default: SQRTDK_ISA or the best)\n"
      "  --dtype f32|bf16|q8    weight type (default f32); bf16/q8 against oneDNN's bf16/int8 matmul, no OpenBLAS\n"
      "  --quick                a few real shapes of each group instead of all\n"
      "  --only SUBSTRING       only cases whose name contains it (e.g. 'decode', '512x3072')\n"
      "  --no-openblas          skip OpenBLAS\n"
      "  --openblas-coretype NAME  OpenBLAS's kernels (default: SkylakeX on AVX-512, Haswell on AVX2; auto = its "
      "own detection)\n"
      "  --onednn-isa NAME      cap oneDNN's ISA: avx512_core, avx512_core_vnni, avx512_core_bf16, "
      "avx512_core_amx, all (default: its best)\n"
      "  --sweep                f32 only: time our GEMM with the machine's block sizes (kc, mc, nc) and with each "
      "moved alone around them, on the M > 1 cases; no peers\n"
      "  --cold                 f32 only: each contender cycles through copies of the weights (together >= 2x the "
      "L3), so every call reads its weights from DRAM, as a forward pass does; src and dst stay warm");
  Isa isa = default_isa();
  std::string only, onednn_isa;
  ops::WeightType dtype = ops::WeightType::f32;
  bool quick = false, sweep = false, cold = false;
  for (size_t i = 0; i < args.rest.size(); ++i) {
    const std::string& a = args.rest[i];
    if (a == "--isa" && i + 1 < args.rest.size()) {
      isa = parse_isa(args.rest[++i]);
      if (!cpu_supports(isa)) throw Error("--isa " + std::string(isa_name(isa)) + ": not supported by this CPU");
    } else if (a == "--dtype" && i + 1 < args.rest.size()) {
      const std::string& name = args.rest[++i];
      if (name == "f32") dtype = ops::WeightType::f32;
      else if (name == "bf16") dtype = ops::WeightType::bf16;
      else if (name == "q8") dtype = ops::WeightType::q8;
      else throw Error("--dtype '" + name + "': expected f32, bf16 or q8");
    } else if (a == "--quick") {
      quick = true;
    } else if (a == "--sweep") {
      sweep = true;
    } else if (a == "--cold") {
      cold = true;
    } else if (a == "--onednn-isa" && i + 1 < args.rest.size()) {
      onednn_isa = args.rest[++i];
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
  if (!onednn_isa.empty()) onednn_set_max_cpu_isa(onednn_isa);  // before oneDNN creates any primitive
  const bool typed = dtype != ops::WeightType::f32;
  if (cold && (typed || sweep))
    throw Error(std::string("--cold: f32 only, without --sweep (") + (typed ? "--dtype " : "--sweep ") + "given)");
  const std::vector<Case> cases = make_cases(args.smoke, quick, typed, only);
  const char* caches = cold ? "cold weights" : "warm caches";
  const std::string timing = "wall-clock median of " + std::to_string(args.reps) + " interleaved samples, " + caches;
  if (sweep) {
    if (typed) throw Error("bench-gemm --sweep: f32 only (the bf16/q8 kernels' block sizes are constants)");
    std::string why;
    const auto& entry = ops::select_kernel(ops::gemm_detail::gemm_kernels(), isa);
    (void)ops::gemm_detail::machine_block_sizes(entry.kernels.bs.mr, entry.kernels.bs.nr, &why);
    nlohmann::json out = {{"machine", machine_json({}, timing, args.threads)},
                          {"isa", isa_name(isa)}, {"kernel", entry.name},
                          {"choice_source", why}, {"reps", args.reps},
                          {"statistic", "median of --reps interleaved samples; a sample (after one untimed call) is "
                                        "the mean of repeated calls lasting >= 5 ms; warm caches"},
                          {"results", nlohmann::json::array()}, {"summary", nlohmann::json::array()}};
    const std::string table = run_sweep(isa, args, cases, out);
    if (args.json) {
      std::printf("%s\n", out.dump(2).c_str());
    } else {
      std::printf("bench-gemm --sweep: %s (%s) on %s; block sizes chosen %s; wall-clock medians of %d interleaved "
                  "samples, warm caches\n%s",
                  isa_name(isa), entry.name, out["machine"]["cpu"].get<std::string>().c_str(), why.c_str(),
                  args.reps, table.c_str());
    }
    return 0;
  }
  std::map<int, MachineRoofs> roofs = measure_roofs(isa, args.threads, args.smoke);
  if (typed) {
    const bool bf16 = dtype == ops::WeightType::bf16;
    const char* kernel = bf16 ? ops::select_kernel(ops::gemm_detail::gemm_bf16_kernels(), isa).name
                              : ops::select_kernel(ops::gemm_detail::gemm_q8_kernels(), isa).name;
    const std::vector<std::string> notes = typed_notes(dtype);
    nlohmann::json out = {
        {"dtype", ops::weight_type_name(dtype)},
        {"isa", isa_name(isa)},
        {"kernel", kernel},
        {"method",
         {{"clock", "wall"},
          {"statistic", "median of --reps samples; a sample (after the other contenders' threads went idle and one "
                        "untimed call) is the mean of repeated calls lasting >= 5 ms"},
          {"order", "interleaved per sample: sqrtdk, oneDNN"},
          {"caches", "warm (same weights every call): decode weight GB/s is set against the read roof of the "
                     "level the weights fit in (L2, L3 or DRAM)"},
          {"reps", args.reps},
          {"onednn", std::string("matmul primitive per shape and thread count, ") +
                         (bf16 ? "bf16 src, bf16 weights" : "u8 src (zero point 128), s8 weights, per-column "
                                                            "output scales") +
                         ", f32 dst; weights reordered (format_tag::any) and src converted outside the timed "
                         "loop; only execute + wait timed"},
          {"onednn_max_isa", onednn_isa.empty() ? std::string("default (its best)") : onednn_isa},
          {"notes", notes}}},
        {"results", nlohmann::json::array()}};
    const std::string table = run_typed(dtype, isa, args, cases, roofs, out);
    out["machine"] = machine_json(roofs, timing, args.threads);  // the roofs as re-measured after the cases
    if (args.json) {
      std::printf("%s\n", out.dump(2).c_str());
    } else {
      std::printf("bench-gemm --dtype %s: isa %s (%s) on %s; wall-clock medians of %d interleaved samples, warm "
                  "caches; roofs measured in this run (decode GB/s against the read roof of the level the weights "
                  "fit in):\n",
                  ops::weight_type_name(dtype), isa_name(isa), kernel,
                  out["machine"]["cpu"].get<std::string>().c_str(), args.reps);
      for (int t : args.threads)
        std::printf("  %d thread(s): FMA peak %.1f, BF16 peak %s GFLOP/s; int8 peak %s GOP/s; read DRAM %.1f, "
                    "L3 %.1f, L2 %.1f GB/s\n",
                    t, roofs.at(t).peak_gflops, peak_cell(roofs.at(t).bf16_peak_gflops).c_str(),
                    peak_cell(roofs.at(t).int8_peak_gops).c_str(), roofs.at(t).dram_gbs, roofs.at(t).l3_gbs,
                    roofs.at(t).l2_gbs);
      std::printf("oneDNN ISA cap: %s\n%s", onednn_isa.empty() ? "none (its best)" : onednn_isa.c_str(),
                  table.c_str());
      for (const std::string& note : notes) std::printf("  * %s\n", note.c_str());
    }
    return 0;
  }

  const char* kernel = ops::select_kernel(ops::gemm_detail::gemm_kernels(), isa).name;
  nlohmann::json out = {
      {"isa", isa_name(isa)},
      {"kernel", kernel},
      {"method",
       {{"clock", "wall"},
        {"statistic", "median of --reps samples; a sample (after the other contenders' threads went idle and one "
                      "untimed call) is the mean of repeated calls lasting >= 5 ms"},
        {"order", "interleaved per sample: sqrtdk, oneDNN, OpenBLAS"},
        {"caches", cold ? "cold weights (--cold: each contender cycles through copies of the weights together at "
                          "least twice the L3, one copy per call; src and dst warm): decode weight GB/s is set "
                          "against the DRAM read roof"
                        : "warm (same weights every call): decode weight GB/s is set against the read roof of the "
                          "level the weights fit in (L2, L3 or DRAM)"},
        {"reps", args.reps},
        {"onednn", "primitive per shape and thread count, weights reordered and memory objects made outside the "
                   "timed loop; only execute + wait timed"},
        {"openblas", with_openblas ? "cblas_sgemv for M = 1, cblas_sgemm otherwise; OPENBLAS_CORETYPE set to the "
                                     "best ISA's kernels, OPENBLAS_L2_SIZE unset, OPENBLAS_THREAD_TIMEOUT "
                                     "20 unless set (idle spinning bounded to 2^20 cycles: bench_gemm.cpp "
                                     "says why)"
                                   : "not run (--no-openblas)"},
        {"openblas_core", with_openblas ? std::string(openblas_get_corename()) : std::string("-")},
        {"openblas_thread_timeout",
         with_openblas && std::getenv("OPENBLAS_THREAD_TIMEOUT") ? std::getenv("OPENBLAS_THREAD_TIMEOUT") : "-"}}},
      {"results", nlohmann::json::array()}};
  struct Timed {
    const Case* c;
    int t;
    double s_ours, s_dnnl, s_blas;
    std::string impl;
  };
  std::vector<Timed> timed;
  // --cold: the bytes of weight copies each contender cycles through (twice the L3, at least 96 MiB: the same
  // bound as interleaved_medians_cold's eviction buffer); --smoke: two copies, the mechanism only.
  const size_t cold_bytes = args.smoke ? 0 : std::max(size_t{96} << 20, 2 * roofs::detect_cache_sizes().l3);
  auto copies_of = [&](const Case& c) {  // the weight copies a contender cycles through: 1 when warm
    const size_t bytes = sizeof(float) * c.N * c.K;
    return cold ? std::max<size_t>(2, (cold_bytes + bytes - 1) / bytes) : size_t{1};
  };
  for (const Case& c : cases) {
    const auto src = random_vector(c.M * c.K, 1);
    const size_t copies = copies_of(c);
    // The raw weights (OpenBLAS reads them as they are); with --cold, `copies` of them back to back.
    std::vector<float> w = random_vector(c.N * c.K, 2);
    w.resize(copies * c.N * c.K);
    auto raw = [&](size_t i) { return w.data() + i * c.N * c.K; };
    for (size_t i = 1; i < copies; ++i) std::copy_n(raw(0), c.N * c.K, raw(i));  // disjoint ranges
    // One output per contestant, so none finds another's output in its cache.
    std::vector<float> dst(c.M * c.N), dst_dnnl(c.M * c.N), dst_blas(c.M * c.N);
    std::vector<PackedWeights> ours;
    for (size_t i = 0; i < copies; ++i) ours.push_back(PackedWeights::pack(raw(i), c.N, c.K, c.K, isa));
    const int M = static_cast<int>(c.M), N = static_cast<int>(c.N), K = static_cast<int>(c.K);
    for (int t : args.threads) {
      // oneDNN and OpenBLAS take their thread counts from state (the OpenMP ICV, OpenBLAS's own): set for this
      // block, restored on every exit. Ours takes t as an argument.
      const ScopedOmpThreads omp_threads(t);
      if (with_openblas) openblas_set_num_threads(t);
      std::vector<OnednnMatmul> dnnl;  // one primitive per copy, each with its own reordered weights
      for (size_t i = 0; i < copies; ++i) {
        dnnl.emplace_back(raw(i), c.N, c.K, c.K, c.M, c.K, c.N, ops::GemmEpilogue{}, nullptr, t);
        dnnl.back().bind(src.data(), dst_dnnl.data());
      }
      // Each contender's next copy (always 0 when warm).
      size_t next_ours = 0, next_dnnl = 0, next_blas = 0;
      auto advance = [copies](size_t& i) { return std::exchange(i, (i + 1) % copies); };
      std::vector<std::function<void()>> fns = {
          [&] { ops::gemm(src.data(), c.M, c.K, ours[advance(next_ours)], dst.data(), c.N, {}, t); },
          [&] { dnnl[advance(next_dnnl)].execute(); }};
      if (with_openblas)
        fns.push_back([&] {
          const float* wi = raw(advance(next_blas));
          if (c.M == 1)
            cblas_sgemv(CblasRowMajor, CblasNoTrans, N, K, 1.0f, wi, K, src.data(), 1, 0.0f, dst_blas.data(), 1);
          else
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, src.data(), K, wi, K, 0.0f,
                        dst_blas.data(), N);
        });
      const std::vector<double> s = interleaved_medians(fns, args.reps);
      // The three computed the same product (a peer called wrongly would be timed doing something else).
      check_agree(c, "oneDNN", dst, dst_dnnl);
      if (with_openblas) check_agree(c, "OpenBLAS", dst, dst_blas);
      timed.push_back({&c, t, s[0], s[1], with_openblas ? s[2] : 0.0, dnnl.front().impl_name()});
    }
  }
  remeasure_roofs(isa, args, roofs);
  out["machine"] = machine_json(roofs, timing, args.threads);  // the roofs as re-measured after the cases
  Table table({"case", "thr", "sqrtdk GFLOP/s", "% peak", "GB/s", "% read roof", "oneDNN GFLOP/s", "x oneDNN",
               "OpenBLAS GFLOP/s", "x OpenBLAS"});
  for (const Timed& m : timed) {
    const Case& c = *m.c;
    const double g = gflops(c, m.s_ours), g_dnnl = gflops(c, m.s_dnnl);
    const double g_blas = m.s_blas > 0 ? gflops(c, m.s_blas) : 0;
    const double weight_gbs = 4.0 * c.N * c.K / m.s_ours * 1e-9;
    const bool decode = c.M == 1;
    // Warm weights: the roof is the level they fit in (an L3-resident shape is never set against DRAM); cold: the
    // level all the copies fit in, DRAM.
    ReadRoof read_roof;
    const RoofShare bw_share =
        share_of_read_roof(weight_gbs, 4.0 * c.N * c.K * static_cast<double>(copies_of(c)), roofs.at(m.t), &read_roof);
    const RoofShare peak_share = share_of_roof(g, roofs.at(m.t).peak_gflops, "FMA peak");
    table.add({c.name(), std::to_string(m.t), fmt(g), pct_cell(peak_share), decode ? fmt(weight_gbs) : "",
               decode ? pct_cell(bw_share) + " " + memory_level_name(read_roof.level) : "",
               fmt(g_dnnl), fmt(g / g_dnnl, 2), m.s_blas > 0 ? fmt(g_blas) : "-",
               m.s_blas > 0 ? fmt(g / g_blas, 2) : "-"});
    nlohmann::json r = {{"case", c.group}, {"M", c.M}, {"N", c.N}, {"K", c.K}, {"threads", m.t},
                        {"sqrtdk_gflops", g}, {"pct_peak", pct_json(peak_share)}, {"onednn_gflops", g_dnnl},
                        {"ratio_onednn", g / g_dnnl}, {"onednn_impl", m.impl}};
    if (decode) {
      r["sqrtdk_weight_gbs"] = weight_gbs;
      r["read_roof"] = memory_level_name(read_roof.level);
      r["pct_read_roof"] = pct_json(bw_share);
      r["read_roof_note"] = bw_share.text;
    }
    if (m.s_blas > 0) {
      r["openblas_gflops"] = g_blas;
      r["ratio_openblas"] = g / g_blas;
      r["openblas_call"] = decode ? "cblas_sgemv" : "cblas_sgemm";
    }
    out["results"].push_back(r);
  }
  if (args.json) {
    std::printf("%s\n", out.dump(2).c_str());
  } else {
    std::printf("bench-gemm: isa %s (%s) on %s; wall-clock medians of %d interleaved samples, %s; roofs measured "
                "before and after the cases, the higher of each kept (decode GB/s against the read roof of the "
                "level the weights %s):\n",
                isa_name(isa), kernel, out["machine"]["cpu"].get<std::string>().c_str(), args.reps,
                cold ? "cold weights (each call reads another copy: >= 2x the L3 in all, from DRAM)" : "warm caches",
                cold ? "come from: DRAM" : "fit in");
    for (int t : args.threads)
      std::printf("  %d thread(s): FMA peak %.1f GFLOP/s; read DRAM %.1f, L3 %.1f, L2 %.1f GB/s\n", t,
                  roofs.at(t).peak_gflops, roofs.at(t).dram_gbs, roofs.at(t).l3_gbs, roofs.at(t).l2_gbs);
    if (with_openblas)
      std::printf("OpenBLAS core: %s; OPENBLAS_THREAD_TIMEOUT %s (2^n cycles of idle spinning)\n",
                  openblas_get_corename(), std::getenv("OPENBLAS_THREAD_TIMEOUT"));
    std::printf("%s", table.str().c_str());
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench-gemm: %s\n", e.what());
  return 1;
}
