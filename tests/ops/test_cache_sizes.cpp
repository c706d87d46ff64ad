// Cache sizes from CPUID, decoded from recorded register values: Intel's leaf 4, AMD's 0x8000001D and, where a VM
// hides TOPOEXT, AMD's legacy 0x80000005/6 (the Zen 5 VM of 2026-12-03, which had no sysfs cache directory
// either). The sysfs reader is tested in tests/engine/test_roofline.cpp.
#include <doctest/doctest.h>

#include "ops/base/roofs.h"

#include <cstring>
#include <map>
#include <string>
#include <utility>
#include <vector>

using namespace sqrtdk;
using roofs::CpuidRegs;

namespace {

constexpr size_t KiB = size_t{1} << 10, MiB = size_t{1} << 20;

// A recorded CPU: the registers per (leaf, subleaf); a query it has no record of reads zeros, as CPUID does beyond
// the maximum leaf.
struct FakeCpu {
  std::map<std::pair<uint32_t, uint32_t>, CpuidRegs> leaves;
  int queries = 0;
  FakeCpu(const char* vendor, uint32_t max_leaf, uint32_t max_ext) {
    CpuidRegs id{max_leaf, 0, 0, 0};
    std::memcpy(&id.ebx, vendor, 4);
    std::memcpy(&id.edx, vendor + 4, 4);
    std::memcpy(&id.ecx, vendor + 8, 4);
    leaves[{0, 0}] = id;
    leaves[{0x80000000, 0}] = {max_ext, 0, 0, 0};
  }
  roofs::CacheSizes decode() {
    return roofs::cache_sizes_from_cpuid([this](uint32_t leaf, uint32_t sub) {
      ++queries;
      const auto it = leaves.find({leaf, sub});
      return it == leaves.end() ? CpuidRegs{} : it->second;
    });
  }
};

// One subleaf of leaf 4 / 0x8000001D: type (1 data, 2 instruction, 3 unified), level, ways, line bytes, sets
// (one partition), encoded as the SDM / APM lay them out (each count minus one).
CpuidRegs cache_leaf(uint32_t type, uint32_t level, uint32_t ways, uint32_t line, uint32_t sets) {
  return {type | level << 5, (ways - 1) << 22 | (line - 1), sets - 1, 0};
}

}  // namespace

TEST_CASE("cache sizes: Intel's leaf 4 (an Emerald Rapids-like Xeon)") {
  FakeCpu cpu("GenuineIntel", 0x1b, 0x80000008);
  cpu.leaves[{4, 0}] = cache_leaf(1, 1, 12, 64, 64);      // L1d 48 KiB
  cpu.leaves[{4, 1}] = cache_leaf(2, 1, 8, 64, 64);       // L1i 32 KiB: must not be taken for the L1d
  cpu.leaves[{4, 2}] = cache_leaf(3, 2, 16, 64, 2048);    // L2 2 MiB
  cpu.leaves[{4, 3}] = cache_leaf(3, 3, 20, 64, 212992);  // L3 260 MiB
  const roofs::CacheSizes c = cpu.decode();
  CHECK(c.l1d == 48 * KiB);
  CHECK(c.l2 == 2 * MiB);
  CHECK(c.l3 == 260 * MiB);
  CHECK(std::string(c.source) == "CPUID leaf 4");

  // Partitions count too (ebx[21:12]): 2 partitions of 8 ways × 64 B × 1024 sets = 1 MiB.
  FakeCpu parts("GenuineIntel", 0x1b, 0x80000008);
  parts.leaves[{4, 0}] = cache_leaf(3, 2, 8, 64, 1024);
  parts.leaves[{4, 0}].ebx |= 1u << 12;
  CHECK(parts.decode().l2 == 1 * MiB);
}

TEST_CASE("cache sizes: AMD's 0x8000001D when TOPOEXT is there, the legacy leaves when it is not") {
  FakeCpu zen5("AuthenticAMD", 0x10, 0x80000021);
  zen5.leaves[{0x80000001, 0}] = {0, 0, 1u << 22, 0};  // TOPOEXT
  zen5.leaves[{0x8000001D, 0}] = cache_leaf(1, 1, 12, 64, 64);     // 48 KiB
  zen5.leaves[{0x8000001D, 1}] = cache_leaf(2, 1, 8, 64, 64);      // L1i
  zen5.leaves[{0x8000001D, 2}] = cache_leaf(3, 2, 16, 64, 1024);   // 1 MiB
  zen5.leaves[{0x8000001D, 3}] = cache_leaf(3, 3, 16, 64, 32768);  // 32 MiB
  // The legacy leaves say something else, so a decoder that read them instead would fail.
  zen5.leaves[{0x80000005, 0}] = {0, 0, 32u << 24, 0};
  zen5.leaves[{0x80000006, 0}] = {0, 0, 512u << 16, 0};
  roofs::CacheSizes c = zen5.decode();
  CHECK(c.l1d == 48 * KiB);
  CHECK(c.l2 == 1 * MiB);
  CHECK(c.l3 == 32 * MiB);
  CHECK(std::string(c.source) == "CPUID 0x8000001D");

  // The same CPU in the 2026-12-03 VM: TOPOEXT hidden. Registers as recorded there: 0x80000005 ecx 0x300c0140
  // (48 KiB L1d), 0x80000006 ecx 0x04006140 (1024 KiB L2), edx 0x0fe09140 (1016 × 512 KiB: the VM's made-up L3,
  // which is not taken: no L3 rather than a wrong one).
  zen5.leaves[{0x80000001, 0}] = {0, 0, 0x440001f1, 0};
  zen5.leaves[{0x80000005, 0}] = {0, 0, 0x300c0140, 0};
  zen5.leaves[{0x80000006, 0}] = {0, 0, 0x04006140, 0x0fe09140};
  c = zen5.decode();
  CHECK(c.l1d == 48 * KiB);
  CHECK(c.l2 == 1 * MiB);
  CHECK(c.l3 == 0);
  CHECK(std::string(c.source) == "CPUID 0x80000005/6");
}

TEST_CASE("cache sizes: a CPU that reports nothing, and a leaf that never ends") {
  // A maximum leaf below 4 and no AMD vendor: nothing to read, zeros (the GEMM then assumes sizes).
  FakeCpu old("GenuineIntel", 2, 0x80000004);
  const roofs::CacheSizes none = old.decode();
  CHECK((none.l1d == 0 && none.l2 == 0 && none.l3 == 0));
  CHECK(std::string(none.source) == "not reported");

  // A leaf 4 whose every subleaf claims a cache (a broken hypervisor): the decoder stops at its bound and keeps
  // the first cache of each level.
  FakeCpu loop("GenuineIntel", 0x1b, 0x80000008);
  for (uint32_t sub = 0; sub < 64; ++sub) loop.leaves[{4, sub}] = cache_leaf(1, 1 + sub % 3, 8, 64, 64 * (sub + 1));
  const roofs::CacheSizes c = loop.decode();
  CHECK(c.l1d == 8 * 64 * 64);
  CHECK(c.l2 == 8 * 64 * 128);
  CHECK(c.l3 == 8 * 64 * 192);
  CHECK(loop.queries < 32);
}

TEST_CASE("cache sizes: this machine's, if it reports any, are sizes a CPU could have") {
  // Not a fixed answer (the CPU varies): a decoder that misread the fields gives bytes off by orders of magnitude.
  const roofs::CacheSizes c = roofs::detect_cache_sizes();
  MESSAGE("L1d " << (c.l1d >> 10) << " KiB, L2 " << (c.l2 >> 10) << " KiB, L3 " << (c.l3 >> 20) << " MiB ("
                 << std::string(c.source) << ")");
  if (c.l1d) CHECK((c.l1d >= 8 * KiB && c.l1d <= 1 * MiB));
  if (c.l2) CHECK((c.l2 >= 64 * KiB && c.l2 <= 64 * MiB));
  if (c.l3) CHECK((c.l3 >= 1 * MiB && c.l3 <= 4096 * MiB));
#if defined(__x86_64__)
  CHECK(roofs::cpuid_cache_sizes().l1d > 0);  // every x86-64 CPU we run on describes its L1d by one of the leaves
#endif
}

TEST_CASE("cache sizes: an L3 no one reports is found by reading, never larger than the last size that fit") {
  const roofs::CacheSizes zen5_vm{48 << 10, 1 << 20, 0, "CPUID 0x80000005/6"};  // what this VM's CPUID gives
  const size_t MiB = size_t{1} << 20;
  // The sweep starts past the threads' L2s together (4x) and doubles up to 128 MiB.
  CHECK(roofs::l3_sweep_bytes(zen5_vm, 1) ==
        std::vector<size_t>{4 * MiB, 8 * MiB, 16 * MiB, 32 * MiB, 64 * MiB, 128 * MiB});
  CHECK(roofs::l3_sweep_bytes(zen5_vm, 2).front() == 8 * MiB);
  CHECK(roofs::l3_sweep_bytes(roofs::CacheSizes{}, 1).empty());  // no L2 known: nothing to start from
  // Read GB/s shaped like the Zen 5 VM at one thread (a 32 MiB L3 per CCD; DRAM ~30 GB/s): 32 MiB still reads from
  // L3, 64 MiB like DRAM.
  const double dram = 30;
  const std::vector<std::pair<size_t, double>> zen5 = {{4 * MiB, 101}, {8 * MiB, 99}, {16 * MiB, 97}, {32 * MiB, 80},
                                                       {64 * MiB, 33}};
  CHECK(roofs::l3_from_read_sweep(zen5, dram) == 32 * MiB);
  // The first size below kL3OverDram x DRAM ends the search, even if a later size (a noisy DRAM figure) reads high.
  CHECK(roofs::l3_from_read_sweep({{4 * MiB, 101}, {8 * MiB, 40}, {16 * MiB, 97}}, dram) == 4 * MiB);
  CHECK(roofs::l3_from_read_sweep({{4 * MiB, 1.5 * dram}}, dram) == 4 * MiB);          // the bound is inclusive
  CHECK(roofs::l3_from_read_sweep({{4 * MiB, 1.49 * dram}, {8 * MiB, 90}}, dram) == 0);  // no L3 past the L2s
  CHECK(roofs::l3_from_read_sweep(zen5, 0) == 0);                                        // no DRAM figure: no claim
  CHECK(roofs::l3_from_read_sweep({}, dram) == 0);
}
