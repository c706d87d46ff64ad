// bench-machine: the machine's roofs, measured: FP32 FMA peak per ISA at each thread count, and DRAM read
// bandwidth. Every other benchmark measures these again in its own run; this one prints them alone.
#include "perf/common/bench_util.h"

#include "ops/base/roofs.h"

#include <cstdio>

using namespace sqrtdk;
using namespace sqrtdk::perf;

int main(int argc, char** argv) {
  BenchArgs args = BenchArgs::parse(argc, argv, "bench-machine: measured FMA peak (GFLOP/s) and DRAM read GB/s");
  nlohmann::json out = {{"machine", machine_json()}, {"results", nlohmann::json::array()}};
  Table table({"threads", "isa", "FMA peak GFLOP/s", "DRAM read GB/s"});
  for (int t : args.threads) {
    const double bw = measure_read_bandwidth_gbs(t, args.smoke);
    for (const KernelCase& k : kernel_cases(roofs::roof_kernels())) {  // every roof loop this CPU runs
      const double peak = measure_fma_peak_gflops(k.isa, t, args.smoke);
      table.add({std::to_string(t), isa_name(k.isa), fmt(peak), fmt(bw)});
      out["results"].push_back({{"threads", t}, {"isa", isa_name(k.isa)}, {"fma_peak_gflops", peak},
                                {"dram_read_gbs", bw}});
    }
  }
  if (args.json)
    std::printf("%s\n", out.dump(2).c_str());
  else
    std::printf("%s", table.str().c_str());
  return 0;
}
