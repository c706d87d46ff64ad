// bench-machine: the machine's roofs, measured: FP32 FMA peak per ISA at each thread count, the BF16 (vdpbf16ps)
// and int8 (vpdpbusd) dot-product peaks where the CPU has AVX512-BF16 / AVX512-VNNI, and the read bandwidth from
// L2, L3 and DRAM (probes sized from the detected caches; an L3 the machine does not report is found by reading),
// and at the best ISA the same levels' bandwidth of the row ops' patterns that write (reads + writes counted).
// Every other benchmark measures these again in its own run; this one prints them alone.
#include "perf/common/bench_util.h"

#include "ops/base/roofs.h"

#include <cstdio>
#include <map>
#include <string>
#include <vector>

using namespace sqrtdk;
using namespace sqrtdk::perf;

namespace {
nlohmann::json absent_as_null(double peak) { return peak > 0 ? nlohmann::json(peak) : nlohmann::json(); }
// An L3 rate of 0: not measured (--smoke skips finding an L3 no one reports) or no L3 found; a "0.0" would read
// as a measurement.
std::string l3_cell(double gbs) { return gbs > 0 ? fmt(gbs) : "none"; }
}  // namespace

int main(int argc, char** argv) {
  BenchArgs args = BenchArgs::parse(argc, argv,
                                    "bench-machine: measured FMA peak (GFLOP/s), BF16 and int8 dot-product peaks "
                                    "(GFLOP/s, GOP/s) and L2, L3, DRAM read GB/s");
  const roofs::CacheSizes caches = roofs::detect_cache_sizes();
  Table table({"threads", "isa", "FMA peak GFLOP/s", "BF16 peak GFLOP/s", "int8 peak GOP/s", "L2 read GB/s",
               "L3 read GB/s", "DRAM read GB/s"});
  std::map<int, MachineRoofs> best_isa_roofs;
  nlohmann::json results = nlohmann::json::array();
  const std::vector<KernelCase> loops = kernel_cases(roofs::roof_kernels());  // every roof loop this CPU runs
  for (int t : args.threads) {
    for (const KernelCase& k : loops) {  // reference first, the best last
      // The best loop is measured at the best ISA level, which adds the dot-product peaks of the levels above
      // its own (avx512_vnni and avx512_bf16 have no FMA loops of their own). The read probes always run the best
      // ISA's loop: measured once per thread count, with the best ISA's peak.
      const Isa isa = &k == &loops.back() ? best_isa() : k.isa;
      const MachineRoofs r = measure_machine_roofs(isa, t, args.smoke);
      if (isa == best_isa()) best_isa_roofs[t] = r;
      table.add({std::to_string(t), isa_name(isa), fmt(r.peak_gflops), peak_cell(r.bf16_peak_gflops),
                 peak_cell(r.int8_peak_gops), fmt(r.l2_gbs), l3_cell(r.l3_gbs), fmt(r.dram_gbs)});
      results.push_back({{"threads", t}, {"isa", isa_name(isa)}, {"fma_peak_gflops", r.peak_gflops},
                         {"bf16_peak_gflops", absent_as_null(r.bf16_peak_gflops)},
                         {"int8_peak_gops", absent_as_null(r.int8_peak_gops)}, {"l2_read_gbs", r.l2_gbs},
                         {"l3_read_gbs", r.l3_gbs}, {"dram_read_gbs", r.dram_gbs}});
    }
  }
  const std::map<int, AccessRoofs> access_roofs = measure_access_roofs(best_isa_roofs, args.smoke);
  Table access_table({"threads", "access", "arrays", "L2 GB/s", "L3 GB/s", "DRAM GB/s"});
  for (const auto& [t, a] : access_roofs)
    for (const roofs::Access access : roofs::kAccesses)
      access_table.add({std::to_string(t), roofs::access_name(access), std::to_string(roofs::access_arrays(access)),
                        fmt(a.at(access, MemoryLevel::l2)), l3_cell(a.at(access, MemoryLevel::l3)),
                        fmt(a.at(access, MemoryLevel::dram))});
  // The DRAM read roof is the best of these stream counts (roofs::measure_dram_read_gbs); each alone, best of 3,
  // so a new machine shows which pattern its roof came from.
  Table streams_table({"threads", "streams per thread", "DRAM read GB/s"});
  nlohmann::json streams_json = nlohmann::json::array();
  const size_t dram_bytes = args.smoke ? size_t{64} << 20 : roofs::dram_probe_bytes(caches);
  for (int t : args.threads)
    for (const int streams : roofs::kDramReadStreams) {
      const double gbs = roofs::measure_read_streams_gbs(t, dram_bytes, args.smoke ? 1 : 3, streams);
      streams_table.add({std::to_string(t), std::to_string(streams), fmt(gbs)});
      streams_json.push_back({{"threads", t}, {"streams_per_thread", streams}, {"dram_read_gbs", gbs}});
    }
  const nlohmann::json probes = {{"l2_bytes", roofs::l2_probe_bytes(caches, 1)},
                                 {"l3_bytes", roofs::l3_probe_bytes(caches, 1)},
                                 {"dram_bytes", roofs::dram_probe_bytes(caches)},
                                 {"note", "L2 and L3 probe sizes at 1 thread; L2 scales with the threads, L3 too up "
                                          "to half the L3"}};
  const nlohmann::json peaks = {
      {"bf16", "vdpbf16ps loop, 12 independent zmm chains; 2 FLOPs per bf16 product, 64 per instruction; null: "
               "the CPU or ISA level lacks AVX512-BF16"},
      {"int8", "vpdpbusd loop, 12 independent zmm chains; 2 ops per u8*s8 multiply-add, 128 per instruction (64 "
               "MACs); null: the CPU or ISA level lacks AVX512-VNNI"}};
  nlohmann::json out = {{"machine", machine_json(best_isa_roofs, "best of 5 runs (FMA, BF16, int8 peaks), 8 or more "
                                                                 "(DRAM read: 1, 2, 4 and 8 streams per thread in "
                                                                 "turn) and 15 (L2, L3 read): a roof is what the "
                                                                 "hardware can do, noise only lowers it",
                                                 args.threads)},
                        {"read_probe_bytes", probes}, {"dot_peaks", peaks}, {"results", results},
                        {"access_roofs_gbs", access_roofs_json(access_roofs)},
                        {"dram_read_by_streams", streams_json}};
  if (args.json) {
    std::printf("%s\n", out.dump(2).c_str());
  } else {
    std::printf("caches (%s): L1d %zu KiB, L2 %zu KiB per core, L3 %zu MiB\n", caches.source, caches.l1d >> 10,
                caches.l2 >> 10, caches.l3 >> 20);
    for (const auto& [t, r] : best_isa_roofs)
      if (r.l3_found_by_reading)
        std::printf("%d thread%s: no L3 reported; reading found one of at least %zu MiB\n", t, t == 1 ? "" : "s",
                    r.l3_bytes >> 20);
    std::printf("%s", table.str().c_str());
    std::printf("BF16 peak: vdpbf16ps, 2 FLOPs per bf16 product; int8 peak: vpdpbusd, 2 ops per u8*s8 "
                "multiply-add (MAC rate = half); \"absent\": the ISA level or CPU lacks the instruction\n");
    std::printf("\nBandwidth by access pattern (%s loops; GB/s of bytes read + written, a write's line fill not "
                "counted; each pattern's arrays together the size of the read probe):\n%s",
                isa_name(best_isa()), access_table.str().c_str());
    std::printf("\nDRAM read by streams per thread (each thread's share read as that many parts side by side; "
                "the DRAM read roof above is the best of them):\n%s",
                streams_table.str().c_str());
  }
  return 0;
}
