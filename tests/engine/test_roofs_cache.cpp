// The roofs cache refuses noisy measurements (engine/src/profiler/roofs_cache.h): two measurements that disagree, or
// a load average that leaves the threads busy, are used but never cached, and the source says why.
#include <doctest/doctest.h>

#include <sqrtdk/profiler.h>

#include "engine/src/profiler/roofs_cache.h"
#include "ops/base/roofs.h"
#include "tests/common/cache_home.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <string>

using namespace sqrtdk;
using profiler_detail::roofs_noise;

namespace {

MachineRoofs given_roofs(double gflops, double gbs) {
  MachineRoofs r;
  r.peak_gflops = gflops;
  r.dram_gbs = gbs;
  return r;
}

}  // namespace

TEST_CASE("roofs cache: only quiet measurements may be cached") {
  // Agreeing measurements on an idle machine: cacheable.
  CHECK(roofs_noise(given_roofs(200, 30), given_roofs(195, 29), 0.1, 2, 2) == "");
  CHECK(roofs_noise(given_roofs(200, 30), given_roofs(195, 29), -1, 2, 2) == "");  // load average unknown: not checked
  // A second measurement 30% off (the machine got busy in between): refused, naming the spread.
  const std::string spread = roofs_noise(given_roofs(200, 30), given_roofs(140, 29), 0.1, 2, 2);
  CHECK(spread.find("differ by 30% (FMA peak)") != std::string::npos);
  CHECK(roofs_noise(given_roofs(200, 30), given_roofs(200, 20), 0.1, 2, 1).find("DRAM read") != std::string::npos);
  // Consistent but on a loaded machine (both measurements equally low): refused, naming the load average.
  const std::string busy = roofs_noise(given_roofs(100, 15), given_roofs(100, 15), 5.8, 2, 2);
  CHECK(busy.find("load average 5.80 on 2 cores") != std::string::npos);
  CHECK(roofs_noise(given_roofs(100, 15), given_roofs(100, 15), 0.9, 2, 1) == "");  // one thread, one core free: fine
  CHECK(roofs_noise(given_roofs(100, 15), given_roofs(100, 15), 0.9, 2, 2) != "");  // two threads need both cores
  CHECK(roofs_noise(given_roofs(0, 15), given_roofs(0, 15), 0.0, 2, 1) != "");     // a zero roof is never cached
}

TEST_CASE("roofs cache: the cache-level roofs must agree too") {
  MachineRoofs a = given_roofs(200, 30), b = given_roofs(200, 30);
  a.l3_gbs = 100;
  b.l3_gbs = 98;
  a.l2_gbs = b.l2_gbs = 300;
  CHECK(roofs_noise(a, b, 0.1, 2, 2) == "");
  b.l3_gbs = 60;  // the L3 probe caught a busy moment
  CHECK(roofs_noise(a, b, 0.1, 2, 2).find("40% (L3 read)") != std::string::npos);
  b.l3_gbs = 98;
  b.l2_gbs = 0;  // measured once, not the other time
  CHECK(roofs_noise(a, b, 0.1, 2, 2).find("(L2 read)") != std::string::npos);
  a.l2_gbs = a.l3_gbs = b.l3_gbs = 0;  // a level neither measured (no L3 on this machine) is not noise
  CHECK(roofs_noise(a, b, 0.1, 2, 2) == "");
}

TEST_CASE("roofs cache: the dot-product peaks must agree too, and a machine without them is not noise") {
  MachineRoofs a = given_roofs(200, 30), b = given_roofs(200, 30);
  CHECK(roofs_noise(a, b, 0.1, 2, 2) == "");  // neither measured (an ISA below avx512_vnni): fine
  a.bf16_peak_gflops = 400;
  b.bf16_peak_gflops = 390;
  a.int8_peak_gops = b.int8_peak_gops = 800;
  CHECK(roofs_noise(a, b, 0.1, 2, 2) == "");
  b.bf16_peak_gflops = 200;  // the BF16 loop caught a busy moment
  CHECK(roofs_noise(a, b, 0.1, 2, 2).find("50% (BF16 peak)") != std::string::npos);
  b.bf16_peak_gflops = 390;
  b.int8_peak_gops = 0;  // measured once, not the other time
  CHECK(roofs_noise(a, b, 0.1, 2, 2).find("(int8 peak)") != std::string::npos);
}

TEST_CASE("roofs: better_roofs keeps the higher of every figure, and the smaller of two L3s found by reading") {
  // A roof is an upper bound: of two readings (sqrtdk bench's before and after its runs), the lower one is the one
  // something interrupted, whichever figure it is.
  MachineRoofs a = given_roofs(400, 51), b = given_roofs(380, 75);
  a.bf16_peak_gflops = 700, b.bf16_peak_gflops = 780;
  a.int8_peak_gops = 1700, b.int8_peak_gops = 1600;
  a.l2_gbs = 300, b.l2_gbs = 330;
  a.l3_gbs = 190, b.l3_gbs = 150;
  a.l1d_bytes = b.l1d_bytes = 48 << 10, a.l2_bytes = b.l2_bytes = 1 << 20, a.l3_bytes = b.l3_bytes = 32 << 20;
  a.source = "first";
  b.source = "second";
  const MachineRoofs best = better_roofs(a, b);
  CHECK(best.peak_gflops == 400);
  CHECK(best.dram_gbs == 75);
  CHECK(best.bf16_peak_gflops == 780);
  CHECK(best.int8_peak_gops == 1700);
  CHECK(best.l2_gbs == 330);
  CHECK(best.l3_gbs == 190);
  CHECK(best.l3_bytes == size_t{32} << 20);
  CHECK(best.source == "first");
  CHECK(better_roofs(b, a).dram_gbs == 75);  // symmetric in the figures
  // Two reading sweeps that found different L3s: the smaller, with its own roof (not the other size's higher one).
  b.l3_bytes = 16 << 20, b.l3_found_by_reading = true;
  const MachineRoofs found = better_roofs(a, b);
  CHECK(found.l3_bytes == size_t{16} << 20);
  CHECK(found.l3_found_by_reading);
  CHECK(found.l3_gbs == 150);
  CHECK(better_roofs(b, a).l3_bytes == size_t{16} << 20);
}

TEST_CASE("roofs: the dot-product peaks are measured exactly at the ISA levels that have them") {
  for (Isa isa : supported_isas()) {
    CAPTURE(isa_name(isa));
    const MachineRoofs r = measure_machine_roofs(isa, 1, /*quick=*/true);
    CHECK((r.bf16_peak_gflops > 0) == (isa >= Isa::avx512_bf16));
    CHECK((r.int8_peak_gops > 0) == (isa >= Isa::avx512_vnni));
  }
  // The JSON record says null, not 0, for a peak the level lacks.
  MachineRoofs none;
  const std::string json = machine_json({none}, "test");
  CHECK(json.find("\"bf16_peak_gflops\":null") != std::string::npos);
  CHECK(json.find("\"int8_peak_gops\":null") != std::string::npos);
  if (cpu_supports(Isa::avx512_bf16)) {
    // The loops' accounting against the FMA loop's: no CPU issues more than twice as many vdpbf16ps (64 FLOPs)
    // or vpdpbusd (128 ops) per cycle as zmm FMAs (32 FLOPs), so the peaks stay under 4x and 8x the FMA peak;
    // twice that here, for the noise of quick runs on a shared machine. A loop GCC had merged (12 chains into one
    // reads up to 12x) or an op count off by a factor would not.
    // Each figure is the best of five quick runs (better_roofs): load only ever slows a loop, so one run's FMA peak
    // can read low while the dot loop beside it does not (under ASan with ctest -j2 one run read the FMA peak at
    // 59.6 GFLOP/s, a quarter of it, and int8 at 986 GOP/s: 16.5x), while a loop that reads high reads high in
    // every run.
    MachineRoofs r = measure_machine_roofs(Isa::avx512_bf16, 1, /*quick=*/true);
    for (int run = 1; run < 5; ++run) r = better_roofs(r, measure_machine_roofs(Isa::avx512_bf16, 1, /*quick=*/true));
    CHECK(r.bf16_peak_gflops < 8 * r.peak_gflops);
    CHECK(r.int8_peak_gops < 16 * r.peak_gflops);
  }
}

TEST_CASE("roofs cache: the source says whether the roofs came from the cache and why they were not cached") {
  test::CacheHome home;
  bool said = false;
  const MachineRoofs first = cached_machine_roofs(Isa::ref, 1, [&] { said = true; });
  CHECK(said);  // nothing cached: it measured, and said so first
  CHECK(first.peak_gflops > 0);
  CHECK(first.dram_gbs > 0);
  // The cache levels are measured on the same thread count wherever the machine's caches allow a probe.
  const roofs::CacheSizes caches = roofs::detect_cache_sizes();
  CHECK(first.l2_bytes == caches.l2);
  // The L3 is the one detected, or, when none is reported, the one reading found (if any).
  if (first.l3_found_by_reading) {
    CHECK(caches.l3 == 0);
    CHECK(first.l3_bytes > 0);
  } else {
    CHECK(first.l3_bytes == caches.l3);
  }
  roofs::CacheSizes probed = caches;
  probed.l3 = first.l3_bytes;
  CHECK((first.l2_gbs > 0) == (roofs::l2_probe_bytes(caches, 1) > 0));
  CHECK((first.l3_gbs > 0) == (roofs::l3_probe_bytes(probed, 1) > 0));
  const std::filesystem::path file = home.file("roofs.json");
  const bool cached = first.source.rfind("measured (cached in ", 0) == 0;
  CAPTURE(first.source);
  CHECK((cached || first.source.rfind("measured (not cached: ", 0) == 0));
  CHECK(std::filesystem::exists(file) == cached);
  said = false;
  const MachineRoofs second = cached_machine_roofs(Isa::ref, 1, [&] { said = true; });
  if (cached) {
    CHECK_FALSE(said);
    CHECK(second.source.rfind("cache " + file.string() + " (measured ", 0) == 0);
    CHECK(second.peak_gflops == first.peak_gflops);
    CHECK(second.l3_gbs == first.l3_gbs);
    CHECK(second.l2_gbs == first.l2_gbs);
    CHECK(second.l2_bytes == first.l2_bytes);
    // An entry measured when the machine reported other cache sizes (its probes were sized from them) is measured
    // again: here its L2 is made to differ from what is detected now.
    nlohmann::json entries;
    std::ifstream(file) >> entries;
    REQUIRE(entries.size() == 1);
    entries.begin().value()["l2_bytes"] = caches.l2 + 4096;
    std::ofstream(file) << entries.dump();
    said = false;
    const MachineRoofs third = cached_machine_roofs(Isa::ref, 1, [&] { said = true; });
    CHECK(said);
    CHECK(third.l2_bytes == caches.l2);
  } else {
    CHECK(said);
  }
}

TEST_CASE("roofs cache: an L3 found by reading stands for \"none reported\" when an entry is reused") {
  // The entry is written here (the measured one is cached only on a quiet machine): the rule under test is which
  // cache sizes let an entry be reused. An L3 that reading found is reused while the machine still reports none and
  // measured again once it reports one; an L3 that was reported must equal the one reported now.
  test::CacheHome home;
  const roofs::CacheSizes caches = roofs::detect_cache_sizes();
  const std::filesystem::path file = home.file("roofs.json");
  std::filesystem::create_directories(file.parent_path());
  auto reused_with_l3 = [&](size_t l3_bytes, bool found_by_reading) {
    const std::string key = profiler_detail::roofs_cache_key(Isa::ref, 1);
    const nlohmann::json entry = {{"peak_gflops", 9.0}, {"bf16_peak_gflops", 0.0}, {"int8_peak_gops", 0.0},
                                  {"dram_gbs", 30.0}, {"l3_gbs", 90.0}, {"l2_gbs", 200.0},
                                  {"l1d_bytes", caches.l1d}, {"l2_bytes", caches.l2}, {"l3_bytes", l3_bytes},
                                  {"l3_found_by_reading", found_by_reading}, {"measured_at", "test"},
                                  {"load_average", 0.0}};
    std::ofstream(file) << nlohmann::json{{key, entry}}.dump();
    bool measured = false;
    const MachineRoofs r = cached_machine_roofs(Isa::ref, 1, [&] { measured = true; });
    if (!measured) {
      CHECK(r.peak_gflops == 9.0);
      CHECK(r.l3_bytes == l3_bytes);
      CHECK(r.l3_found_by_reading == found_by_reading);
    }
    return !measured;
  };
  CHECK(reused_with_l3(size_t{48} << 20, true) == (caches.l3 == 0));
  CHECK(reused_with_l3(caches.l3, false));
  CHECK_FALSE(reused_with_l3(caches.l3 + (size_t{1} << 20), false));
}

TEST_CASE("roofs: a multi-thread FMA peak far under n times the 1-thread one says the host was busy") {
  MachineRoofs one;
  one.isa = Isa::avx2, one.n_threads = 1, one.peak_gflops = 250;
  MachineRoofs two = one;
  two.n_threads = 2;
  two.peak_gflops = 500;  // 2.00x: quiet
  CHECK(busy_host_warning({one, two}).empty());
  two.peak_gflops = 440;  // 1.76x: still over kBusyHostScaling x 2 = 1.75
  CHECK(busy_host_warning({one, two}).empty());
  two.peak_gflops = 300;  // 1.20x: one vCPU held by another tenant
  const std::string warning = busy_host_warning({one, two});
  CAPTURE(warning);
  CHECK(warning.rfind("busy host: ", 0) == 0);
  CHECK(warning.find("2-thread FMA peak measured 1.20x the 1-thread one (300 vs 250 GFLOP/s, avx2)") !=
        std::string::npos);
  CHECK(machine_json({one, two}, "test").find("\"host_busy\":true") != std::string::npos);
  // Only sets of the same ISA are compared, and a lone set has nothing to be compared with.
  MachineRoofs two_other_isa = two;
  two_other_isa.isa = Isa::ref;
  CHECK(busy_host_warning({one, two_other_isa}).empty());
  CHECK(busy_host_warning({two}).empty());
  CHECK(busy_host_warning({one}).empty());
  two.peak_gflops = 500;
  CHECK(machine_json({one, two}, "test").find("\"host_busy\":false") != std::string::npos);
}
