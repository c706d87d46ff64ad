// bench-machine: the machine's roofs, measured: FP32 FMA peak per ISA at each thread count, and the read bandwidth
// from L2, L3 and DRAM (probes sized from the detected caches). Every other benchmark measures these again in its
// own run; this one prints them alone.
#include "perf/common/bench_util.h"

#include "ops/base/roofs.h"

#include <cstdio>
#include <map>

using namespace sqrtdk;
using namespace sqrtdk::perf;

int main(int argc, char** argv) {
  BenchArgs args = BenchArgs::parse(argc, argv, "bench-machine: measured FMA peak (GFLOP/s) and L2, L3, DRAM read GB/s");
  const roofs::CacheSizes caches = roofs::detect_cache_sizes();
  Table table({"threads", "isa", "FMA peak GFLOP/s", "L2 read GB/s", "L3 read GB/s", "DRAM read GB/s"});
  std::map<int, MachineRoofs> best_isa_roofs;
  nlohmann::json results = nlohmann::json::array();
  for (int t : args.threads) {
    for (const KernelCase& k : kernel_cases(roofs::roof_kernels())) {  // every roof loop this CPU runs
      // The read probes always run the best ISA's loop: measured once per thread count, with the best ISA's peak.
      const MachineRoofs r = measure_machine_roofs(k.isa, t, args.smoke);
      if (k.isa == best_isa()) best_isa_roofs[t] = r;
      table.add({std::to_string(t), isa_name(k.isa), fmt(r.peak_gflops), fmt(r.l2_gbs), fmt(r.l3_gbs),
                 fmt(r.dram_gbs)});
      results.push_back({{"threads", t}, {"isa", isa_name(k.isa)}, {"fma_peak_gflops", r.peak_gflops},
                         {"l2_read_gbs", r.l2_gbs}, {"l3_read_gbs", r.l3_gbs}, {"dram_read_gbs", r.dram_gbs}});
    }
  }
  const nlohmann::json probes = {{"l2_bytes", roofs::l2_probe_bytes(caches, 1)},
                                 {"l3_bytes", roofs::l3_probe_bytes(caches, 1)},
                                 {"dram_bytes", roofs::dram_probe_bytes(caches)},
                                 {"note", "L2 and L3 probe sizes at 1 thread; L2 scales with the threads, L3 too up "
                                          "to half the L3"}};
  nlohmann::json out = {{"machine", machine_json(best_isa_roofs, "best of 5 runs (FMA), 3 (DRAM read) and 15 (L2, L3 read): a "
                                                                 "roof is what the hardware can do, noise only "
                                                                 "lowers it", args.threads)},
                        {"read_probe_bytes", probes}, {"results", results}};
  if (args.json) {
    std::printf("%s\n", out.dump(2).c_str());
  } else {
    std::printf("caches (sysfs, cpu0): L1d %zu KiB, L2 %zu KiB per core, L3 %zu MiB\n", caches.l1d >> 10,
                caches.l2 >> 10, caches.l3 >> 20);
    std::printf("%s", table.str().c_str());
  }
  return 0;
}
