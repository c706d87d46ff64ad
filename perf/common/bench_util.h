// Shared benchmark helpers for perf/bench_*.cpp: timing with medians, the machine's measured roofs (FMA peak per
// ISA and thread count, DRAM read bandwidth), and output as a readable table or one JSON document (--json).
//
// Figures are measured in the same run as the comparisons they anchor (DEVELOPERS.md: ratios measured in one run).
#pragma once

#include "ops/base/kernel_table.h"

#include <sqrtdk/isa.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstddef>
#include <functional>
#include <span>
#include <string>
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

// Runs `fn` once to warm up, then `reps` times; returns the median seconds per run. If a run is shorter than
// `min_seconds`, it is repeated within one timed sample and the mean taken (so tiny kernels time accurately).
double median_seconds(const std::function<void()>& fn, int reps, double min_seconds = 0.01);

// Median of `reps` single calls, each after 96 MiB (3× the L3) has been written: the data fn reads comes from DRAM,
// as in a forward pass where the other layers' weights and K/V caches evict it between uses.
double median_seconds_cold(const std::function<void()>& fn, int reps);

double median(std::vector<double> v);

// Peak FP32 FMA GFLOP/s of `isa` with `n_threads` threads (independent-accumulator FMA loop; ref: scalar FMA loop).
double measure_fma_peak_gflops(Isa isa, int n_threads, bool smoke = false);
// DRAM read bandwidth in GB/s with `n_threads` threads (sums a 1 GiB array; 64 MiB with smoke).
double measure_read_bandwidth_gbs(int n_threads, bool smoke = false);

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
  std::string str() const;

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
};

std::string fmt(double v, int precision = 1);

// Machine description for JSON output: CPU model name, ISA, core count, date.
nlohmann::json machine_json();

}  // namespace sqrtdk::perf
