// The profiler: aggregates OpEvents from a Session's observer and reports them against the machine's roofs.
#include <sqrtdk/error.h>
#include <sqrtdk/profiler.h>

#include "engine/src/profiler/roofs_cache.h"
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

#include <ctime>
#include <thread>

#include <unistd.h>

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

MachineRoofs measure_machine_roofs(Isa isa, int n_threads) {
  MachineRoofs r;
  r.isa = isa;
  r.n_threads = n_threads;
  // Best of 5 runs of ~60 ms of FMAs (shorter runs read ~10% low, and a single VM hiccup inside a best-of-3 of
  // 15 ms runs once halved the 2-thread roof in `sqrtdk bench`), and a 256 MiB read (well past the 32 MiB L3).
  r.peak_gflops = roofs::measure_fma_gflops(isa, n_threads, isa == Isa::ref ? 5000000 : 40000000, 5);
  r.dram_gbs = roofs::measure_read_gbs(n_threads, size_t{256} << 20, 3);
  r.source = "measured";
  return r;
}

namespace profiler_detail {

std::string roofs_noise(const MachineRoofs& a, const MachineRoofs& b, double load_average, int n_cores,
                        int n_threads) {
  auto spread = [](double x, double y) { return std::max(x, y) > 0 ? std::fabs(x - y) / std::max(x, y) : 1.0; };
  const double peak = spread(a.peak_gflops, b.peak_gflops), dram = spread(a.dram_gbs, b.dram_gbs);
  std::string why;
  if (peak > 0.10 || dram > 0.10)
    why = "two measurements differ by " + fmt("%.0f", 100 * peak) + "% (FMA peak) and " + fmt("%.0f", 100 * dram) +
          "% (DRAM read)";
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

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace

MachineRoofs cached_machine_roofs(Isa isa, int n_threads, const std::function<void()>& before_measuring) {
  namespace fs = std::filesystem;
  fs::path dir;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && x[0])
    dir = fs::path(x) / "sqrtdk";
  else if (const char* h = std::getenv("HOME"); h && h[0])
    dir = fs::path(h) / ".cache" / "sqrtdk";
  const fs::path file = dir / "roofs.json";
  // "v3": entries written before the quiet-machine rule (v2 and older: possibly measured on a busy machine, and
  // before v2 with an FMA loop GCC had merged, reading ~25% high) are ignored and re-measured.
  const std::string key = "v3|" + cpu_model() + "|" + isa_name(isa) + "|" + std::to_string(n_threads);
  nlohmann::json cache = nlohmann::json::object();
  if (!dir.empty()) {
    std::ifstream in(file);
    if (in) {
      try {
        cache = nlohmann::json::parse(in);
        if (cache.contains(key)) {
          const auto& e = cache[key];
          MachineRoofs r;
          r.isa = isa;
          r.n_threads = n_threads;
          r.peak_gflops = e.at("peak_gflops").get<double>();
          r.dram_gbs = e.at("dram_gbs").get<double>();
          r.source = "cache " + file.string();
          r.source += " (measured " + e.value("measured_at", std::string("at an unknown time")) +
                      ", load average " + fmt("%.2f", e.value("load_average", -1.0)) + ")";
          if (r.peak_gflops > 0 && r.dram_gbs > 0) return r;
        }
      } catch (const std::exception&) {
        cache = nlohmann::json::object();  // a corrupt cache is re-measured and rewritten
      }
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
  const MachineRoofs again = measure_machine_roofs(isa, n_threads);
  const int n_cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  const std::string noise = profiler_detail::roofs_noise(r, again, load_average, n_cores, n_threads);
  r.peak_gflops = std::max(r.peak_gflops, again.peak_gflops);
  r.dram_gbs = std::max(r.dram_gbs, again.dram_gbs);
  if (!noise.empty()) {
    r.source = "measured (not cached: " + noise + ")";
    return r;
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  cache[key] = {{"peak_gflops", r.peak_gflops}, {"dram_gbs", r.dram_gbs}, {"measured_at", utc_now()},
                {"load_average", load_average}};
  const fs::path tmp = file.string() + ".tmp" + std::to_string(::getpid());
  std::ofstream out(tmp);
  if (out << cache.dump(2) && out.flush()) fs::rename(tmp, file, ec);
  if (ec || !out) {
    fs::remove(tmp, ec);
    r.source = "measured (not cached: cannot write " + file.string() + ")";
  } else {
    r.source = "measured (cached in " + file.string() + ")";
  }
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

const char* Profiler::bound(const OpStats& s) const {
  if (s.flops == 0) return "memory";
  return s.intensity() >= roofs_.ridge_point() ? "compute" : "memory";
}

std::string Profiler::table(const std::string& phase) const {
  const auto ops = by_op(phase);
  const double total = phase_seconds(phase);
  std::ostringstream out;
  char line[256];
  std::snprintf(line, sizeof line, "%-11s %7s %10s %10s %6s %9s %8s %7s %7s %6s %s\n", "op", "calls", "total ms",
                "mean us", "share", "GFLOP/s", "GB/s", "%peak", "%bw", "F/B", "bound");
  out << line;
  for (const auto& s : ops) {
    const double roof_pct = 100.0 * s.gflops() / roofs_.peak_gflops, bw_pct = 100.0 * s.gbs() / roofs_.dram_gbs;
    std::snprintf(line, sizeof line, "%-11s %7zu %10.3f %10.1f %5.1f%% %9.1f %8.1f %6.1f%% %6.1f%% %6.1f %s\n",
                  s.op.c_str(), s.calls, s.seconds * 1e3, s.seconds / s.calls * 1e6,
                  total > 0 ? 100.0 * s.seconds / total : 0.0, s.gflops(), s.gbs(), roof_pct, bw_pct, s.intensity(),
                  bound(s));
    out << line;
  }
  std::snprintf(line, sizeof line, "%-11s %7s %10.3f\n", "total", "", total * 1e3);
  out << line;
  return out.str();
}

std::string Profiler::json() const {
  nlohmann::json j;
  j["roofs"] = {{"isa", isa_name(roofs_.isa)}, {"threads", roofs_.n_threads}, {"peak_gflops", roofs_.peak_gflops},
                {"dram_gbs", roofs_.dram_gbs}, {"ridge_flops_per_byte", roofs_.ridge_point()},
                {"source", roofs_.source}};
  for (const auto& phase : phases()) {
    nlohmann::json p;
    p["seconds"] = phase_seconds(phase);
    p["steps"] = phase_steps(phase);
    auto row = [&](const OpStats& s) {
      return nlohmann::json{{"op", s.op}, {"layer", s.layer}, {"calls", s.calls}, {"tokens", s.tokens},
                            {"seconds", s.seconds}, {"flops", s.flops}, {"bytes", s.bytes},
                            {"gflops", s.gflops()}, {"gbs", s.gbs()},
                            {"pct_peak", 100.0 * s.gflops() / roofs_.peak_gflops},
                            {"pct_bandwidth", 100.0 * s.gbs() / roofs_.dram_gbs},
                            {"intensity", s.intensity()}, {"bound", bound(s)}};
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

std::string Profiler::roofline_svg() const {
  // Log-log axes: x = arithmetic intensity (FLOP/byte) 1/64 .. 1024, y = GFLOP/s from peak/1e4 .. 2·peak.
  const double W = 760, H = 480, L = 70, R = 20, T = 40, B = 60;
  const double x_min = std::log10(1.0 / 64), x_max = std::log10(1024.0);
  const double y_max = std::log10(roofs_.peak_gflops * 2), y_min = y_max - 5;
  auto X = [&](double ai) { return L + (std::log10(ai) - x_min) / (x_max - x_min) * (W - L - R); };
  auto Y = [&](double g) {
    const double v = std::clamp(std::log10(std::max(g, 1e-12)), y_min, y_max);
    return H - B - (v - y_min) / (y_max - y_min) * (H - T - B);
  };
  std::ostringstream s;
  s << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W
    << "\" height=\"" << H << "\" viewBox=\"0 0 " << W << " " << H << "\" font-family=\"sans-serif\" font-size=\"11\">\n";
  s << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  s << "<text x=\"" << W / 2 << "\" y=\"20\" text-anchor=\"middle\" font-size=\"14\">Roofline: " << isa_name(roofs_.isa)
    << ", " << roofs_.n_threads << " thread(s): peak " << fmt("%.0f", roofs_.peak_gflops) << " GFLOP/s, DRAM "
    << fmt("%.1f", roofs_.dram_gbs) << " GB/s</text>\n";
  // Axes and decade grid.
  for (int e = -1; e <= 3; ++e) {
    const double ai = std::pow(10.0, e);
    s << "<line x1=\"" << X(ai) << "\" y1=\"" << T << "\" x2=\"" << X(ai) << "\" y2=\"" << H - B
      << "\" stroke=\"#ddd\"/><text x=\"" << X(ai) << "\" y=\"" << H - B + 15 << "\" text-anchor=\"middle\">"
      << fmt("%g", ai) << "</text>\n";
  }
  for (int e = static_cast<int>(std::ceil(y_min)); e <= static_cast<int>(std::floor(y_max)); ++e) {
    const double g = std::pow(10.0, e);
    s << "<line x1=\"" << L << "\" y1=\"" << Y(g) << "\" x2=\"" << W - R << "\" y2=\"" << Y(g)
      << "\" stroke=\"#ddd\"/><text x=\"" << L - 5 << "\" y=\"" << Y(g) + 4 << "\" text-anchor=\"end\">" << fmt("%g", g)
      << "</text>\n";
  }
  s << "<text x=\"" << (L + W - R) / 2 << "\" y=\"" << H - 20
    << "\" text-anchor=\"middle\">arithmetic intensity (FLOP/byte)</text>\n";
  s << "<text x=\"18\" y=\"" << (T + H - B) / 2 << "\" transform=\"rotate(-90 18 " << (T + H - B) / 2
    << ")\" text-anchor=\"middle\">GFLOP/s</text>\n";
  // The roof: min(peak, bandwidth × intensity).
  s << "<polyline fill=\"none\" stroke=\"#c00\" stroke-width=\"2\" points=\"";
  for (int i = 0; i <= 64; ++i) {
    const double ai = std::pow(10.0, x_min + (x_max - x_min) * i / 64);
    s << X(ai) << "," << Y(std::min(roofs_.peak_gflops, roofs_.dram_gbs * ai)) << " ";
  }
  s << "\"/>\n";
  // One point per (phase, op).
  const char* colors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b"};
  int pi = 0;
  for (const auto& phase : phases()) {
    const char* color = colors[pi++ % 5];
    for (const auto& op : by_op(phase)) {
      if (op.flops <= 0 || op.bytes <= 0 || op.seconds <= 0) continue;
      s << "<g class=\"op\"><circle cx=\"" << X(op.intensity()) << "\" cy=\"" << Y(op.gflops()) << "\" r=\"5\" fill=\""
        << color << "\"><title>" << phase << " " << op.op << ": " << fmt("%.1f", op.gflops()) << " GFLOP/s at "
        << fmt("%.2f", op.intensity()) << " FLOP/B</title></circle><text x=\"" << X(op.intensity()) + 7 << "\" y=\""
        << Y(op.gflops()) + 4 << "\" fill=\"" << color << "\">" << op.op << "</text></g>\n";
    }
    s << "<text x=\"" << L + 10 << "\" y=\"" << T + 15 * pi << "\" fill=\"" << color << "\">● " << phase << "</text>\n";
  }
  s << "</svg>\n";
  return s.str();
}

}  // namespace sqrtdk
