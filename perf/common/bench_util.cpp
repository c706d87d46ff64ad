#include "perf/common/bench_util.h"

#include "ops/base/aligned_buffer.h"
#include "ops/base/roofs.h"
#include "ops/base/thread_pool.h"

#include <sqrtdk/error.h>

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <thread>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <sstream>
#include <thread>

namespace sqrtdk::perf {

BenchArgs BenchArgs::parse(int argc, char** argv, const std::string& usage) {
  BenchArgs args;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](const char* flag) -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s: %s needs a value\n", argv[0], flag);
        std::exit(1);
      }
      return argv[++i];
    };
    if (a == "--help" || a == "-h") {
      std::printf("%s\nCommon flags:\n  --json          one JSON document on stdout instead of a table\n"
                  "  --smoke         one tiny run of each case (what CI runs so the benchmark cannot rot)\n"
                  "  --reps N        timed repetitions per case; the median is reported (default 7)\n"
                  "  --threads LIST  comma-separated thread counts (default 1,2)\n",
                  usage.c_str());
      std::exit(0);
    } else if (a == "--json") {
      args.json = true;
    } else if (a == "--smoke") {
      args.smoke = true;
    } else if (a == "--reps") {
      args.reps = std::atoi(value("--reps").c_str());
      if (args.reps < 1) {
        std::fprintf(stderr, "%s: --reps must be >= 1\n", argv[0]);
        std::exit(1);
      }
    } else if (a == "--threads") {
      args.threads.clear();
      std::stringstream ss(value("--threads"));
      for (std::string t; std::getline(ss, t, ',');) {
        int n = std::atoi(t.c_str());
        if (n < 1) {
          std::fprintf(stderr, "%s: bad thread count '%s'\n", argv[0], t.c_str());
          std::exit(1);
        }
        args.threads.push_back(n);
      }
    } else {
      args.rest.push_back(a);
    }
  }
  if (args.smoke) {
    args.reps = 1;
    args.threads = {1};
  }
  return args;
}

std::string default_model_path() {
  if (const char* env = std::getenv("SQRTDK_MODEL"); env && env[0]) return env;
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? "models/default.sqdk" : (exe.parent_path().parent_path() / "models" / "default.sqdk").string();
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double wait_for_idle_threads(double limit_seconds) {
  const double t0 = now_seconds();
  const std::string self = std::to_string(static_cast<long>(::gettid()));
  for (;;) {
    // /proc/self/task/<tid>/stat: "tid (comm) state ...": state R is running or runnable (a spinning worker).
    bool running = false;
    for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
      if (task.path().filename() == self) continue;
      std::ifstream stat(task.path() / "stat");
      std::string line;
      std::getline(stat, line);
      const size_t close = line.rfind(')');
      if (close != std::string::npos && close + 2 < line.size() && line[close + 2] == 'R') running = true;
    }
    const double waited = now_seconds() - t0;
    if (!running || waited >= limit_seconds) return waited;
    std::this_thread::sleep_for(std::chrono::microseconds(500));
  }
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double median_seconds(const std::function<void()>& fn, int reps, double min_seconds) {
  wait_for_idle_threads();  // a previous contender's spinning workers must not hold this one's cores
  double t0 = now_seconds();
  fn();  // warm-up: faults in buffers, warms caches and the thread pools
  const double once = now_seconds() - t0;
  const int inner = once >= min_seconds ? 1 : static_cast<int>(std::min(1000.0, min_seconds / std::max(once, 1e-9)));
  std::vector<double> samples;
  for (int r = 0; r < reps; ++r) {
    t0 = now_seconds();
    for (int i = 0; i < inner; ++i) fn();
    samples.push_back((now_seconds() - t0) / inner);
  }
  return median(samples);
}

// Median seconds per call of each of fns, timed in turn (fns[0], fns[1], ..., fns[0], ...) so that noise from
// other processes on this shared machine hits all alike. Each sample repeats a call enough times to last ≥ 5 ms,
// after the other contenders' threads went idle and one untimed call.
std::vector<double> interleaved_medians(const std::vector<std::function<void()>>& fns, int reps) {
  auto inner_count = [](const std::function<void()>& fn) {
    wait_for_idle_threads();  // timed like a sample: a peer's spinning workers would make fn look slower
    fn();                     // warm-up: faults in scratch and outputs, wakes the thread pools
    const double t0 = now_seconds();
    fn();
    const double once = now_seconds() - t0;
    return std::max(1, static_cast<int>(std::min(1000.0, 0.005 / std::max(once, 1e-9))));
  };
  std::vector<int> inner;
  for (const auto& fn : fns) inner.push_back(inner_count(fn));
  auto sample = [](const std::function<void()>& fn, int n) {
    wait_for_idle_threads();  // the previous contender's spinning workers must not hold this one's cores
    // One untimed call wakes this contender's sleeping workers (the wait above put them to sleep: ~60–130 us per
    // wake-up on this VM, 2026-12-03, a tenth of a 1 ms call); the timed calls then run back to back, as a forward
    // pass's GEMMs do. Every contender gets the same.
    fn();
    const double t0 = now_seconds();
    for (int i = 0; i < n; ++i) fn();
    return (now_seconds() - t0) / n;
  };
  std::vector<std::vector<double>> samples(fns.size());
  for (int r = 0; r < reps; ++r)
    for (size_t i = 0; i < fns.size(); ++i) samples[i].push_back(sample(fns[i], inner[i]));
  std::vector<double> out;
  for (auto& s : samples) out.push_back(median(s));
  return out;
}

std::vector<double> interleaved_medians_cold(const std::vector<std::function<void()>>& fns, int reps,
                                             int wake_threads) {
  wait_for_idle_threads();
  // Written before each timed call: twice the L3 (at least 96 MiB: 3x a 32 MiB L3 when sysfs says nothing), so
  // nothing fn reads survives in any cache. 96 MiB fixed was a third of this VM's 300 MiB L3.
  static AlignedBuffer<float> evict(
      std::max(size_t{96} << 20, 2 * roofs::detect_cache_sizes().l3) / sizeof(float));
  auto flush = [] {
    for (size_t i = 0; i < evict.size(); i += 16) evict[i] = static_cast<float>(i);
  };
  for (const auto& fn : fns) fn();  // warm-up: faults in buffers and starts the thread pools
  std::vector<std::vector<double>> samples(fns.size());
  for (int r = 0; r < reps; ++r) {
    // In turn, the first contender of each round rotating, so drift in the machine's load falls on all alike.
    for (size_t k = 0; k < fns.size(); ++k) {
      const size_t i = (k + static_cast<size_t>(r)) % fns.size();
      flush();
      sqrtdk::wake_pool_helpers(wake_threads);  // untimed: the flush put our pool's helpers to sleep (header)
      const double t0 = now_seconds();
      fns[i]();
      samples[i].push_back(now_seconds() - t0);
    }
  }
  std::vector<double> out;
  for (auto& v : samples) out.push_back(median(v));
  return out;
}

std::map<int, MachineRoofs> measure_roofs(Isa isa, const std::vector<int>& threads, bool smoke) {
  std::map<int, MachineRoofs> out;
  for (int t : threads) {
    out[t] = measure_machine_roofs(isa, t, smoke);
    std::fprintf(stderr,
                 "roofs, %d thread(s), %s: FMA peak %.1f GFLOP/s, BF16 peak %s GFLOP/s, int8 peak %s GOP/s; read "
                 "DRAM %.1f, L3 %.1f, L2 %.1f GB/s (%s)\n",
                 t, isa_name(isa), out[t].peak_gflops, peak_cell(out[t].bf16_peak_gflops).c_str(),
                 peak_cell(out[t].int8_peak_gops).c_str(), out[t].dram_gbs, out[t].l3_gbs, out[t].l2_gbs,
                 out[t].source.c_str());
  }
  return out;
}

std::string peak_cell(double peak) { return peak > 0 ? fmt(peak) : "absent"; }

std::string pct_cell(const RoofShare& share) {
  if (share.ok) return fmt(share.percent, 0) + "%";
  return share.text.rfind("above", 0) == 0 ? "roof?" : "-";
}

nlohmann::json pct_json(const RoofShare& share) { return share.ok ? nlohmann::json(share.percent) : nlohmann::json(); }

RoofShare share_of_read_roof(double gbs, double bytes, const MachineRoofs& roofs, ReadRoof* roof_used) {
  const ReadRoof roof = read_roof_for(roofs, bytes);
  if (roof_used) *roof_used = roof;
  return share_of_roof(gbs, roof.gbs, std::string(memory_level_name(roof.level)) + " read");
}

double AccessRoofs::at(roofs::Access access, MemoryLevel level) const {
  const auto it = gbs.find({access, level});
  return it == gbs.end() ? 0 : it->second;
}

std::map<int, AccessRoofs> measure_access_roofs(const std::map<int, MachineRoofs>& roofs, bool smoke) {
  std::map<int, AccessRoofs> out;
  for (const auto& [t, r] : roofs) {
    AccessRoofs& a = out[t];
    a.n_threads = t;
    roofs::CacheSizes caches;
    caches.l1d = r.l1d_bytes;
    caches.l2 = r.l2_bytes;
    caches.l3 = r.l3_bytes;  // an L3 found by reading included: the probe then sits where the read one did
    // The read probes' sizes, reps and passes (measure_machine_roofs), so the patterns compare like with like.
    const size_t l2 = roofs::l2_probe_bytes(caches, t), l3 = roofs::l3_probe_bytes(caches, t);
    const size_t dram = smoke ? size_t{64} << 20 : roofs::dram_probe_bytes(caches);
    const int dram_reps = smoke ? 1 : static_cast<int>(std::max<size_t>(3, (size_t{4} << 30) / dram));
    const int cache_reps = smoke ? 1 : 15;
    a.gbs[{roofs::Access::read, MemoryLevel::l2}] = r.l2_gbs;
    a.gbs[{roofs::Access::read, MemoryLevel::l3}] = r.l3_gbs;
    a.gbs[{roofs::Access::read, MemoryLevel::dram}] = r.dram_gbs;
    std::string line;
    for (const roofs::Access access : roofs::kAccesses) {
      if (access == roofs::Access::read) continue;
      if (l2 && r.l2_gbs > 0)
        a.gbs[{access, MemoryLevel::l2}] =
            roofs::measure_access_gbs(access, t, l2, cache_reps, smoke ? 1 : roofs::read_probe_passes(l2));
      if (l3 && r.l3_gbs > 0)
        a.gbs[{access, MemoryLevel::l3}] =
            roofs::measure_access_gbs(access, t, l3, cache_reps, smoke ? 1 : roofs::read_probe_passes(l3));
      a.gbs[{access, MemoryLevel::dram}] = roofs::measure_access_gbs(access, t, dram, dram_reps);
      line += std::string("; ") + roofs::access_name(access) + " L2 " + fmt(a.at(access, MemoryLevel::l2)) +
              ", L3 " + fmt(a.at(access, MemoryLevel::l3)) + ", DRAM " + fmt(a.at(access, MemoryLevel::dram));
    }
    std::fprintf(stderr, "access roofs, %d thread(s), GB/s of reads + writes%s\n", t, line.c_str());
  }
  return out;
}

double measure_access_roof_at(roofs::Access access, int n_threads, double working_set_bytes, bool smoke) {
  const size_t bytes = static_cast<size_t>(working_set_bytes);
  // As measure_machine_roofs: DRAM-sized sets streamed once per rep (enough reps for 4 GiB), cache-sized ones
  // read_probe_passes times per rep (64 MiB of traffic, so the timer's resolution does not count), best of 15.
  // Smoke keeps the passes (a 6 KiB set streamed once would time the clock) and runs three reps.
  const bool beyond_caches = bytes >= (size_t{64} << 20);
  const int passes = beyond_caches ? 1 : roofs::read_probe_passes(bytes);
  const int reps = smoke ? 3 : beyond_caches ? static_cast<int>(std::max<size_t>(3, (size_t{4} << 30) / bytes)) : 15;
  if (access == roofs::Access::read && beyond_caches)  // as the DRAM read roof: every stream count
    return roofs::measure_dram_read_gbs(n_threads, bytes, smoke ? 1 : std::max(2, reps / 2));
  return roofs::measure_access_gbs(access, n_threads, bytes, reps, passes);
}

nlohmann::json access_roofs_json(const std::map<int, AccessRoofs>& access_roofs) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [t, a] : access_roofs) {
    nlohmann::json per_thread = nlohmann::json::object();
    for (const roofs::Access access : roofs::kAccesses) {
      nlohmann::json levels = nlohmann::json::object();
      for (const MemoryLevel level : {MemoryLevel::l2, MemoryLevel::l3, MemoryLevel::dram}) {
        const double v = a.at(access, level);
        levels[memory_level_name(level)] = v > 0 ? nlohmann::json(v) : nlohmann::json();
      }
      per_thread[roofs::access_name(access)] = levels;
    }
    out[std::to_string(t)] = per_thread;
  }
  return out;
}

std::string Table::str() const {
  std::vector<size_t> width(header_.size(), 0);
  auto widen = [&](const std::vector<std::string>& row) {
    for (size_t i = 0; i < row.size() && i < width.size(); ++i) width[i] = std::max(width[i], row[i].size());
  };
  widen(header_);
  for (const auto& r : rows_) widen(r);
  std::ostringstream out;
  auto line = [&](const std::vector<std::string>& row) {
    out << "|";
    for (size_t i = 0; i < width.size(); ++i) {
      std::string cell = i < row.size() ? row[i] : "";
      out << " " << cell << std::string(width[i] - cell.size(), ' ') << " |";
    }
    out << "\n";
  };
  line(header_);
  out << "|";
  for (size_t w : width) out << std::string(w + 2, '-') << "|";
  out << "\n";
  for (const auto& r : rows_) line(r);
  return out.str();
}

std::string fmt(double v, int precision) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", precision, v);
  return buf;
}

nlohmann::json machine_json(const std::map<int, MachineRoofs>& roofs, const std::string& timing,
                            const std::vector<int>& threads) {
  std::vector<MachineRoofs> list;
  for (const auto& [t, r] : roofs) list.push_back(r);
  nlohmann::json j = nlohmann::json::parse(sqrtdk::machine_json(list, timing));
  char date[32];
  std::time_t t = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%d", std::gmtime(&t));
  j["threads"] = threads;
  j["best_isa"] = isa_name(best_isa());
  j["date"] = date;
  return j;
}

void warn_if_host_busy(const std::map<int, MachineRoofs>& roofs, const char* bench) {
  std::vector<MachineRoofs> list;
  for (const auto& [t, r] : roofs) list.push_back(r);
  if (const std::string warning = busy_host_warning(list); !warning.empty())
    std::fprintf(stderr, "%s: warning: %s\n", bench, warning.c_str());
}

}  // namespace sqrtdk::perf
