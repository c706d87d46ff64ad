#include "ops/base/roofs.h"

#include <sqrtdk/error.h>

#include "ops/base/aligned_buffer.h"

#include <omp.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include <algorithm>
#include <chrono>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

namespace sqrtdk::roofs {

namespace {
double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

std::span<const ops::KernelEntry<RoofKernels>> roof_kernels() {
  static constexpr ops::KernelEntry<RoofKernels> table[] = {
      // 10 zmm FMAs of 16 lanes
      {Isa::avx512, "roofs_avx512",
       {2.0 * 16 * 10, fma_loop_avx512, read_loop_avx512, read_streams_loop_avx512, read_write_loop_avx512,
        read2_write_loop_avx512}},
      // 10 ymm FMAs of 8 lanes
      {Isa::avx2, "roofs_avx2",
       {2.0 * 8 * 10, fma_loop_avx2, read_loop_avx2, read_streams_loop_avx2, read_write_loop_avx2, read2_write_loop_avx2}},
      // 8 scalar multiply-adds
      {Isa::ref, "roofs_ref",
       {2.0 * 8, fma_loop_ref, read_loop_ref, read_streams_loop_ref, read_write_loop_ref, read2_write_loop_ref}},
  };
  return table;
}

double flops_per_iteration(Isa isa) { return ops::select_kernel(roof_kernels(), isa).kernels.flops_per_iteration; }

namespace {
// Ops per second of `loop` (ops_per_iteration per round) on n_threads threads, each running `iterations` rounds:
// best of `reps` runs. Best-of, not median: a roof is what the hardware can do, and noise only lowers it.
double measure_loop_rate(float (*loop)(long), double ops_per_iteration, int n_threads, long iterations, int reps) {
  double best = 1e30;
  float sink = 0;
  for (int rep = 0; rep < reps; ++rep) {
    const double t0 = steady_seconds();
#pragma omp parallel num_threads(n_threads) reduction(+ : sink)
    sink += loop(iterations);
    best = std::min(best, steady_seconds() - t0);
  }
  if (sink == 12345.0f) std::fputc(' ', stderr);  // keeps the result alive
  return ops_per_iteration * iterations * n_threads / best;
}
}  // namespace

double measure_fma_gflops(Isa isa, int n_threads, long iterations, int reps) {
  if (!cpu_supports(isa)) throw Error(std::string("measure_fma_gflops: this CPU lacks ") + isa_name(isa));
  const RoofKernels& kernels = ops::select_kernel(roof_kernels(), isa).kernels;
  return measure_loop_rate(kernels.fma_loop, kernels.flops_per_iteration, n_threads, iterations, reps) * 1e-9;
}

double measure_bf16_dot_gflops(int n_threads, long iterations, int reps) {
  if (!cpu_supports(Isa::avx512_bf16)) throw Error("measure_bf16_dot_gflops: this CPU lacks avx512_bf16");
  return measure_loop_rate(bf16_dot_loop_avx512bf16, kBf16DotFlopsPerIteration, n_threads, iterations, reps) * 1e-9;
}

double measure_vnni_dot_gops(int n_threads, long iterations, int reps) {
  if (!cpu_supports(Isa::avx512_vnni)) throw Error("measure_vnni_dot_gops: this CPU lacks avx512_vnni");
  return measure_loop_rate(vnni_dot_loop_avx512vnni, kVnniDotOpsPerIteration, n_threads, iterations, reps) * 1e-9;
}

const char* access_name(Access access) {
  switch (access) {
    case Access::read: return "read";
    case Access::read_write_in_place: return "read+write in place";
    case Access::read_write: return "read+write";
    case Access::read2_write: return "2 reads+write";
  }
  return "?";
}

int access_arrays(Access access) {
  switch (access) {
    case Access::read: return 1;
    case Access::read_write_in_place: return 1;
    case Access::read_write: return 2;
    case Access::read2_write: return 3;
  }
  return 1;
}

int access_touches(Access access) {
  switch (access) {
    case Access::read: return 1;
    case Access::read_write_in_place: return 2;
    case Access::read_write: return 2;
    case Access::read2_write: return 3;
  }
  return 1;
}

namespace {
// The arrays of one access probe, first touched outside the timed loop by the threads that stream each share (the
// same static split as time_access's).
struct AccessArrays {
  size_t n;  // floats per array
  AlignedBuffer<float> a, b, c;
  AccessArrays(Access access, int n_threads, size_t bytes)
      : n(bytes / sizeof(float) / access_arrays(access)),
        a(n),
        b(access_arrays(access) > 1 ? n : 0),
        c(access_arrays(access) > 2 ? n : 0) {
    const int n_arrays = access_arrays(access);
#pragma omp parallel for num_threads(n_threads) schedule(static)
    for (size_t i = 0; i < n; ++i) {
      a[i] = 1.0f;
      if (n_arrays > 1) b[i] = 2.0f;
      if (n_arrays > 2) c[i] = 3.0f;
    }
  }
};

// Seconds of one timed run: each thread streams its own contiguous share `passes` times (a read in `read_streams`
// parts side by side). `sink` keeps the sums alive; the writes need no such guard: they go through a table's pointer.
double time_access(Access access, int n_threads, AccessArrays& arrays, int passes, int read_streams, float& sink) {
  const RoofKernels& kernels = ops::select_kernel(roof_kernels(), best_isa()).kernels;
  const size_t n = arrays.n;
  float* a = arrays.a.data();
  float* b = arrays.b.data();
  float* c = arrays.c.data();
  float sum = 0;
  const double t0 = steady_seconds();
#pragma omp parallel num_threads(n_threads) reduction(+ : sum)
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    const size_t begin = n * t / nt, count = n * (t + 1) / nt - begin;
    for (int pass = 0; pass < passes; ++pass) {
      switch (access) {
        case Access::read:
          sum += read_streams > 1 ? kernels.read_streams_loop(a + begin, count, read_streams)
                                  : kernels.read_loop(a + begin, count);
          break;
        case Access::read_write_in_place: kernels.read_write_loop(a + begin, a + begin, count); break;
        case Access::read_write: kernels.read_write_loop(a + begin, b + begin, count); break;
        case Access::read2_write: kernels.read2_write_loop(a + begin, b + begin, c + begin, count); break;
      }
    }
  }
  const double seconds = steady_seconds() - t0;
  sink += sum;
  return seconds;
}

double access_gbs(Access access, const AccessArrays& arrays, int passes, double seconds) {
  return static_cast<double>(arrays.n * sizeof(float)) * access_touches(access) * passes / seconds * 1e-9;
}
}  // namespace

double measure_access_gbs(Access access, int n_threads, size_t bytes, int reps, int passes) {
  AccessArrays arrays(access, n_threads, bytes);
  double best = 1e30;
  float sink = 0;
  for (int rep = 0; rep < reps; ++rep) best = std::min(best, time_access(access, n_threads, arrays, passes, 1, sink));
  if (sink == 12345.0f) std::fputc(' ', stderr);  // keeps the sums alive
  return access_gbs(access, arrays, passes, best);
}

double measure_dram_read_gbs(int n_threads, size_t bytes, int rounds) {
  AccessArrays arrays(Access::read, n_threads, bytes);
  double best = 1e30;
  float sink = 0;
  // Round by round, every stream count in turn, so drift in the machine's load falls on all alike.
  for (int round = 0; round < rounds; ++round)
    for (const int streams : kDramReadStreams)
      best = std::min(best, time_access(Access::read, n_threads, arrays, 1, streams, sink));
  if (sink == 12345.0f) std::fputc(' ', stderr);
  return access_gbs(Access::read, arrays, 1, best);
}

double measure_read_streams_gbs(int n_threads, size_t bytes, int reps, int streams) {
  AccessArrays arrays(Access::read, n_threads, bytes);
  double best = 1e30;
  float sink = 0;
  for (int rep = 0; rep < reps; ++rep)
    best = std::min(best, time_access(Access::read, n_threads, arrays, 1, streams, sink));
  if (sink == 12345.0f) std::fputc(' ', stderr);
  return access_gbs(Access::read, arrays, 1, best);
}

double measure_read_gbs(int n_threads, size_t bytes, int reps, int passes) {
  return measure_access_gbs(Access::read, n_threads, bytes, reps, passes);
}

namespace {

// "48K", "2048K", "300M" (sysfs) -> bytes; 0 if unreadable.
size_t parse_cache_size(const std::string& text) {
  size_t value = 0, i = 0;
  while (i < text.size() && text[i] >= '0' && text[i] <= '9') value = value * 10 + (text[i++] - '0');
  if (i == 0) return 0;
  const char unit = i < text.size() ? text[i] : ' ';
  if (unit == 'K') return value << 10;
  if (unit == 'M') return value << 20;
  if (unit == 'G') return value << 30;
  return value;
}

std::string read_word(const std::filesystem::path& file) {
  std::ifstream in(file);
  std::string word;
  in >> word;
  return word;
}

}  // namespace

CacheSizes sysfs_cache_sizes(const std::string& sysfs_dir) {
  namespace fs = std::filesystem;
  CacheSizes sizes;
  std::error_code ec;
  for (fs::directory_iterator it(sysfs_dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->path().filename().string().rfind("index", 0) != 0) continue;
    const std::string level = read_word(it->path() / "level"), type = read_word(it->path() / "type");
    if (type == "Instruction") continue;  // the data (or unified) cache of each level
    const size_t bytes = parse_cache_size(read_word(it->path() / "size"));
    if (level == "1") sizes.l1d = bytes;
    if (level == "2") sizes.l2 = bytes;
    if (level == "3") sizes.l3 = bytes;
  }
  if (sizes.l1d || sizes.l2 || sizes.l3) sizes.source = "sysfs";
  return sizes;
}

namespace {

// Leaf 4 (Intel) and 0x8000001D (AMD) share a format: one subleaf per cache, ended by type 0. eax[4:0] type
// (1 data, 2 instruction, 3 unified), eax[7:5] level; size = ways (ebx[31:22]+1) × partitions (ebx[21:12]+1) ×
// line (ebx[11:0]+1) × sets (ecx+1).
bool read_deterministic_leaf(const CpuidQuery& cpuid, uint32_t leaf, CacheSizes& out) {
  bool any = false;
  for (uint32_t sub = 0; sub < 16; ++sub) {  // 16: a bound against a leaf that never says "no more caches"
    const CpuidRegs r = cpuid(leaf, sub);
    const uint32_t type = r.eax & 0x1f, level = (r.eax >> 5) & 0x7;
    if (type == 0) break;
    if (type == 2) continue;
    const size_t bytes = size_t{(r.ebx >> 22) + 1} * (((r.ebx >> 12) & 0x3ff) + 1) * ((r.ebx & 0xfff) + 1) *
                         (size_t{r.ecx} + 1);
    size_t* slot = level == 1 ? &out.l1d : level == 2 ? &out.l2 : level == 3 ? &out.l3 : nullptr;
    if (slot && *slot == 0) *slot = bytes, any = true;  // the first data or unified cache of each level
  }
  return any;
}

}  // namespace

CacheSizes cache_sizes_from_cpuid(const CpuidQuery& cpuid) {
  CacheSizes out;
  const CpuidRegs id = cpuid(0, 0);
  char vendor[13] = {};
  std::memcpy(vendor, &id.ebx, 4);
  std::memcpy(vendor + 4, &id.edx, 4);
  std::memcpy(vendor + 8, &id.ecx, 4);
  const bool amd = std::strcmp(vendor, "AuthenticAMD") == 0 || std::strcmp(vendor, "HygonGenuine") == 0;
  if (!amd) {
    if (id.eax >= 4 && read_deterministic_leaf(cpuid, 4, out)) out.source = "CPUID leaf 4";
    return out;
  }
  const uint32_t max_ext = cpuid(0x80000000, 0).eax;
  const bool topoext = max_ext >= 0x80000001 && ((cpuid(0x80000001, 0).ecx >> 22) & 1) != 0;
  if (topoext && max_ext >= 0x8000001D && read_deterministic_leaf(cpuid, 0x8000001D, out)) {
    out.source = "CPUID 0x8000001D";
    return out;
  }
  // The legacy leaves: L1d (0x80000005 ecx[31:24] KiB) and L2 (0x80000006 ecx[31:16] KiB). Not the L3 of
  // 0x80000006 edx: hypervisors that hide TOPOEXT make it up (the Zen 5 VM of 2026-12-03 says 508 MiB on a CPU with
  // 32 MiB per CCD), and an L3 too large would set working sets that stream from DRAM against the L3 roof. Without
  // it they are set against DRAM, and the probes are sized as for a CPU that reports no L3.
  if (max_ext >= 0x80000005) out.l1d = size_t{cpuid(0x80000005, 0).ecx >> 24} << 10;
  if (max_ext >= 0x80000006) out.l2 = size_t{cpuid(0x80000006, 0).ecx >> 16} << 10;
  if (out.l1d || out.l2 || out.l3) out.source = "CPUID 0x80000005/6";
  return out;
}

CacheSizes cpuid_cache_sizes() {
#if defined(__x86_64__) || defined(__i386__)
  return cache_sizes_from_cpuid([](uint32_t leaf, uint32_t subleaf) {
    CpuidRegs r;
    // __get_cpuid_count checks the leaf against the maximum (basic or extended) and leaves zeros beyond it.
    if (!__get_cpuid_count(leaf, subleaf, &r.eax, &r.ebx, &r.ecx, &r.edx)) r = {};
    return r;
  });
#else
  return {};
#endif
}

CacheSizes detect_cache_sizes() {
  // Read once per process (the GEMM blocking, the profiler and the benchmarks all ask), then immutable.
  static const CacheSizes detected = [] {
    CacheSizes sizes = sysfs_cache_sizes();
    if (sizes.l1d && sizes.l2 && sizes.l3) return sizes;
    const CacheSizes cpuid = cpuid_cache_sizes();
    const bool had_sysfs = sizes.l1d || sizes.l2 || sizes.l3;
    bool used = false;
    const std::pair<size_t*, size_t> levels[] = {
        {&sizes.l1d, cpuid.l1d}, {&sizes.l2, cpuid.l2}, {&sizes.l3, cpuid.l3}};
    for (const auto& [have, from] : levels)
      if (*have == 0 && from != 0) *have = from, used = true;
    if (used) sizes.source = had_sysfs ? "sysfs + CPUID" : cpuid.source;
    return sizes;
  }();
  return detected;
}

size_t l2_probe_bytes(const CacheSizes& caches, int n_threads) {
  // Must stream from L2, not L1: half an L2 is still several times any L1d.
  if (caches.l2 == 0 || caches.l2 / 2 <= 2 * caches.l1d) return 0;
  return caches.l2 / 2 * static_cast<size_t>(n_threads);
}

size_t l3_probe_bytes(const CacheSizes& caches, int n_threads) {
  const size_t l2s = caches.l2 * static_cast<size_t>(n_threads);
  const size_t bytes = std::min(4 * l2s, caches.l3 / 2);
  // Under twice the L2s together, part of it would be served from L2 and the figure would not be L3's.
  if (caches.l3 == 0 || bytes < 2 * l2s) return 0;
  return bytes;
}

size_t dram_probe_bytes(const CacheSizes& caches) {
  return std::clamp(2 * caches.l3, size_t{256} << 20, size_t{1} << 30);
}

std::vector<size_t> l3_sweep_bytes(const CacheSizes& caches, int n_threads) {
  std::vector<size_t> sizes;
  if (caches.l2 == 0) return sizes;
  for (size_t bytes = 4 * caches.l2 * static_cast<size_t>(std::max(1, n_threads)); bytes <= (size_t{128} << 20);
       bytes *= 2)
    sizes.push_back(bytes);
  return sizes;
}

size_t l3_from_read_sweep(const std::vector<std::pair<size_t, double>>& gbs_by_bytes, double dram_gbs) {
  size_t l3 = 0;
  if (!(dram_gbs > 0)) return 0;
  for (const auto& [bytes, gbs] : gbs_by_bytes) {
    if (!(gbs >= kL3OverDram * dram_gbs)) break;
    l3 = bytes;
  }
  return l3;
}

int read_probe_passes(size_t bytes) {
  if (bytes == 0) return 1;
  return static_cast<int>(std::max<size_t>(1, (size_t{64} << 20) / bytes));
}

}  // namespace sqrtdk::roofs
