// bench-softmax: row-wise softmax throughput in G elements/s per core, for row lengths 64 .. 32 768 with the data
// L1-, L2- or DRAM-resident; ours per SIMD kernel of softmax_kernels() vs a scalar std::exp softmax vs oneDNN's
// softmax primitive, same run.
// Out of place (src and dst distinct), scale 1, no mask. --exp-ulp: the max ulp error of exp_rr2_p5 over every
// float (about 1 minute with 2 threads), plus its throughput.
#include "ops/softmax/softmax.h"
#include "ops/softmax/softmax_kernels.h"
#include "perf/common/bench_util.h"

#include "ops/base/roofs.h"

#include "ops/base/aligned_buffer.h"

#include <dnnl.hpp>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>

using namespace sqrtdk;
using namespace sqrtdk::perf;

namespace {

// The scalar peer: max, std::exp, sum, normalize (float, one row at a time).
void softmax_scalar(size_t n_rows, size_t n_cols, const float* src, float* dst, int threads) {
#pragma omp parallel for num_threads(threads) schedule(static)
  for (size_t r = 0; r < n_rows; ++r) {
    const float* x = src + r * n_cols;
    float* y = dst + r * n_cols;
    float m = x[0];
    for (size_t j = 1; j < n_cols; ++j) m = std::max(m, x[j]);
    float s = 0.0f;
    for (size_t j = 0; j < n_cols; ++j) s += (y[j] = std::exp(x[j] - m));
    const float inv = 1.0f / s;
    for (size_t j = 0; j < n_cols; ++j) y[j] *= inv;
  }
}

struct OnednnSoftmax {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  dnnl::softmax_forward prim;
  dnnl::memory src, dst;
  OnednnSoftmax(size_t n_rows, size_t n_cols, float* s, float* d) {
    const dnnl::memory::desc md({dnnl::memory::dim(n_rows), dnnl::memory::dim(n_cols)}, dnnl::memory::data_type::f32,
                                dnnl::memory::format_tag::ab);
    dnnl::softmax_forward::desc desc(dnnl::prop_kind::forward_inference, md, 1);
    prim = dnnl::softmax_forward(dnnl::softmax_forward::primitive_desc(desc, engine));
    src = dnnl::memory(md, engine, s);
    dst = dnnl::memory(md, engine, d);
  }
  void run(int threads) {
    const int saved = omp_get_max_threads();
    omp_set_num_threads(threads);
    prim.execute(stream, {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, dst}});
    stream.wait();
    omp_set_num_threads(saved);
  }
};

float from_bits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

// Max ulp error of exp_rr2_p5 (isa) over every float, against double std::exp.
void exp_ulp_sweep(Isa isa, int threads, nlohmann::json& out) {
  double worst = 0.0;
  float worst_x = 0.0f;
  const double t0 = now_seconds();
#pragma omp parallel num_threads(threads)
  {
    double my_worst = 0.0;
    float my_x = 0.0f;
    std::vector<float> x(1 << 16), y(1 << 16);
#pragma omp for schedule(dynamic, 1)
    for (int64_t block = 0; block < (int64_t{1} << 16); ++block) {
      for (uint32_t i = 0; i < (1u << 16); ++i) x[i] = from_bits(uint32_t(block) << 16 | i);
      ops::exp_rr2_p5(isa, x.data(), y.data(), x.size());
      for (size_t i = 0; i < x.size(); ++i) {
        if (std::isnan(x[i])) {
          if (!std::isnan(y[i])) my_worst = 1e9, my_x = x[i];
          continue;
        }
        const double e = std::exp(double(x[i]));
        double err;
        if (e > std::numeric_limits<float>::max()) {
          err = std::isinf(y[i]) ? 0.0 : 1e9;
        } else {
          int e2 = 0;
          std::frexp(e, &e2);
          err = std::fabs(double(y[i]) - e) / std::ldexp(1.0, std::max(e2 - 24, -149));
        }
        if (err > my_worst) my_worst = err, my_x = x[i];
      }
    }
#pragma omp critical
    if (my_worst > worst) worst = my_worst, worst_x = my_x;
  }
  std::fprintf(stderr, "exp_rr2_p5 %s: max error %.3f ulp at x = %.9g over all 2^32 floats (%.0f s)\n", isa_name(isa), worst,
              double(worst_x), now_seconds() - t0);
  out.push_back({{"isa", isa_name(isa)}, {"max_ulp", worst}, {"at_x", worst_x}});
}

}  // namespace

int main(int argc, char** argv) {
  BenchArgs args = BenchArgs::parse(argc, argv,
                                    "bench-softmax: softmax G elements/s per core, ours per ISA vs scalar std::exp vs "
                                    "oneDNN\n  --exp-ulp  also sweep exp_rr2_p5 over every float (max ulp error)");
  const bool exp_ulp = std::find(args.rest.begin(), args.rest.end(), "--exp-ulp") != args.rest.end();
  nlohmann::json out = {{"machine", machine_json({}, "wall-clock median of " + std::to_string(args.reps) +
                                                        " samples (each the mean of calls lasting >= 20 ms), warm "
                                                        "caches; residencies sized from the detected caches",
                                                    args.threads)},
                        {"results", nlohmann::json::array()}};
  out["note"] = "G elements/s per core = n_rows*n_cols / seconds / threads; out of place; median of reps";

  // Footprint (src + dst) per residency, from this machine's caches (sysfs, else CPUID): 2/3 of the L1d, half the
  // L2, and the DRAM read probe's size (twice the L3, at least 256 MiB); the fixed 32 KiB / 512 KiB / 256 MiB when
  // both are silent (256 MiB sat inside this VM's 300 MiB L3).
  struct Residency {
    const char* name;
    size_t bytes;
  };
  const roofs::CacheSizes caches = roofs::detect_cache_sizes();
  const Residency residencies[] = {{"L1", caches.l1d ? caches.l1d * 2 / 3 : size_t{32} << 10},
                                   {"L2", caches.l2 ? caches.l2 / 2 : size_t{512} << 10},
                                   {"DRAM", roofs::dram_probe_bytes(caches)}};
  std::vector<size_t> lengths = {64, 256, 1024, 4096, 32768};
  if (args.smoke) lengths = {64, 1024};

  const size_t max_floats = (args.smoke ? size_t{4} << 20 : residencies[2].bytes) / 8;
  AlignedBuffer<float> src(max_floats), dst(max_floats);
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0.0f, 3.0f);
  for (size_t i = 0; i < max_floats; ++i) src[i] = dist(rng);
  dst.zero();

  // Our SIMD kernels, best first (the best is the one quoted against the peers); the reference entry is timed only
  // in the exp table (the scalar column is the plain softmax peer).
  std::vector<KernelCase> simd;
  for (const KernelCase& k : kernel_cases(ops::softmax_kernels()))
    if (k.isa != Isa::ref) simd.insert(simd.begin(), k);
  std::vector<std::string> header = {"threads", "residency", "n_cols", "n_rows"};
  for (const KernelCase& k : simd) header.push_back(k.name);
  for (const char* h : {"scalar", "oneDNN", "best/oneDNN", "best/scalar"}) header.push_back(h);
  Table table(header);
  for (int t : args.threads) {
    for (const Residency& res : residencies) {
      for (size_t n_cols : lengths) {
        const size_t bytes = args.smoke ? std::min<size_t>(res.bytes, size_t{4} << 20) : res.bytes;
        const size_t n_rows = bytes / 8 / n_cols;
        if (n_rows < size_t(t)) continue;  // a row does not fit this residency level
        const double elems = double(n_rows) * double(n_cols);
        auto geps = [&](double s) { return elems / s / 1e9 / t; };
        const double min_s = args.smoke ? 0.0 : 0.02;
        nlohmann::json row = {{"threads", t}, {"residency", res.name}, {"n_cols", n_cols}, {"n_rows", n_rows}};
        std::vector<std::string> cells = {std::to_string(t), res.name, std::to_string(n_cols), std::to_string(n_rows)};
        double best = 0;
        for (const KernelCase& k : simd) {
          const double s = median_seconds(
              [&] { ops::softmax_rows(k.isa, n_rows, n_cols, src.data(), n_cols, dst.data(), n_cols, 1.0f, {}, t); },
              args.reps, min_s);
          if (best == 0) best = geps(s);
          row[std::string("ours_") + isa_name(k.isa) + "_geps"] = geps(s);
          cells.push_back(fmt(geps(s), 2));
        }
        const double s_scalar =
            median_seconds([&] { softmax_scalar(n_rows, n_cols, src.data(), dst.data(), t); }, args.reps, min_s);
        // oneDNN sizes its parallel split when the primitive is created: create it under the thread count it runs with.
        const int saved_threads = omp_get_max_threads();
        omp_set_num_threads(t);
        OnednnSoftmax dnnl_sm(n_rows, n_cols, src.data(), dst.data());
        omp_set_num_threads(saved_threads);
        const double s_dnnl = median_seconds([&] { dnnl_sm.run(t); }, args.reps, min_s);
        row["scalar_geps"] = geps(s_scalar);
        row["onednn_geps"] = geps(s_dnnl);
        row["ratio_onednn"] = best / geps(s_dnnl);
        row["ratio_scalar"] = best / geps(s_scalar);
        out["results"].push_back(row);
        for (const std::string& cell : {fmt(geps(s_scalar), 2), fmt(geps(s_dnnl), 2), fmt(best / geps(s_dnnl), 2),
                                        fmt(best / geps(s_scalar), 1)})
          cells.push_back(cell);
        table.add(cells);
      }
    }
  }
  // exp alone (L1-resident array of 4096), G/s per core.
  Table exp_table({"threads", "kernel", "exp G/s per core"});
  out["exp"] = nlohmann::json::array();
  for (int t : args.threads) {
    for (const KernelCase& k : kernel_cases(ops::softmax_kernels())) {
      const Isa isa = k.isa;
      const size_t n = 4096;
      const double s = median_seconds(
          [&] {
#pragma omp parallel num_threads(t)
            {
              const size_t off = size_t(omp_get_thread_num()) * n;
              for (int k = 0; k < 16; ++k) ops::exp_rr2_p5(isa, src.data() + off, dst.data() + off, n);
            }
          },
          args.reps, args.smoke ? 0.0 : 0.02);
      const double g = 16.0 * n / s / 1e9;
      exp_table.add({std::to_string(t), k.name, fmt(g, 2)});
      out["exp"].push_back({{"threads", t}, {"isa", isa_name(isa)}, {"kernel", k.name}, {"gps_per_core", g}});
    }
  }
  out["exp_ulp"] = nlohmann::json::array();
  if (exp_ulp)
    for (const KernelCase& k : simd) exp_ulp_sweep(k.isa, args.threads.back(), out["exp_ulp"]);
  if (args.json) {
    std::printf("%s\n", out.dump(2).c_str());
  } else {
    std::printf("%s\n%s", table.str().c_str(), exp_table.str().c_str());
    std::printf("(G elements/s per core; the machine is a shared 2-core VM: expect 5-20%% noise)\n");
  }
  return 0;
}
