// The loops that measure the machine's roofs (FMA peak; read bandwidth from L2, L3 and DRAM; the BF16 and int8
// dot-product peaks where the CPU has AVX512-BF16 / AVX512-VNNI), one set per ISA TU (ops/base/roofs_<isa>.cpp),
// the cache sizes (sysfs, CPUID) that place the read probes and block the GEMM, and the probes' buffer sizes. Used
// by the profiler's calibration, the GEMM blocking and every benchmark in perf/.
#pragma once

#include "ops/base/kernel_table.h"

#include <sqrtdk/isa.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace sqrtdk::roofs {

// `iterations` rounds of independent FMAs; returns a value that depends on all of them (keeps the loop alive).
float fma_loop_ref(long iterations);     // 8 scalar multiply-adds per round (no FMA in baseline x86-64)
float fma_loop_avx2(long iterations);    // 10 ymm FMAs per round
float fma_loop_avx512(long iterations);  // 10 zmm FMAs per round
double flops_per_iteration(Isa isa);  // of the loop measure_fma_gflops runs for `isa`

// Dot-product peak loops of the bf16 and q8 GEMMs' instructions: `iterations` rounds of 12 independent zmm
// instructions each; return a value that depends on all of them. Run only where cpu_supports(their level).
float bf16_dot_loop_avx512bf16(long iterations);  // 12 vdpbf16ps
float vnni_dot_loop_avx512vnni(long iterations);  // 12 vpdpbusd
// Work of one round. vdpbf16ps: 16 f32 lanes × 2 bf16 products, each product counted as 2 FLOPs (multiply and
// add, as an FMA's) = 64 FLOPs. vpdpbusd: 16 int32 lanes × 4 u8·s8 products = 64 multiply-adds = 128 int8 ops.
inline constexpr double kBf16DotFlopsPerIteration = 64.0 * 12;
inline constexpr double kVnniDotOpsPerIteration = 128.0 * 12;

// Sum of src[0, n): streaming reads with independent accumulators.
float read_loop_ref(const float* src, size_t n);
float read_loop_avx2(const float* src, size_t n);
float read_loop_avx512(const float* src, size_t n);
// The same sum, read as `n_streams` (2, 4 or 8; any other count reads one stream, as read_loop) equal parts side
// by side, a line or two of each per round: more streams for the prefetchers, the DRAM roof's other patterns.
float read_streams_loop_ref(const float* src, size_t n, int n_streams);
float read_streams_loop_avx2(const float* src, size_t n, int n_streams);
float read_streams_loop_avx512(const float* src, size_t n, int n_streams);

// dst[0, n) = -src[0, n) (in place when dst == src), and dst = a + b: the read-and-write patterns of the row ops,
// with plain stores as theirs.
void read_write_loop_ref(const float* src, float* dst, size_t n);
void read_write_loop_avx2(const float* src, float* dst, size_t n);
void read_write_loop_avx512(const float* src, float* dst, size_t n);
void read2_write_loop_ref(const float* a, const float* b, float* dst, size_t n);
void read2_write_loop_avx2(const float* a, const float* b, float* dst, size_t n);
void read2_write_loop_avx512(const float* a, const float* b, float* dst, size_t n);

// One ISA's loops and the work of one fma_loop round. Table: best ISA first, the reference last (kernel_table.h).
struct RoofKernels {
  double flops_per_iteration;
  float (*fma_loop)(long iterations);
  float (*read_loop)(const float* src, size_t n);
  float (*read_streams_loop)(const float* src, size_t n, int n_streams);
  void (*read_write_loop)(const float* src, float* dst, size_t n);
  void (*read2_write_loop)(const float* a, const float* b, float* dst, size_t n);
};
std::span<const ops::KernelEntry<RoofKernels>> roof_kernels();

// Peak FP32 GFLOP/s of `isa` on `n_threads` threads (best of `reps` runs of `iterations` rounds per thread).
double measure_fma_gflops(Isa isa, int n_threads, long iterations, int reps);
// Peak BF16 GFLOP/s (vdpbf16ps) and int8 GOP/s (vpdpbusd: 2 ops per multiply-add) on `n_threads` threads, the
// same method as measure_fma_gflops. Throw sqrtdk::Error if the CPU lacks avx512_bf16 / avx512_vnni.
double measure_bf16_dot_gflops(int n_threads, long iterations, int reps);
double measure_vnni_dot_gops(int n_threads, long iterations, int reps);
// Read GB/s on `n_threads` threads over a `bytes` array, each thread summing its own contiguous share (as a decode
// GEMM's thread streams its own weight panels). The array is first touched by the threads that read it; each of the
// `reps` timed runs reads it `passes` times (passes > 1 for cache-resident arrays, too quick to time in one pass);
// best of `reps`.
double measure_read_gbs(int n_threads, size_t bytes, int reps, int passes = 1);

// The DRAM read roof: read GB/s over a DRAM-sized `bytes` array, each thread's share read as 1, 2, 4 and 8 streams
// side by side (kDramReadStreams, read_streams_loop), `rounds` runs of each, interleaved; the best run of any.
// One stream is not the most the hardware reads: on the AMD EPYC Zen 5 VM (2026-12-05) one thread's single stream
// read 32-36 GB/s while a cold decode attention (K and V of several heads at once) read 38-41, "above the roof".
inline constexpr int kDramReadStreams[] = {1, 2, 4, 8};
double measure_dram_read_gbs(int n_threads, size_t bytes, int rounds);
// One stream count of it, best of `reps` (bench-machine's per-count rows).
double measure_read_streams_gbs(int n_threads, size_t bytes, int reps, int streams);

// How an op moves its data, for a bandwidth roof of the same mix of reads and writes. A read roof is not the roof
// of an op that also writes: on the AMD EPYC Zen 5 VM (2026-12-04) one thread read DRAM at 42-47 GB/s, and
// rms_norm's reads + writes ran at 46-48 (an in-place RoPE at 67-70), "above the roof".
//   read:                one array, read (a sum; the GEMM's weights, a decode step's model)
//   read_write_in_place: one array, each element read then written back (RoPE)
//   read_write:          one array read, another written (the norms, GELU, SiLU)
//   read2_write:         two arrays read, a third written (the residual add, SwiGLU)
enum class Access { read, read_write_in_place, read_write, read2_write };
inline constexpr Access kAccesses[] = {Access::read, Access::read_write_in_place, Access::read_write,
                                       Access::read2_write};
const char* access_name(Access access);  // "read", "read+write in place", "read+write", "2 reads+write"
int access_arrays(Access access);         // distinct arrays: 1, 1, 2, 3
int access_touches(Access access);        // bytes counted per byte of one array: reads + writes: 1, 2, 2, 3
// GB/s of `access` on `n_threads` threads over a working set of `bytes` (all its arrays together, each
// bytes / access_arrays), counted as the row ops count theirs: every byte read plus every byte written (a write's
// line fill, where the CPU reads before it writes, is not counted). Each thread streams its own contiguous share
// of every array, first touched by that thread; `passes` and best of `reps` as measure_read_gbs (read: the same).
double measure_access_gbs(Access access, int n_threads, size_t bytes, int reps, int passes = 1);

// Data cache capacities in bytes (0: not reported). l1d and l2 are per core, l3 is the whole L3 one core sees.
// source: where they came from ("sysfs", "CPUID leaf 4", "CPUID 0x8000001D", "CPUID 0x80000005/6", "sysfs +
// CPUID ...", or "not reported").
struct CacheSizes {
  size_t l1d = 0, l2 = 0, l3 = 0;
  const char* source = "not reported";
};
// Reads index*/{level,type,size} under `sysfs_dir` (Linux: /sys/devices/system/cpu/cpu0/cache); a missing or
// unreadable directory gives zeros.
CacheSizes sysfs_cache_sizes(const std::string& sysfs_dir = "/sys/devices/system/cpu/cpu0/cache");

// The registers of one CPUID query (leaf in eax, subleaf in ecx).
struct CpuidRegs {
  uint32_t eax = 0, ebx = 0, ecx = 0, edx = 0;
};
using CpuidQuery = std::function<CpuidRegs(uint32_t leaf, uint32_t subleaf)>;
// The cache sizes CPUID describes, decoded from `cpuid` (a function, so tests can feed a recorded CPU):
//   - Intel and others: the deterministic cache parameters of leaf 4 (ways × partitions × line × sets);
//   - AMD / Hygon: leaf 0x8000001D (the same format) when TOPOEXT says it is there, else the legacy
//     0x80000005 (L1d) and 0x80000006 (L2) and no L3: VMs that hide TOPOEXT (the Zen 5 VM of 2026-12-03 does)
//     make up the legacy L3 field (that one says 508 MiB).
CacheSizes cache_sizes_from_cpuid(const CpuidQuery& cpuid);
// cache_sizes_from_cpuid on this CPU (zeros off x86).
CacheSizes cpuid_cache_sizes();
// This machine's caches: sysfs, and CPUID for every level sysfs does not report (a VM or container may have no
// /sys/devices/system/cpu/cpu0/cache: the Zen 5 VM of 2026-12-03 had none, and the GEMM blocking fell back to
// assumed sizes). Detected on the first call; later calls return the same.
CacheSizes detect_cache_sizes();

// Buffer sizes of the read probes at `n_threads` threads (the whole array, over all threads); 0: the level cannot be
// probed apart from the one above it (not reported, or too small beside it).
//   L2: half of each thread's L2 (the rest holds code, stack and whatever the L1 evicts).
//   L3: 4x the threads' L2s together, at most half the L3: past the L2s, so it streams from L3.
//   DRAM: twice the L3, at least 256 MiB and at most 1 GiB.
size_t l2_probe_bytes(const CacheSizes& caches, int n_threads);
size_t l3_probe_bytes(const CacheSizes& caches, int n_threads);
size_t dram_probe_bytes(const CacheSizes& caches);
// An L3 that neither sysfs nor CPUID reports (a VM that hides it, or makes its size up: the Zen 5 VM of 2026-12-03
// has a 32 MiB L3 per CCD and reports none), found by reading: without it every working set past the L2s is set
// against DRAM, and ops that run from the L3 read "above the DRAM roof".
//   l3_sweep_bytes: the working sets to read, 4x the threads' L2s together, doubling, up to 128 MiB (past any L3
//     a 2-core VM slice sees whole, and under the 256 MiB DRAM probe); none when the L2 is not known.
//   l3_from_read_sweep: given each size's read GB/s (ascending sizes) and the DRAM figure, the largest size that
//     read at least kL3OverDram times DRAM with every smaller size too; 0 when the first did not (no L3 to find).
// The capacity is rounded down to the last size that fit: a working set is never set against an L3 roof it
// overflows (at worst one between that size and the true capacity is set against DRAM, as with no L3).
inline constexpr double kL3OverDram = 1.5;
std::vector<size_t> l3_sweep_bytes(const CacheSizes& caches, int n_threads);
size_t l3_from_read_sweep(const std::vector<std::pair<size_t, double>>& gbs_by_bytes, double dram_gbs);

// Passes over a `bytes` probe per timed run so that one run reads at least 64 MiB: a few ms, timeable, and short
// enough that a best-of-15 finds runs no other process interrupted (at a load average of 11 on this 2-core VM,
// best of 5 runs of 256 MiB read the L3 at 14-18 GB/s; best of 40 runs of 64 MiB at 24-26).
int read_probe_passes(size_t bytes);

}  // namespace sqrtdk::roofs
