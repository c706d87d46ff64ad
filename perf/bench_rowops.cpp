// bench-rowops: the row and elementwise ops around the GEMMs (layer_norm, rms_norm, gelu_tanh, silu, swiglu, add,
// rope) in GB/s of data touched (reads + writes), each against the roof of its own mix of reads and writes
// (roofs::Access: one read and one write, two reads and one write, or in place) over a working set of its own size,
// measured in the same run: a read roof is not the roof of an op that writes, and a level's probe is not the roof
// of a working set just over that level (part of it still hits the cache). The level column says where the
// working set fits.
//
// Shapes: decode (1 row of 768: latency-bound, L1), short (128 x 768, a short prompt: 384 KiB per array, just
// over the row ops' one-thread threshold, kRowOpOneThreadBelow = 64 Ki floats: 6 items to split), prefill
// (512 x 768, 1.5 MiB per array: L2/L3) and stream (16384 x 768, 48 MiB per array: past most L3s). These ops have no FLOP
// roof worth quoting; the bandwidth is the roof. The peer is the scalar ref path of the same op (speedup column).
// Each op runs every entry of its kernel table this CPU supports (ops/<op>/<op>_kernels.h), reference first.
#include "perf/common/bench_util.h"

#include "ops/base/aligned_buffer.h"
#include "ops/activation/activation.h"
#include "ops/activation/activation_kernels.h"
#include "ops/norm/norm.h"
#include "ops/norm/norm_kernels.h"
#include "ops/rope/rope.h"
#include "ops/rope/rope_kernels.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>
#include <random>
#include <string>

using namespace sqrtdk;
using namespace sqrtdk::perf;

namespace {

struct Shape {
  const char* name;
  size_t n_rows, d;
};

void fill(AlignedBuffer<float>& buf, uint32_t seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  for (size_t i = 0; i < buf.size(); ++i) buf.data()[i] = dist(rng);
}

}  // namespace

int main(int argc, char** argv) {
  BenchArgs args = BenchArgs::parse(argc, argv, "bench-rowops: norms, activations, residual add and RoPE in GB/s");
  std::vector<Shape> shapes = {{"decode", 1, 768}, {"short", 128, 768}, {"prefill", 512, 768}, {"stream", 16384, 768}};
  if (args.smoke) shapes = {{"decode", 1, 768}, {"prefill", 64, 768}};

  const std::map<int, MachineRoofs> roofs = measure_roofs(default_isa(), args.threads, args.smoke);
  nlohmann::json machine = machine_json(roofs, "wall-clock median of " + std::to_string(args.reps) +
                                                   " runs, warm caches (each op's GB/s set against the best-of roof "
                                                   "of its access pattern over a working set of the same size)",
                                        args.threads);
  nlohmann::json out = {{"machine", machine}, {"results", nlohmann::json::array()}};
  Table table({"op", "shape", "threads", "kernel", "us", "GB/s", "roof GB/s", "% roof (fits in, access)", "x ref"});
  const size_t max_elems = shapes.back().n_rows * shapes.back().d;
  AlignedBuffer<float> a(max_elems), b(max_elems), c(max_elems), weight(4096), bias(4096);
  fill(a, 1, -4.0f, 4.0f);
  fill(b, 2, -4.0f, 4.0f);
  fill(c, 3, -4.0f, 4.0f);
  fill(weight, 4, 0.5f, 1.5f);
  fill(bias, 5, -0.5f, 0.5f);
  const size_t head_dim = 64;
  const ops::RopeTable rope_table(16384, head_dim, 10000.0f);

  for (int threads : args.threads) {
    for (const Shape& s : shapes) {
      const size_t n = s.n_rows * s.d;
      const double array_bytes = static_cast<double>(n) * sizeof(float);
      const std::vector<KernelCase> norm_cases = kernel_cases(ops::norm_kernels());
      const std::vector<KernelCase> activation_cases = kernel_cases(ops::activation_kernels());
      const std::vector<KernelCase> rope_cases = kernel_cases(ops::rope_kernels());
      // op name -> (its access pattern, bytes touched per call: reads + writes, the call for an ISA)
      using roofs::Access;
      struct Op {
        const char* name;
        Access access;
        double bytes;
        const std::vector<KernelCase>& kernels;  // its op's table
        std::function<void(Isa)> run;
      };
      const std::vector<Op> ops_list = {
          {"layer_norm", Access::read_write, 2 * array_bytes, norm_cases,
           [&](Isa isa) {
             ops::layer_norm(isa, a.data(), s.n_rows, s.d, s.d, weight.data(), bias.data(), 1e-5f, c.data(), s.d,
                             threads);
           }},
          {"rms_norm", Access::read_write, 2 * array_bytes, norm_cases,
           [&](Isa isa) {
             ops::rms_norm(isa, a.data(), s.n_rows, s.d, s.d, weight.data(), 1e-5f, c.data(), s.d, threads);
           }},
          // Out of place from fixed inputs: repeated in-place gelu/silu would shrink values into subnormals
          // (gelu(x) ~ x/2 near 0), whose microcode assists would be timed instead of the kernel.
          {"gelu_tanh", Access::read_write, 2 * array_bytes, activation_cases,
           [&](Isa isa) { ops::gelu_tanh(isa, a.data(), c.data(), n, threads); }},
          {"silu", Access::read_write, 2 * array_bytes, activation_cases,
           [&](Isa isa) { ops::silu(isa, a.data(), c.data(), n, threads); }},
          {"swiglu", Access::read2_write, 3 * array_bytes, activation_cases,
           [&](Isa isa) { ops::swiglu(isa, a.data(), b.data(), c.data(), n, threads); }},
          {"add", Access::read2_write, 3 * array_bytes, activation_cases,
           [&](Isa isa) { ops::add(isa, a.data(), b.data(), c.data(), n, threads); }},
          // Rows of 12 heads x 64 (d = 768), rotate-half, positions 0..n_rows-1.
          {"rope", Access::read_write_in_place, 2 * array_bytes, rope_cases,
           [&](Isa isa) {
             ops::rope(isa, rope_table, ops::RopeLayout::rotate_half, c.data(), s.n_rows, s.d, s.d / head_dim,
                       head_dim, 0, threads);
           }},
      };
      for (const Op& op : ops_list) {
        // The roof is measured just before the op's kernels and again just after, the higher kept: DRAM
        // bandwidth on a shared host drifts over seconds, and a roof taken elsewhere in the run could sit below
        // the op (or far above it) for that reason alone.
        const double working_set = array_bytes * roofs::access_arrays(op.access);
        const double roof_before = measure_access_roof_at(op.access, threads, working_set, args.smoke);
        std::map<Isa, double> seconds;
        for (const KernelCase& kernel : op.kernels) {
          fill(c, 3, -4.0f, 4.0f);  // rope (in place, a rotation: magnitudes stay) starts from the same data
          seconds[kernel.isa] = median_seconds([&] { op.run(kernel.isa); }, args.reps);
        }
        const double roof_gbs =
            std::max(roof_before, measure_access_roof_at(op.access, threads, working_set, args.smoke));
        // Warm caches: the arrays (all of them: the working set) come from where they fit, and the same pattern
        // over the same bytes by the simplest loop bounds the op.
        const MemoryLevel level = read_roof_for(roofs.at(threads), working_set).level;
        for (const KernelCase& kernel : op.kernels) {
          const Isa isa = kernel.isa;
          const double gbs = op.bytes / seconds[isa] / 1e9;
          const double vs_ref = seconds[Isa::ref] / seconds[isa];
          const RoofShare share = share_of_roof(gbs, roof_gbs, std::string(roofs::access_name(op.access)) + " over " +
                                                                   fmt(working_set / 1048576.0, 2) + " MiB");
          table.add({op.name, std::string(s.name) + " " + std::to_string(s.n_rows) + "x" + std::to_string(s.d),
                     std::to_string(threads), kernel.name, fmt(seconds[isa] * 1e6, 2), fmt(gbs), fmt(roof_gbs),
                     pct_cell(share) + " " + memory_level_name(level) + " " + roofs::access_name(op.access),
                     fmt(vs_ref, 1)});
          out["results"].push_back({{"op", op.name}, {"shape", s.name}, {"n_rows", s.n_rows}, {"d", s.d},
                                    {"threads", threads}, {"isa", isa_name(isa)}, {"kernel", kernel.name},
                                    {"seconds", seconds[isa]}, {"gb_per_s", gbs},
                                    {"access", roofs::access_name(op.access)}, {"working_set_bytes", working_set},
                                    {"fits_in", memory_level_name(level)}, {"roof_gbs", roof_gbs},
                                    {"pct_of_roof", pct_json(share)}, {"roof_note", share.text},
                                    {"speedup_vs_ref", vs_ref}});
        }
      }
    }
  }
  if (args.json)
    std::printf("%s\n", out.dump(2).c_str());
  else
    std::printf("%s", table.str().c_str());
  return 0;
}
