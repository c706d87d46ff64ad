// The profiler: aggregates OpEvents from a Session's observer and reports them against the machine's roofs.
#include <sqrtdk/error.h>
#include <sqrtdk/profiler.h>

#include "engine/src/profiler/roofs_cache.h"
#include "engine/src/runtime/machine_cache.h"
#include "ops/base/roofs.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <thread>


namespace sqrtdk {

namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown";
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

}  // namespace

MachineRoofs measure_machine_roofs(Isa isa, int n_threads, bool quick) {
  MachineRoofs r;
  r.isa = isa;
  r.n_threads = n_threads;
  roofs::CacheSizes caches = roofs::detect_cache_sizes();
  detect_cache_sizes(r);
  // Best of 5 runs of ~60 ms of FMAs (shorter runs read ~10% low, and a single VM hiccup inside a best-of-3 of
  // 15 ms runs once halved the 2-thread roof in `sqrtdk bench`).
  const long iterations = quick ? 1000000 : isa == Isa::ref ? 5000000 : 40000000;
  r.peak_gflops = roofs::measure_fma_gflops(isa, n_threads, iterations, quick ? 1 : 5);
  // 12 dot instructions per round against the FMA loop's 10: 30M rounds issue as many instructions as its 40M.
  const long dot_iterations = quick ? 1000000 : 30000000;
  if (isa >= Isa::avx512_bf16)
    r.bf16_peak_gflops = roofs::measure_bf16_dot_gflops(n_threads, dot_iterations, quick ? 1 : 5);
  if (isa >= Isa::avx512_vnni)
    r.int8_peak_gops = roofs::measure_vnni_dot_gops(n_threads, dot_iterations, quick ? 1 : 5);
  // Every read probe on the same n_threads threads as the engine will run, each thread streaming its own share.
  // The DRAM probe is twice the L3 (the 256 MiB it used to be is inside this VM's 300 MiB L3). Best of as many runs
  // as stream 4 GiB in all (16 of 256 MiB, 4 of 1 GiB): best of 3 of 256 MiB read 42-44 / 45-50 GB/s at 1 / 2
  // threads where best of 15 read 44-46 / 50-51 (Zen 5 VM, 2026-12-03), and decode then measured above the roof.
  // Each of those runs now reads one of kDramReadStreams patterns in turn (1, 2, 4, 8 streams per thread), at least
  // two runs of each (8 GiB at 1 GiB): a single stream read 32-36 GB/s on one Zen 5 thread where a decode
  // attention read 38-41 (2026-12-05).
  const size_t dram = quick ? size_t{64} << 20 : roofs::dram_probe_bytes(caches);
  const int rounds = quick ? 1 : static_cast<int>(std::max<size_t>(2, (size_t{2} << 30) / dram));
  r.dram_gbs = roofs::measure_dram_read_gbs(n_threads, dram, rounds);
  // The cache probes' runs are a few ms each: many of them, so the best is one no other process interrupted.
  const int cache_reps = quick ? 1 : 15;
  if (caches.l3 == 0 && !quick) {
    // No L3 reported: read growing working sets until one reads like DRAM (ops/base/roofs.h). Best of 7 per size:
    // about 0.1 s in all.
    std::vector<std::pair<size_t, double>> sweep;
    for (const size_t bytes : roofs::l3_sweep_bytes(caches, n_threads)) {
      sweep.emplace_back(bytes, roofs::measure_read_gbs(n_threads, bytes, 7, roofs::read_probe_passes(bytes)));
      if (sweep.back().second < roofs::kL3OverDram * r.dram_gbs) break;
    }
    caches.l3 = roofs::l3_from_read_sweep(sweep, r.dram_gbs);
    r.l3_bytes = caches.l3;
    r.l3_found_by_reading = caches.l3 != 0;
  }
  if (const size_t l3 = roofs::l3_probe_bytes(caches, n_threads))
    r.l3_gbs = roofs::measure_read_gbs(n_threads, l3, cache_reps, quick ? 1 : roofs::read_probe_passes(l3));
  if (const size_t l2 = roofs::l2_probe_bytes(caches, n_threads))
    r.l2_gbs = roofs::measure_read_gbs(n_threads, l2, cache_reps, quick ? 1 : roofs::read_probe_passes(l2));
  r.source = quick ? "measured (quick: a smoke run, not a roof)" : "measured";
  return r;
}

void detect_cache_sizes(MachineRoofs& roofs) {
  const roofs::CacheSizes caches = roofs::detect_cache_sizes();
  roofs.l1d_bytes = caches.l1d;
  roofs.l2_bytes = caches.l2;
  roofs.l3_bytes = caches.l3;
}

const char* memory_level_name(MemoryLevel level) {
  switch (level) {
    case MemoryLevel::l1: return "L1";
    case MemoryLevel::l2: return "L2";
    case MemoryLevel::l3: return "L3";
    case MemoryLevel::dram: return "DRAM";
  }
  return "?";
}

ReadRoof read_roof_for(const MachineRoofs& roofs, double working_set_bytes) {
  const double threads = std::max(1, roofs.n_threads);
  if (working_set_bytes <= threads * static_cast<double>(roofs.l1d_bytes)) return {MemoryLevel::l1, 0};
  if (working_set_bytes <= threads * static_cast<double>(roofs.l2_bytes)) return {MemoryLevel::l2, roofs.l2_gbs};
  if (working_set_bytes <= static_cast<double>(roofs.l3_bytes)) return {MemoryLevel::l3, roofs.l3_gbs};
  return {MemoryLevel::dram, roofs.dram_gbs};
}

RoofShare share_of_roof(double achieved, double roof, const std::string& roof_name) {
  RoofShare share;
  if (!(roof > 0)) {
    share.text = "no " + roof_name + " roof measured";
    return share;
  }
  const double percent = 100.0 * achieved / roof;
  // Printed with no decimals: 100.4% reads "100%", still not above the roof.
  if (percent >= 100.5) {
    share.text = "above the " + roof_name + " roof: roof under-measured?";
    return share;
  }
  share.ok = true;
  share.percent = percent;
  share.text = fmt("%.0f", percent) + "% of the " + roof_name + " roof";
  return share;
}

std::string machine_json(const std::vector<MachineRoofs>& roofs, const std::string& timing) {
  nlohmann::json j = {{"cpu", cpu_model()},
                      {"logical_cores", std::max(1u, std::thread::hardware_concurrency())},
                      {"timing", timing},
                      {"roofs", nlohmann::json::array()}};
  auto absent_as_null = [](double v) { return v > 0 ? nlohmann::json(v) : nlohmann::json(); };
  for (const MachineRoofs& r : roofs)
    j["roofs"].push_back({{"threads", r.n_threads}, {"isa", isa_name(r.isa)}, {"fma_peak_gflops", r.peak_gflops},
                          {"bf16_peak_gflops", absent_as_null(r.bf16_peak_gflops)},
                          {"int8_peak_gops", absent_as_null(r.int8_peak_gops)},
                          {"dram_read_gbs", r.dram_gbs}, {"l3_read_gbs", r.l3_gbs}, {"l2_read_gbs", r.l2_gbs},
                          {"l1d_bytes_per_core", r.l1d_bytes}, {"l2_bytes_per_core", r.l2_bytes},
                          {"l3_bytes", r.l3_bytes}, {"l3_found_by_reading", r.l3_found_by_reading},
                          {"source", r.source}});
  const std::string busy = busy_host_warning(roofs);
  j["host_busy"] = !busy.empty();
  if (!busy.empty()) j["host_busy_note"] = busy;
  return j.dump();
}

std::string busy_host_warning(const std::vector<MachineRoofs>& roofs) {
  std::string warning;
  for (const MachineRoofs& one : roofs) {
    if (one.n_threads != 1 || !(one.peak_gflops > 0)) continue;
    for (const MachineRoofs& many : roofs) {
      if (many.n_threads <= 1 || many.isa != one.isa) continue;
      const double scaling = many.peak_gflops / one.peak_gflops;
      if (scaling >= kBusyHostScaling * many.n_threads) continue;
      warning += std::string(warning.empty() ? "" : "; ") + "the " + std::to_string(many.n_threads) +
                 "-thread FMA peak measured " + fmt("%.2f", scaling) + "x the 1-thread one (" +
                 fmt("%.0f", many.peak_gflops) + " vs " + fmt("%.0f", one.peak_gflops) + " GFLOP/s, " +
                 isa_name(one.isa) + ")";
    }
  }
  if (!warning.empty())
    warning = "busy host: " + warning +
              ": something else (another process, or another tenant of a shared VM) held some of the cores while "
              "the roofs were measured; figures at more than one thread from this run are not comparable with a "
              "quiet run's";
  return warning;
}

namespace profiler_detail {

std::string roofs_cache_key(Isa isa, int n_threads) {
  return "v5|" + machine_cache::cpu_identity() + "|" + isa_name(isa) + "|" + std::to_string(n_threads);
}

std::string roofs_noise(const MachineRoofs& a, const MachineRoofs& b, double load_average, int n_cores,
                        int n_threads) {
  auto spread = [](double x, double y) { return std::max(x, y) > 0 ? std::fabs(x - y) / std::max(x, y) : 1.0; };
  const double peak = spread(a.peak_gflops, b.peak_gflops), dram = spread(a.dram_gbs, b.dram_gbs);
  // A cache level neither measurement has (0 and 0) is not noise; one that only one of them has is.
  auto level = [&](double x, double y) { return x == 0 && y == 0 ? 0.0 : spread(x, y); };
  const double l3 = level(a.l3_gbs, b.l3_gbs), l2 = level(a.l2_gbs, b.l2_gbs);
  // The dot-product peaks likewise: 0 and 0 is an ISA or CPU without them.
  const double bf16 = level(a.bf16_peak_gflops, b.bf16_peak_gflops), int8 = level(a.int8_peak_gops, b.int8_peak_gops);
  std::string why;
  if (peak > 0.10 || dram > 0.10)
    why = "two measurements differ by " + fmt("%.0f", 100 * peak) + "% (FMA peak) and " + fmt("%.0f", 100 * dram) +
          "% (DRAM read)";
  if (l3 > 0.10 || l2 > 0.10)
    why += std::string(why.empty() ? "two measurements differ by " : "; by ") + fmt("%.0f", 100 * l3) +
           "% (L3 read) and " + fmt("%.0f", 100 * l2) + "% (L2 read)";
  if (bf16 > 0.10 || int8 > 0.10)
    why += std::string(why.empty() ? "two measurements differ by " : "; by ") + fmt("%.0f", 100 * bf16) +
           "% (BF16 peak) and " + fmt("%.0f", 100 * int8) + "% (int8 peak)";
  if (load_average >= 0 && n_cores - load_average < n_threads - 0.25)
    why += std::string(why.empty() ? "" : "; ") + "load average " + fmt("%.2f", load_average) + " on " +
           std::to_string(n_cores) + " cores leaves fewer than " + std::to_string(n_threads) + " free";
  return why;
}

}  // namespace profiler_detail

namespace {

double load_average_1min() {  // -1 if unknown
  std::ifstream in("/proc/loadavg");
  double v = -1;
  if (!(in >> v)) return -1;
  return v;
}


}  // namespace

MachineRoofs better_roofs(const MachineRoofs& a, const MachineRoofs& b) {
  MachineRoofs r = a;
  if (a.l3_bytes != b.l3_bytes) {
    // Two reading sweeps that found different L3s: the smaller, with its roof.
    if (b.l3_bytes < a.l3_bytes) {
      r.l3_bytes = b.l3_bytes;
      r.l3_found_by_reading = b.l3_found_by_reading;
      r.l3_gbs = b.l3_gbs;
    }
  } else {
    r.l3_gbs = std::max(a.l3_gbs, b.l3_gbs);
  }
  r.peak_gflops = std::max(a.peak_gflops, b.peak_gflops);
  r.bf16_peak_gflops = std::max(a.bf16_peak_gflops, b.bf16_peak_gflops);
  r.int8_peak_gops = std::max(a.int8_peak_gops, b.int8_peak_gops);
  r.dram_gbs = std::max(a.dram_gbs, b.dram_gbs);
  r.l2_gbs = std::max(a.l2_gbs, b.l2_gbs);
  return r;
}

MachineRoofs cached_machine_roofs(Isa isa, int n_threads, const std::function<void()>& before_measuring) {
  namespace fs = std::filesystem;
  const fs::path dir = machine_cache::folder();
  const fs::path file = dir / "roofs.json";
  // "v5": entries without the BF16 / int8 dot-product peaks (v4), without the cache-level roofs, or with the DRAM
  // probe inside a large L3 (v3), before the quiet-machine rule (v2 and older: possibly measured on a busy machine,
  // and before v2 with an FMA loop GCC had merged, reading ~25% high) are ignored and re-measured. The CPU is named
  // with its family/model/stepping (entries keyed by the model name alone, which two Xeons shared, are ignored).
  const std::string key = profiler_detail::roofs_cache_key(isa, n_threads);
  nlohmann::json cache = nlohmann::json::object();
  if (!dir.empty()) {
    cache = machine_cache::read_object(file);
    try {
      if (cache.contains(key)) {
        const auto& e = cache[key];
        MachineRoofs r;
        r.isa = isa;
        r.n_threads = n_threads;
        r.peak_gflops = e.at("peak_gflops").get<double>();
        r.bf16_peak_gflops = e.at("bf16_peak_gflops").get<double>();
        r.int8_peak_gops = e.at("int8_peak_gops").get<double>();
        r.dram_gbs = e.at("dram_gbs").get<double>();
        r.l3_gbs = e.at("l3_gbs").get<double>();
        r.l2_gbs = e.at("l2_gbs").get<double>();
        r.l1d_bytes = e.at("l1d_bytes").get<size_t>();
        r.l2_bytes = e.at("l2_bytes").get<size_t>();
        r.l3_bytes = e.at("l3_bytes").get<size_t>();
        r.l3_found_by_reading = e.value("l3_found_by_reading", false);
        r.source = "cache " + file.string();
        r.source += " (measured " + e.value("measured_at", std::string("at an unknown time")) +
                    ", load average " + fmt("%.2f", e.value("load_average", -1.0)) + ")";
        // The cache-level probes were sized from the caches detected then: an entry made when this machine
        // reported other sizes (e.g. none, before CPUID filled in what sysfs lacks) is measured again.
        const roofs::CacheSizes now = roofs::detect_cache_sizes();
        const bool same_l3 = r.l3_found_by_reading ? now.l3 == 0 : r.l3_bytes == now.l3;
        const bool same_caches = r.l1d_bytes == now.l1d && r.l2_bytes == now.l2 && same_l3;
        if (r.peak_gflops > 0 && r.dram_gbs > 0 && same_caches) return r;
      }
    } catch (const std::exception&) {
      cache = nlohmann::json::object();  // a corrupt entry is re-measured and rewritten
    }
  }
  if (before_measuring) before_measuring();
  const double load_average = load_average_1min();
  MachineRoofs r = measure_machine_roofs(isa, n_threads);
  if (dir.empty()) {
    r.source = "measured (not cached: neither XDG_CACHE_HOME nor HOME is set)";
    return r;
  }
  // A second measurement: roofs taken on a busy machine would mislead every later profile that reads them.
  MachineRoofs again = measure_machine_roofs(isa, n_threads);
  const int n_cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  std::string noise = profiler_detail::roofs_noise(r, again, load_average, n_cores, n_threads);
  if (r.l3_bytes != again.l3_bytes && noise.empty())  // two reading sweeps that found different L3s: do not cache
    noise = "the L3 found by reading was " + std::to_string(r.l3_bytes >> 20) + " MiB, then " +
            std::to_string(again.l3_bytes >> 20) + " MiB";
  r = better_roofs(r, again);
  if (!noise.empty()) {
    r.source = "measured (not cached: " + noise + ")";
    return r;
  }
  cache[key] = {{"peak_gflops", r.peak_gflops}, {"bf16_peak_gflops", r.bf16_peak_gflops},
                {"int8_peak_gops", r.int8_peak_gops}, {"dram_gbs", r.dram_gbs}, {"l3_gbs", r.l3_gbs},
                {"l2_gbs", r.l2_gbs}, {"l1d_bytes", r.l1d_bytes}, {"l2_bytes", r.l2_bytes},
                {"l3_bytes", r.l3_bytes}, {"l3_found_by_reading", r.l3_found_by_reading},
                {"measured_at", machine_cache::utc_now()}, {"load_average", load_average}};
  const std::string failed = machine_cache::write_atomically(file, cache);
  r.source = failed.empty() ? "measured (cached in " + file.string() + ")" : "measured (not cached: " + failed + ")";
  return r;
}

Profiler::Profiler(MachineRoofs roofs) : roofs_(std::move(roofs)) {}

OpObserver Profiler::observer() {
  return [this](const OpEvent& e) { events_.push_back({phase_, e, {}}); };
}

void Profiler::reserve(size_t n_events) {
  const size_t kept = events_.size();
  events_.resize(kept + n_events);  // constructs, so every page is written once now
  events_.resize(kept);             // capacity stays
}

void Profiler::set_phase(const std::string& phase) { phase_ = phase; }

void Profiler::begin_step(const std::string& label) {
  step_label_ = label;
  step_start_ = now_seconds();
}

void Profiler::end_step() {
  OpEvent e{"step", -1, 0, 0, 0, 0, step_start_, now_seconds()};
  events_.push_back({phase_, e, step_label_.empty() ? "step" : step_label_});
}

std::vector<std::string> Profiler::phases() const {
  std::vector<std::string> out;
  for (const auto& e : events_)
    if (std::find(out.begin(), out.end(), e.phase) == out.end()) out.push_back(e.phase);
  return out;
}

std::vector<OpStats> Profiler::by_op(const std::string& phase) const {
  std::vector<OpStats> out;
  for (const auto& e : events_) {
    if (e.phase != phase || !e.step.empty()) continue;
    auto it = std::find_if(out.begin(), out.end(), [&](const OpStats& s) { return s.op == e.op.op; });
    if (it == out.end()) {
      out.push_back({phase, e.op.op, -1});
      it = out.end() - 1;
    }
    it->calls++;
    it->tokens += e.op.n_tokens;
    it->seconds += e.op.end_seconds - e.op.start_seconds;
    it->flops += e.op.flops;
    it->bytes += e.op.bytes;
    it->resident_bytes += e.op.resident_bytes;
  }
  return out;
}

std::vector<OpStats> Profiler::by_layer(const std::string& phase) const {
  std::map<std::pair<int, std::string>, OpStats> agg;
  for (const auto& e : events_) {
    if (e.phase != phase || !e.step.empty()) continue;
    OpStats& s = agg[{e.op.layer, e.op.op}];
    s.phase = phase;
    s.op = e.op.op;
    s.layer = e.op.layer;
    s.calls++;
    s.tokens += e.op.n_tokens;
    s.seconds += e.op.end_seconds - e.op.start_seconds;
    s.flops += e.op.flops;
    s.bytes += e.op.bytes;
    s.resident_bytes += e.op.resident_bytes;
  }
  std::vector<OpStats> out;
  for (auto& [k, v] : agg) out.push_back(v);
  return out;
}

double Profiler::phase_seconds(const std::string& phase) const {
  double t = 0;
  for (const auto& s : by_op(phase)) t += s.seconds;
  return t;
}

size_t Profiler::phase_steps(const std::string& phase) const {
  size_t n = 0;
  for (const auto& e : events_) n += e.phase == phase && !e.step.empty();
  return n;
}

double Profiler::working_set_bytes(const std::string& phase) const {
  const auto ops = by_op(phase);
  if (ops.empty()) return 0;
  double bytes = 0;
  size_t forwards = phase_steps(phase);
  if (forwards == 0) {  // no steps marked: every forward calls each op outside the blocks once
    forwards = ops.front().calls;
    for (const auto& s : ops) forwards = std::min(forwards, s.calls);
  }
  for (const auto& s : ops) bytes += s.bytes;
  return bytes / static_cast<double>(std::max<size_t>(1, forwards));
}

Profiler::OpRoof Profiler::op_roof(const std::string& phase, const OpStats& s) const {
  const ReadRoof streamed_roof = phase_roof(phase);
  const double resident = std::clamp(s.resident_bytes, 0.0, s.bytes), streamed = s.bytes - resident;
  if (resident <= 0 || s.calls == 0) return {streamed_roof, memory_level_name(streamed_roof.level)};
  const ReadRoof resident_roof = read_roof_for(roofs_, resident / static_cast<double>(s.calls));
  if (streamed <= 0 || resident_roof.level == streamed_roof.level)
    return {resident_roof, memory_level_name(resident_roof.level)};
  auto seconds_at = [](double bytes, const ReadRoof& r) { return r.gbs > 0 ? bytes / (r.gbs * 1e9) : 0.0; };
  const double t_resident = seconds_at(resident, resident_roof), t_streamed = seconds_at(streamed, streamed_roof);
  ReadRoof roof;
  roof.level = t_resident > t_streamed ? resident_roof.level : streamed_roof.level;
  roof.gbs = t_resident + t_streamed > 0 ? s.bytes / (t_resident + t_streamed) * 1e-9 : 0;
  return {roof, std::string(memory_level_name(resident_roof.level)) + "+" + memory_level_name(streamed_roof.level)};
}

std::string Profiler::bound(const OpStats& s, const ReadRoof& roof) const {
  const std::string memory = std::string(memory_level_name(roof.level)) + " bandwidth";
  if (s.seconds <= 0) return "-";
  // What the roofline allows at the op's intensity; a byte-only op (flops 0) is judged by its bandwidth alone.
  double reached = 0;
  if (s.flops > 0 && roofs_.peak_gflops > 0) {
    const double allowed = roof.gbs > 0 ? std::min(roofs_.peak_gflops, roof.gbs * s.intensity()) : roofs_.peak_gflops;
    reached = s.gflops() / allowed;
  } else if (roof.gbs > 0) {
    reached = s.gbs() / roof.gbs;
  } else {
    return "no roof";
  }
  // Under a tenth of the roofline, neither roof explains the time: say so instead of naming one.
  if (reached < 0.1) return "overhead";
  // No read roof for the level (L1, or one not measured): no ridge point to compare with.
  if (roof.gbs <= 0) return "no " + std::string(memory_level_name(roof.level)) + " roof";
  if (s.flops > 0 && s.intensity() >= roof.ridge_point(roofs_.peak_gflops)) return "compute";
  return memory;
}

std::string Profiler::table(const std::string& phase) const {
  const auto ops = by_op(phase);
  const double total = phase_seconds(phase);
  const ReadRoof roof = phase_roof(phase);
  const std::string level = memory_level_name(roof.level);
  std::ostringstream out;
  char line[320];
  std::snprintf(line, sizeof line,
                "read roof: %s, %s (working set %.2f MiB per step); an op's activations made in the step at the "
                "roof of the level their size per call fits in (column roof)\n",
                level.c_str(), roof.gbs > 0 ? (fmt("%.1f", roof.gbs) + " GB/s").c_str() : "not measured",
                working_set_bytes(phase) / 1048576.0);
  out << line;
  // A share is printed only when it is at most 100%; above, the cell says the roof is wrong (share_of_roof).
  auto cell = [](const RoofShare& r) {
    return r.ok ? fmt("%.1f%%", r.percent) : std::string(r.text.rfind("above", 0) == 0 ? "roof?" : "-");
  };
  std::snprintf(line, sizeof line, "%-11s %7s %10s %10s %6s %9s %8s %7s %-7s %7s %6s %s\n", "op", "calls",
                "total ms", "mean us", "share", "GFLOP/s", "GB/s", "%peak", "roof", "%roof", "F/B", "bound");
  out << line;
  std::vector<std::string> notes;
  for (const auto& s : ops) {
    const OpRoof own = op_roof(phase, s);
    const RoofShare peak = share_of_roof(s.gflops(), roofs_.peak_gflops, "FMA peak");
    const RoofShare bw = share_of_roof(s.gbs(), own.roof.gbs, own.name + " read");
    for (const RoofShare* r : {&peak, &bw})
      if (!r->ok && own.roof.gbs > 0 && r->text.rfind("above", 0) == 0) notes.push_back(s.op + ": " + r->text);
    std::snprintf(line, sizeof line, "%-11s %7zu %10.3f %10.1f %5.1f%% %9.1f %8.1f %7s %-7s %7s %6.1f %s\n",
                  s.op.c_str(), s.calls, s.seconds * 1e3, s.seconds / s.calls * 1e6,
                  total > 0 ? 100.0 * s.seconds / total : 0.0, s.gflops(), s.gbs(),
                  s.flops > 0 ? cell(peak).c_str() : "-", own.name.c_str(), cell(bw).c_str(), s.intensity(),
                  bound(s, own.roof).c_str());
    out << line;
  }
  std::snprintf(line, sizeof line, "%-11s %7s %10.3f\n", "total", "", total * 1e3);
  out << line;
  for (const auto& n : notes) out << "note: " << n << "\n";
  return out.str();
}

std::string Profiler::json() const {
  nlohmann::json j;
  j["roofs"] = {{"isa", isa_name(roofs_.isa)}, {"threads", roofs_.n_threads}, {"peak_gflops", roofs_.peak_gflops},
                {"dram_gbs", roofs_.dram_gbs}, {"l3_gbs", roofs_.l3_gbs}, {"l2_gbs", roofs_.l2_gbs},
                {"ridge_flops_per_byte", roofs_.ridge_point()}, {"source", roofs_.source}};
  j["machine"] = nlohmann::json::parse(machine_json({roofs_}, "wall clock (steady_clock) around each op, one run"));
  // A share above 100% is never written: null, and the note says the roof is wrong.
  auto share = [](const RoofShare& r) { return r.ok ? nlohmann::json(r.percent) : nlohmann::json(nullptr); };
  for (const auto& phase : phases()) {
    nlohmann::json p;
    const ReadRoof roof = phase_roof(phase);
    const std::string level = memory_level_name(roof.level);
    p["seconds"] = phase_seconds(phase);
    p["steps"] = phase_steps(phase);
    p["working_set_bytes"] = working_set_bytes(phase);
    p["read_roof"] = {{"level", level}, {"gbs", roof.gbs},
                      {"ridge_flops_per_byte", roof.ridge_point(roofs_.peak_gflops)}};
    auto row = [&](const OpStats& s) {
      const OpRoof own = op_roof(phase, s);
      const RoofShare peak = share_of_roof(s.gflops(), roofs_.peak_gflops, "FMA peak");
      const RoofShare bw = share_of_roof(s.gbs(), own.roof.gbs, own.name + " read");
      return nlohmann::json{{"op", s.op}, {"layer", s.layer}, {"calls", s.calls}, {"tokens", s.tokens},
                            {"seconds", s.seconds}, {"flops", s.flops}, {"bytes", s.bytes},
                            {"resident_bytes", s.resident_bytes}, {"gflops", s.gflops()}, {"gbs", s.gbs()},
                            {"read_roof_level", own.name}, {"read_roof_gbs", own.roof.gbs},
                            {"pct_peak", share(peak)}, {"pct_read_roof", share(bw)},
                            {"read_roof_note", bw.text}, {"peak_note", peak.text},
                            {"intensity", s.intensity()}, {"bound", bound(s, own.roof)}};
    };
    for (const auto& s : by_op(phase)) p["ops"].push_back(row(s));
    for (const auto& s : by_layer(phase)) p["layers"].push_back(row(s));
    j["phases"][phase] = p;
  }
  return j.dump(2);
}

std::string Profiler::chrome_trace() const {
  // Trace-event format: "X" (complete) events in microseconds; steps, layers and ops nest by time on one track.
  nlohmann::json events = nlohmann::json::array();
  double origin = events_.empty() ? 0 : events_.front().op.start_seconds;
  for (const auto& e : events_) origin = std::min(origin, e.op.start_seconds);
  auto us = [&](double s) { return (s - origin) * 1e6; };
  events.push_back({{"ph", "M"}, {"pid", 1}, {"tid", 1}, {"name", "thread_name"}, {"args", {{"name", "session"}}}});
  // Layer slices: from the first to the last op of each consecutive run of one layer.
  int run_layer = -2;
  double run_begin = 0, run_end = 0;
  std::string run_phase;
  auto flush_layer = [&] {
    if (run_layer >= 0)
      events.push_back({{"ph", "X"}, {"pid", 1}, {"tid", 1}, {"cat", "layer"}, {"name", "layer " + std::to_string(run_layer)},
                        {"ts", us(run_begin)}, {"dur", (run_end - run_begin) * 1e6}, {"args", {{"phase", run_phase}}}});
  };
  for (const auto& e : events_) {
    if (!e.step.empty()) {
      events.push_back({{"ph", "X"}, {"pid", 1}, {"tid", 1}, {"cat", "step"}, {"name", e.step},
                        {"ts", us(e.op.start_seconds)}, {"dur", (e.op.end_seconds - e.op.start_seconds) * 1e6},
                        {"args", {{"phase", e.phase}}}});
      continue;
    }
    if (e.op.layer != run_layer) {
      flush_layer();
      run_layer = e.op.layer;
      run_begin = e.op.start_seconds;
      run_phase = e.phase;
    }
    run_end = e.op.end_seconds;
    const double dur = e.op.end_seconds - e.op.start_seconds;
    events.push_back({{"ph", "X"}, {"pid", 1}, {"tid", 1}, {"cat", "op"}, {"name", e.op.op},
                      {"ts", us(e.op.start_seconds)}, {"dur", dur * 1e6},
                      {"args", {{"layer", e.op.layer}, {"tokens", e.op.n_tokens}, {"flops", e.op.flops},
                                {"bytes", e.op.bytes}, {"gflops", dur > 0 ? e.op.flops / dur * 1e-9 : 0.0}}}});
  }
  flush_layer();
  return nlohmann::json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump();
}

namespace {

// An axis-aligned box in SVG user units.
struct Box {
  double x0, y0, x1, y1;
  bool intersects(const Box& o) const { return x0 < o.x1 && o.x0 < x1 && y0 < o.y1 && o.y0 < y1; }
  bool inside(const Box& o) const { return x0 >= o.x0 && x1 <= o.x1 && y0 >= o.y0 && y1 <= o.y1; }
};

// Label geometry, shared by the placement and the SVG (textLength pins the drawn width to the estimate).
constexpr double kLabelFontSize = 10, kLabelCharWidth = 6.0;
Box label_box(double x, double baseline, double width) {
  return {x, baseline - kLabelFontSize, x + width, baseline + 0.3 * kLabelFontSize};
}

// Places each label near its point without touching another label, a point or the plot's edge: the first free
// spot on rings of growing radius around the point (8 directions per ring). Returns the baseline-left corner of
// each label, or {-1, -1} when no spot was free (the caller lists it beside the plot instead).
std::vector<std::pair<double, double>> place_labels(const std::vector<std::pair<double, double>>& points,
                                                    const std::vector<double>& widths, const Box& area) {
  std::vector<Box> taken;
  for (const auto& [px, py] : points) taken.push_back({px - 5, py - 5, px + 5, py + 5});
  std::vector<std::pair<double, double>> out;
  const double h = 1.3 * kLabelFontSize;
  for (size_t i = 0; i < points.size(); ++i) {
    const auto [px, py] = points[i];
    const double w = widths[i];
    std::pair<double, double> found{-1, -1};
    for (double r = 7; r <= 160 && found.first < 0; r += 9) {
      for (int d = 0; d < 8 && found.first < 0; ++d) {
        // Right, left, above, below first: a label beside its point reads best.
        static constexpr double dirs[8][2] = {{1, 0}, {-1, 0}, {0, -1}, {0, 1}, {1, -1}, {1, 1}, {-1, -1}, {-1, 1}};
        const double dx = dirs[d][0], dy = dirs[d][1];
        // The box's near edge sits r from the point in direction (dx, dy).
        const double x = dx > 0 ? px + r : dx < 0 ? px - r - w : px - w / 2;
        const double top = dy > 0 ? py + r : dy < 0 ? py - r - h : py - h / 2;
        const double baseline = top + kLabelFontSize;
        Box b = label_box(x, baseline, w);
        const Box padded{b.x0 - 1, b.y0 - 1, b.x1 + 1, b.y1 + 1};
        if (!b.inside(area)) continue;
        bool free = true;
        for (const Box& t : taken) free = free && !padded.intersects(t);
        if (free) {
          found = {x, baseline};
          taken.push_back(b);
        }
      }
    }
    out.push_back(found);
  }
  return out;
}

}  // namespace

std::string Profiler::roofline_svg() const {
  // Log-log axes: x = arithmetic intensity (FLOP/byte) 1/64 .. 1024, y = GFLOP/s from peak/1e5 .. 2·peak. The plot
  // takes the left part; the legend (roofs, phases, labels that found no room) is a column right of it, so
  // nothing in the plot area but data and roofs.
  const double W = 900, H = 480, L = 70, plot_right = 640, T = 40, B = 60, legend_x = plot_right + 20;
  const double x_min = std::log10(1.0 / 64), x_max = std::log10(1024.0);
  const double y_max = std::log10(roofs_.peak_gflops * 2), y_min = y_max - 5;
  auto X = [&](double ai) { return L + (std::log10(ai) - x_min) / (x_max - x_min) * (plot_right - L); };
  auto Y = [&](double g) {
    const double v = std::clamp(std::log10(std::max(g, 1e-12)), y_min, y_max);
    return H - B - (v - y_min) / (y_max - y_min) * (H - T - B);
  };
  std::ostringstream s;
  s << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W
    << "\" height=\"" << H << "\" viewBox=\"0 0 " << W << " " << H << "\" font-family=\"sans-serif\" font-size=\"11\">\n";
  s << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  s << "<text x=\"" << W / 2 << "\" y=\"20\" text-anchor=\"middle\" font-size=\"14\">Roofline: " << isa_name(roofs_.isa)
    << ", " << roofs_.n_threads << " thread(s), FMA peak " << fmt("%.0f", roofs_.peak_gflops) << " GFLOP/s</text>\n";
  s << "<rect class=\"plot-area\" x=\"" << L << "\" y=\"" << T << "\" width=\"" << plot_right - L << "\" height=\""
    << H - T - B << "\" fill=\"none\" stroke=\"#999\"/>\n";
  // Axes and decade grid.
  for (int e = -1; e <= 3; ++e) {
    const double ai = std::pow(10.0, e);
    s << "<line x1=\"" << X(ai) << "\" y1=\"" << T << "\" x2=\"" << X(ai) << "\" y2=\"" << H - B
      << "\" stroke=\"#ddd\"/><text x=\"" << X(ai) << "\" y=\"" << H - B + 15 << "\" text-anchor=\"middle\">"
      << fmt("%g", ai) << "</text>\n";
  }
  for (int e = static_cast<int>(std::ceil(y_min)); e <= static_cast<int>(std::floor(y_max)); ++e) {
    const double g = std::pow(10.0, e);
    s << "<line x1=\"" << L << "\" y1=\"" << Y(g) << "\" x2=\"" << plot_right << "\" y2=\"" << Y(g)
      << "\" stroke=\"#ddd\"/><text x=\"" << L - 5 << "\" y=\"" << Y(g) + 4 << "\" text-anchor=\"end\">" << fmt("%g", g)
      << "</text>\n";
  }
  s << "<text x=\"" << (L + plot_right) / 2 << "\" y=\"" << H - 20
    << "\" text-anchor=\"middle\">arithmetic intensity (FLOP/byte)</text>\n";
  s << "<text x=\"18\" y=\"" << (T + H - B) / 2 << "\" transform=\"rotate(-90 18 " << (T + H - B) / 2
    << ")\" text-anchor=\"middle\">GFLOP/s</text>\n";
  // The roofs: min(peak, bandwidth × intensity) for each measured read level, named in the legend.
  struct Slope {
    const char* name;
    double gbs;
    const char* dash;
  };
  const Slope slopes[] = {{"DRAM", roofs_.dram_gbs, ""}, {"L3", roofs_.l3_gbs, "6,3"}, {"L2", roofs_.l2_gbs, "2,3"}};
  double legend_y = T + 10;
  s << "<text x=\"" << legend_x << "\" y=\"" << legend_y << "\" font-weight=\"bold\">roofs</text>\n";
  for (const Slope& sl : slopes) {
    if (sl.gbs <= 0) continue;
    s << "<polyline class=\"roof\" fill=\"none\" stroke=\"#c00\" stroke-width=\"2\""
      << (sl.dash[0] ? std::string(" stroke-dasharray=\"") + sl.dash + "\"" : std::string()) << " points=\"";
    for (int i = 0; i <= 64; ++i) {
      const double ai = std::pow(10.0, x_min + (x_max - x_min) * i / 64);
      s << X(ai) << "," << Y(std::min(roofs_.peak_gflops, sl.gbs * ai)) << " ";
    }
    s << "\"/>\n";
    legend_y += 16;
    s << "<line x1=\"" << legend_x << "\" y1=\"" << legend_y - 4 << "\" x2=\"" << legend_x + 24 << "\" y2=\""
      << legend_y - 4 << "\" stroke=\"#c00\" stroke-width=\"2\""
      << (sl.dash[0] ? std::string(" stroke-dasharray=\"") + sl.dash + "\"" : std::string()) << "/><text x=\""
      << legend_x + 30 << "\" y=\"" << legend_y << "\">" << sl.name << " " << fmt("%.1f", sl.gbs) << " GB/s</text>\n";
  }
  // One point per (phase, op), colored by phase; labels placed around their points (place_labels).
  const char* colors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b"};
  struct Point {
    std::string phase, op, color, title;
    double x, y;
  };
  std::vector<Point> points;
  legend_y += 14;
  s << "<text x=\"" << legend_x << "\" y=\"" << legend_y << "\" font-weight=\"bold\">phases</text>\n";
  int pi = 0;
  for (const auto& phase : phases()) {
    const char* color = colors[pi++ % 5];
    const ReadRoof roof = phase_roof(phase);
    for (const auto& op : by_op(phase)) {
      if (op.flops <= 0 || op.bytes <= 0 || op.seconds <= 0) continue;
      points.push_back({phase, op.op, color,
                        phase + " " + op.op + ": " + fmt("%.1f", op.gflops()) + " GFLOP/s at " +
                            fmt("%.2f", op.intensity()) + " FLOP/B, " + bound(op, roof),
                        X(op.intensity()), Y(op.gflops())});
    }
    // Legend marks are squares, unlike the round data points, and sit outside the plot.
    legend_y += 16;
    s << "<rect x=\"" << legend_x << "\" y=\"" << legend_y - 9 << "\" width=\"9\" height=\"9\" fill=\"" << color
      << "\"/><text x=\"" << legend_x + 14 << "\" y=\"" << legend_y << "\">" << phase << " (read roof "
      << memory_level_name(roof.level) << ")</text>\n";
  }
  std::vector<std::pair<double, double>> xy;
  std::vector<double> widths;
  for (const Point& p : points) {
    xy.emplace_back(p.x, p.y);
    widths.push_back(kLabelCharWidth * static_cast<double>(p.op.size()));
  }
  const auto at = place_labels(xy, widths, {L + 1, T + 1, plot_right - 1, H - B - 1});
  bool listed_header = false;
  for (size_t i = 0; i < points.size(); ++i) {
    const Point& p = points[i];
    s << "<g class=\"op\"><circle cx=\"" << p.x << "\" cy=\"" << p.y << "\" r=\"4\" fill=\"" << p.color
      << "\"><title>" << p.title << "</title></circle>";
    double lx = at[i].first, ly = at[i].second;
    if (lx < 0) {  // no room near the point: listed in the legend column instead
      if (!listed_header) {
        legend_y += 30;
        s << "<text x=\"" << legend_x << "\" y=\"" << legend_y << "\" font-weight=\"bold\">unplaced labels</text>";
        listed_header = true;
      }
      legend_y += 14;
      lx = legend_x;
      ly = legend_y;
    } else {
      // A leader line when the label had to move away from its point.
      const Box b = label_box(lx, ly, widths[i]);
      const double cx = std::clamp(p.x, b.x0, b.x1), cy = std::clamp(p.y, b.y0, b.y1);
      if (std::hypot(cx - p.x, cy - p.y) > 12)
        s << "<line x1=\"" << p.x << "\" y1=\"" << p.y << "\" x2=\"" << cx << "\" y2=\"" << cy << "\" stroke=\""
          << p.color << "\" stroke-width=\"0.7\"/>";
    }
    s << "<text class=\"label\" x=\"" << lx << "\" y=\"" << ly << "\" font-size=\"" << kLabelFontSize
      << "\" textLength=\"" << widths[i] << "\" lengthAdjust=\"spacingAndGlyphs\" fill=\"" << p.color << "\">"
      << p.op << "</text></g>\n";
  }
  s << "</svg>\n";
  return s.str();
}

}  // namespace sqrtdk
