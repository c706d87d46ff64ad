// The profiler: per-op and per-layer timings of a Session, set against the machine's roofline.
//
//   sqrtdk::Profiler prof(sqrtdk::cached_machine_roofs(model->isa(), session.n_threads()));
//   session.set_op_observer(prof.observer());
//   prof.set_phase("prefill"); session.prefill(tokens);
//   prof.set_phase("decode");  for (...) session.decode(t);
//   std::cout << prof.table("prefill") << prof.table("decode");
//   write(prof.chrome_trace()); write(prof.roofline_svg());
//
// Each op reports FLOPs and bytes moved (see models/runtime/executor.cpp); the profiler adds the time and derives
// GFLOP/s, GB/s, % of the measured FMA peak and DRAM bandwidth, and whether the op's arithmetic intensity
// (FLOPs per byte) puts it under the compute roof or the bandwidth slope. Off (no observer set) it costs nothing.
#pragma once

#include <sqrtdk/isa.h>
#include <sqrtdk/session.h>

#include <functional>
#include <string>
#include <vector>

namespace sqrtdk {

// The machine's roofs for one ISA and thread count.
struct MachineRoofs {
  Isa isa = Isa::ref;
  int n_threads = 1;
  double peak_gflops = 0;   // FP32 FMA peak (independent-accumulator FMA loop)
  double dram_gbs = 0;      // DRAM read bandwidth (streaming sum over 256 MiB)
  std::string source;       // "measured", "cache <path>", or "given"
  double ridge_point() const { return dram_gbs > 0 ? peak_gflops / dram_gbs : 0; }  // FLOPs/byte
};

// Measures the roofs now (about half a second).
MachineRoofs measure_machine_roofs(Isa isa, int n_threads);
// Reads the roofs from the per-machine cache ($XDG_CACHE_HOME or ~/.cache)/sqrtdk/roofs.json, keyed by CPU model,
// ISA and thread count; when absent, calls before_measuring (if given: e.g. to say "calibrating"), measures them
// twice and stores the better of each figure, but only if the machine was quiet: the two measurements agree
// within 10% and the 1-minute load average left the threads free (cores - load average >= n_threads - 0.25).
// A noisy measurement is returned but not cached, and `source` says which happened and why:
//   "cache <path> (measured <when>, ...)", "measured (cached in <path>)", "measured (not cached: <why>)".
// A cache that cannot be written is only skipped.
MachineRoofs cached_machine_roofs(Isa isa, int n_threads, const std::function<void()>& before_measuring = {});

struct OpStats {
  std::string phase;  // "prefill", "decode", ...
  std::string op;     // "attn_qkv", "attention", ...
  int layer = -1;     // -1: aggregated over layers (by_op) or outside blocks
  size_t calls = 0;
  size_t tokens = 0;
  double seconds = 0, flops = 0, bytes = 0;
  double gflops() const { return seconds > 0 ? flops / seconds * 1e-9 : 0; }
  double gbs() const { return seconds > 0 ? bytes / seconds * 1e-9 : 0; }
  double intensity() const { return bytes > 0 ? flops / bytes : 0; }
};

class Profiler {
 public:
  explicit Profiler(MachineRoofs roofs);
  // The callback to pass to Session::set_op_observer. It records into this profiler, which must outlive its use.
  OpObserver observer();
  // Makes room for n_events recorded events and faults its pages in now, so recording during the timed run does not
  // pay for allocation (first-touch page faults cost ~12 us per 4 KiB page in this VM: ~0.4 us per event).
  void reserve(size_t n_events);
  // Tags the events that follow (e.g. "prefill", "decode").
  void set_phase(const std::string& phase);
  // Marks one forward call (a "token" slice in the trace): call around each prefill/decode.
  void begin_step(const std::string& label);
  void end_step();

  std::vector<std::string> phases() const;
  std::vector<OpStats> by_op(const std::string& phase) const;     // summed over layers, in first-seen order
  std::vector<OpStats> by_layer(const std::string& phase) const;  // one row per (layer, op)
  double phase_seconds(const std::string& phase) const;           // sum of op times
  size_t phase_steps(const std::string& phase) const;

  // The per-op table: calls, total and mean time, share, GFLOP/s, GB/s, % of peak / bandwidth, bound.
  std::string table(const std::string& phase) const;
  std::string json() const;          // every aggregate and the roofs, one JSON document
  std::string chrome_trace() const;  // trace-event JSON: opens in Perfetto / chrome://tracing
  std::string roofline_svg() const;  // the roofline: compute roof, bandwidth slope, one point per op and phase

  const MachineRoofs& roofs() const { return roofs_; }
  // "compute" when intensity is above the ridge point, else "memory".
  const char* bound(const OpStats& s) const;

 private:
  struct Event {
    std::string phase;
    OpEvent op;
    std::string step;  // non-empty for step slices (op fields then hold only the timing)
  };
  MachineRoofs roofs_;
  std::string phase_ = "run";
  std::vector<Event> events_;
  std::string step_label_;
  double step_start_ = 0;
};

}  // namespace sqrtdk
