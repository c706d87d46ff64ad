// Shared benchmark helpers for perf/bench_*.cpp: timing with medians, the machine's measured roofs (FMA peak per
// ISA and thread count, BF16 and int8 dot-product peaks where the ISA has them; L2, L3 and DRAM read bandwidth), shares of a roof that are never above 100%, and output as
// a readable table or one JSON document (--json) that records the machine, the roofs and the timing method.
//
// Figures are measured in the same run as the comparisons they anchor (DEVELOPERS.md: ratios measured in one run).
#pragma once

#include "ops/base/kernel_table.h"
#include "ops/base/roofs.h"

#include <sqrtdk/isa.h>
#include <sqrtdk/profiler.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstddef>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace sqrtdk::perf {

// Common flags of every benchmark: --json, --smoke (one tiny run, for CI), --reps N, --threads LIST.
struct BenchArgs {
  bool json = false;
  bool smoke = false;
  int reps = 7;
  std::vector<int> threads = {1, 2};
  std::vector<std::string> rest;  // arguments the benchmark parses itself
  // Parses argv; prints --help text (`usage` first) and exits 0 on --help, exits 1 on a bad value.
  static BenchArgs parse(int argc, char** argv, const std::string& usage);
};

double now_seconds();

// The model file benchmarks default to: SQRTDK_MODEL if set, else the bundled <build>/models/default.sqdk.
std::string default_model_path();

// Waits, up to `limit_seconds`, until every other thread of this process sleeps; returns the seconds waited. A
// library's worker threads keep spinning for a while after its call returns (libgomp's GOMP_SPINCOUNT for oneDNN,
// OpenBLAS's thread timeout), and on a 2-core machine a spinning worker holds the core the next contender's
// threads need: interleaved benchmarks call this before each sample, so every contender starts on idle cores.
double wait_for_idle_threads(double limit_seconds = 0.5);

// Runs `fn` once to warm up, then `reps` times; returns the median seconds per run. If a run is shorter than
// `min_seconds`, it is repeated within one timed sample and the mean taken (so tiny kernels time accurately).
double median_seconds(const std::function<void()>& fn, int reps, double min_seconds = 0.01);

// Median seconds per call of each of fns, timed in turn (fns[0], fns[1], ..., fns[0], ...) so that noise from
// other processes on this shared machine hits all alike; each sample waits for idle threads first, makes one
// untimed call (it wakes the contender's own sleeping workers) and then repeats a call enough times to last ≥ 5 ms.
std::vector<double> interleaved_medians(const std::vector<std::function<void()>>& fns, int reps);

// Median seconds of single calls of each of fns, `reps` each, every call after 96 MiB (3× the L3) has been
// written: the data fn reads comes from DRAM, as in a forward pass where the other layers' weights and K/V caches
// evict it between uses. The contenders take their samples in turn (as interleaved_medians; the first of each round
// rotates), so that a change in the machine's load falls on all alike.
// wake_threads > 1: after each flush, wakes the calling thread's sqrtdk pool helpers (untimed), since the flush
// outlasts their spin and a cold call right after would also time an idle vCPU's wake-up, which a forward pass's
// back-to-back ops do not pay (ops/base/thread_pool.h, wake_helpers). For contenders that run on our pool.
std::vector<double> interleaved_medians_cold(const std::vector<std::function<void()>>& fns, int reps,
                                             int wake_threads = 0);

double median(std::vector<double> v);

// The roofs of `isa` at each thread count, measured now (the engine's measure_machine_roofs: FMA peak, L2, L3 and
// DRAM read bandwidth on that many threads; a quick, rough pass with smoke). Every benchmark measures its own.
std::map<int, MachineRoofs> measure_roofs(Isa isa, const std::vector<int>& threads, bool smoke);

// A dot-product peak for a table cell (MachineRoofs::bf16_peak_gflops, int8_peak_gops): the figure, or "absent"
// when the roofs' ISA or the CPU has no such instruction (0).
std::string peak_cell(double peak);

// A share of a roof for a table cell: "83%", "roof?" when above 100% (the roof is wrong: share_of_roof), "-" when
// there is no roof; and for JSON: the percentage, or null when none can be given.
std::string pct_cell(const RoofShare& share);
nlohmann::json pct_json(const RoofShare& share);
// The read roof for data of `bytes` re-read call after call with warm caches, and `gbs`'s share of it: the level
// that holds the data (read_roof_for), never DRAM for data a cache holds.
RoofShare share_of_read_roof(double gbs, double bytes, const MachineRoofs& roofs, ReadRoof* roof_used = nullptr);

// The bandwidth roofs of the access patterns that write (roofs::Access: an op that reads and writes is not bounded
// by a read roof), per memory level, on one thread count: measured with the read probes' sizes, threads and
// best-of counts (measure_machine_roofs), each pattern's arrays together as large as the read probe. The read
// pattern's entries are the MachineRoofs' read roofs they were measured beside. 0: not measured (L1, or a level
// the read roofs have none for).
struct AccessRoofs {
  int n_threads = 1;
  std::map<std::pair<roofs::Access, MemoryLevel>, double> gbs;
  double at(roofs::Access access, MemoryLevel level) const;
};
// For each of `roofs`' thread counts (their caches, including an L3 found by reading); quick with smoke. Prints
// each thread count's figures to stderr, as measure_roofs.
std::map<int, AccessRoofs> measure_access_roofs(const std::map<int, MachineRoofs>& roofs, bool smoke);
// The roof of an op that moves data by `access` over a `working_set_bytes` working set (all its arrays)
// re-touched call after call with warm caches: the simplest loop of that pattern over arrays of the same total
// size on `n_threads` threads, measured now (best of the read probes' counts: 15 below 64 MiB, else enough for
// 4 GiB and at least 3; three with smoke). The same size, not the level's probe size: a working set just over a
// cache, or a few times an L3 with a non-LRU policy, still hits it, and a level's probe would then sit below it.
double measure_access_roof_at(roofs::Access access, int n_threads, double working_set_bytes, bool smoke);
// {"1": {"read+write": {"L2": GB/s, "L3": ..., "DRAM": ...}, ...}, "2": ...}: null where not measured.
nlohmann::json access_roofs_json(const std::map<int, AccessRoofs>& access_roofs);

// One entry of an op's kernel table, as a benchmark case: the ISA to pass to the op and the kernel's name to report.
struct KernelCase {
  Isa isa;
  const char* name;
};
// The entries of an op's table (ops/<op>/<op>_kernels.h) this CPU runs, reference first: benchmarks quote speedups
// against it, so it is timed before the kernels compared with it.
template <class Kernels>
std::vector<KernelCase> kernel_cases(std::span<const ops::KernelEntry<Kernels>> table) {
  std::vector<KernelCase> out;
  for (auto it = table.rbegin(); it != table.rend(); ++it)
    if (cpu_supports(it->isa)) out.push_back({it->isa, it->name});
  return out;
}

// A simple fixed-width text table.
class Table {
 public:
  explicit Table(std::vector<std::string> header) : header_(std::move(header)) {}
  void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  size_t rows() const { return rows_.size(); }
  // Replaces one cell of an added row (a share of a roof filled in once the roof's second measurement is in).
  void set(size_t row, size_t column, std::string cell) { rows_.at(row).at(column) = std::move(cell); }
  std::string str() const;

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
};

std::string fmt(double v, int precision = 1);

// Machine description for JSON output: CPU model name, logical core count, best ISA, date, the thread counts run,
// the timing method (`timing`: e.g. "wall-clock median of 7 runs, warm caches") and the roofs used (empty for a
// benchmark that quotes none; the engine's machine_json).
nlohmann::json machine_json(const std::map<int, MachineRoofs>& roofs, const std::string& timing,
                            const std::vector<int>& threads);
// Prints busy_host_warning's line to stderr ("<bench>: warning: busy host: ...") when the roofs say something else
// held cores while they were measured; the JSON's machine record carries it as "host_busy".
void warn_if_host_busy(const std::map<int, MachineRoofs>& roofs, const char* bench);

}  // namespace sqrtdk::perf
