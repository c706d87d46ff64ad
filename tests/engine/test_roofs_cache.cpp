// The roofs cache refuses noisy measurements (engine/src/profiler/roofs_cache.h): two measurements that disagree, or
// a load average that leaves the threads busy, are used but never cached, and the source says why.
#include <doctest/doctest.h>

#include <sqrtdk/profiler.h>

#include "engine/src/profiler/roofs_cache.h"
#include "tests/common/temp_dir.h"

#include <cstdlib>
#include <filesystem>
#include <string>

using namespace sqrtdk;
using profiler_detail::roofs_noise;

namespace {

MachineRoofs roofs(double gflops, double gbs) {
  MachineRoofs r;
  r.peak_gflops = gflops;
  r.dram_gbs = gbs;
  return r;
}

}  // namespace

TEST_CASE("roofs cache: only quiet measurements may be cached") {
  // Agreeing measurements on an idle machine: cacheable.
  CHECK(roofs_noise(roofs(200, 30), roofs(195, 29), 0.1, 2, 2) == "");
  CHECK(roofs_noise(roofs(200, 30), roofs(195, 29), -1, 2, 2) == "");  // load average unknown: not checked
  // A second measurement 30% off (the machine got busy in between): refused, naming the spread.
  const std::string spread = roofs_noise(roofs(200, 30), roofs(140, 29), 0.1, 2, 2);
  CHECK(spread.find("differ by 30% (FMA peak)") != std::string::npos);
  CHECK(roofs_noise(roofs(200, 30), roofs(200, 20), 0.1, 2, 1).find("DRAM read") != std::string::npos);
  // Consistent but on a loaded machine (both measurements equally low): refused, naming the load average.
  const std::string busy = roofs_noise(roofs(100, 15), roofs(100, 15), 5.8, 2, 2);
  CHECK(busy.find("load average 5.80 on 2 cores") != std::string::npos);
  CHECK(roofs_noise(roofs(100, 15), roofs(100, 15), 0.9, 2, 1) == "");  // one thread, one core free: fine
  CHECK(roofs_noise(roofs(100, 15), roofs(100, 15), 0.9, 2, 2) != "");  // two threads need both cores
  CHECK(roofs_noise(roofs(0, 15), roofs(0, 15), 0.0, 2, 1) != "");     // a zero roof is never cached
}

TEST_CASE("roofs cache: the source says whether the roofs came from the cache and why they were not cached") {
  test::TempDir dir;
  const char* old = std::getenv("XDG_CACHE_HOME");
  const std::string saved = old ? old : "";
  setenv("XDG_CACHE_HOME", dir.path().c_str(), 1);
  bool said = false;
  const MachineRoofs first = cached_machine_roofs(Isa::ref, 1, [&] { said = true; });
  CHECK(said);  // nothing cached: it measured, and said so first
  CHECK(first.peak_gflops > 0);
  CHECK(first.dram_gbs > 0);
  const std::filesystem::path file = dir.path() / "sqrtdk" / "roofs.json";
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
  } else {
    CHECK(said);
  }
  if (old)
    setenv("XDG_CACHE_HOME", saved.c_str(), 1);
  else
    unsetenv("XDG_CACHE_HOME");
}
