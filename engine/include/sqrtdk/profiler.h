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
// GFLOP/s, GB/s, % of the measured FMA peak and of the read roof of the memory level the phase's working set fits in
// (L2, L3 or DRAM: read_roof_for), and whether the op's arithmetic intensity (FLOPs per byte) puts it under the
// compute roof or that level's bandwidth slope, or far below both (overhead). Off (no observer set) it costs nothing.
#pragma once

#include <sqrtdk/isa.h>
#include <sqrtdk/session.h>

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

namespace sqrtdk {

// The machine's roofs for one ISA and thread count.
struct MachineRoofs {
  Isa isa = Isa::ref;
  int n_threads = 1;
  double peak_gflops = 0;  // FP32 FMA peak (independent-accumulator FMA loop)
  // Dot-product peaks of the bf16 and q8 GEMMs' instructions, measured like the FMA peak when `isa` is at or above
  // their level (the CPU then has them); 0: absent (a lower ISA, or a CPU without them), never estimated.
  double bf16_peak_gflops = 0;  // AVX512-BF16 vdpbf16ps: 2 FLOPs per bf16 product (64 per zmm instruction)
  double int8_peak_gops = 0;    // AVX512-VNNI vpdpbusd: 2 ops per u8·s8 multiply-add (128 per zmm instruction)
  double dram_gbs = 0;     // DRAM read bandwidth (streaming sum over max(256 MiB, 2x L3), at most 1 GiB)
  double l3_gbs = 0;       // L3-resident read bandwidth (0: not measured: no L3, or too small beside the L2s)
  double l2_gbs = 0;       // L2-resident read bandwidth, the threads' L2s together (0: not measured)
  // Cache capacities (sysfs for cpu0, else CPUID): per core for L1d and L2, the whole L3. What a working set is
  // compared with. An L3 neither reports is found by reading (ops/base/roofs.h, l3_from_read_sweep) when the roofs
  // are measured: l3_found_by_reading then says so.
  size_t l1d_bytes = 0, l2_bytes = 0, l3_bytes = 0;
  bool l3_found_by_reading = false;
  std::string source;  // "measured", "cache <path>", or "given"
  double ridge_point() const { return dram_gbs > 0 ? peak_gflops / dram_gbs : 0; }  // FLOPs/byte, DRAM slope
};

// Measures the roofs now (about a second: the FMA peak, then reads from L2, L3 and DRAM on n_threads threads; when
// the machine reports no L3, reads of 4x the L2s up to 128 MiB first, to find one).
// quick: a few milliseconds for smoke runs (CI), figures too rough to be roofs (`source` says so).
MachineRoofs measure_machine_roofs(Isa isa, int n_threads, bool quick = false);
// Each roof the higher of a's and b's (a roof is an upper bound: the lower reading is one something interrupted); an
// L3 the two found by reading at different sizes is the smaller, with its roof. Cache sizes and `source` are a's.
MachineRoofs better_roofs(const MachineRoofs& a, const MachineRoofs& b);
// Sets roofs' l1d_bytes, l2_bytes and l3_bytes from sysfs (cpu0), else CPUID (0 where neither reports). For roofs
// given by hand.
void detect_cache_sizes(MachineRoofs& roofs);
// Reads the roofs from the per-machine cache ($XDG_CACHE_HOME or ~/.cache)/sqrtdk/roofs.json, keyed by CPU model,
// ISA and thread count; when absent, calls before_measuring (if given: e.g. to say "calibrating"), measures them
// twice and stores the better of each figure, but only if the machine was quiet: the two measurements agree
// within 10% and the 1-minute load average left the threads free (cores - load average >= n_threads - 0.25).
// A noisy measurement is returned but not cached, and `source` says which happened and why:
//   "cache <path> (measured <when>, ...)", "measured (cached in <path>)", "measured (not cached: <why>)".
// A cache that cannot be written is only skipped.
MachineRoofs cached_machine_roofs(Isa isa, int n_threads, const std::function<void()>& before_measuring = {});

// Which memory a working set streams from, and that level's read roof.
enum class MemoryLevel { l1, l2, l3, dram };
const char* memory_level_name(MemoryLevel level);  // "L1", "L2", "L3", "DRAM"
struct ReadRoof {
  MemoryLevel level = MemoryLevel::dram;
  double gbs = 0;  // 0: no roof measured for that level (L1 never is): no percentage can be given
  double ridge_point(double peak_gflops) const { return gbs > 0 ? peak_gflops / gbs : 0; }
};
// The roof for data re-read every `working_set_bytes` of traffic (a decode step re-reads the whole model): the
// smallest level that holds it (L1d and L2 counted over the roofs' threads, each thread keeping its share), else
// DRAM. Capacities not reported count as 0. A set that only just fits may still spill: the faster roof is then the
// looser bound, never a wrong one.
ReadRoof read_roof_for(const MachineRoofs& roofs, double working_set_bytes);

// How `achieved` compares with `roof`: a percentage only when it is at most 100%. Above the roof the roof is wrong
// (under-measured, or the data came from a faster level than assumed) and no percentage is given.
struct RoofShare {
  double percent = 0;  // valid only when `ok`
  bool ok = false;
  std::string text;  // "83% of the L3 roof", "above the L3 roof: roof under-measured?", "no L1 roof measured"
};
RoofShare share_of_roof(double achieved, double roof, const std::string& roof_name);

// The machine record every --json output carries, as one JSON object: the CPU model, logical core count, the
// timing method (`timing`, e.g. "wall-clock median of 5 runs, warm caches") and each roof set used (threads, ISA,
// FMA peak, BF16 and int8 dot-product peaks (null where absent), DRAM/L3/L2 read GB/s, cache sizes, and where they
// came from: measured now or the cache).
// It also says whether the host was busy (busy_host_warning): "host_busy" true or false, and the warning.
std::string machine_json(const std::vector<MachineRoofs>& roofs, const std::string& timing);

// Whether roofs measured at several thread counts say something else held some of the cores: a set of n > 1
// threads whose FMA peak is under kBusyHostScaling × n × the 1-thread set's of the same ISA. Quiet 2-vCPU VMs read
// 1.88–2.07× at 2 threads (Zen 5, 40 runs, 2026-12-02..07); with one vCPU held, 0.96–1.25×, and every 2-thread
// figure of that stretch (bench-gemm at "2.46x oneDNN", a 2t ÷ 1t of 1.31) means nothing. Returns "" (no such
// pair, or none under) or one line naming the figures, for a benchmark to print beside its results.
inline constexpr double kBusyHostScaling = 0.875;
std::string busy_host_warning(const std::vector<MachineRoofs>& roofs);

struct OpStats {
  std::string phase;  // "prefill", "decode", ...
  std::string op;     // "attn_qkv", "attention", ...
  int layer = -1;     // -1: aggregated over layers (by_op) or outside blocks
  size_t calls = 0;
  size_t tokens = 0;
  double seconds = 0, flops = 0, bytes = 0;
  double resident_bytes = 0;  // of bytes, the activations made within the step (OpEvent::resident_bytes)
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

  // Bytes one forward call of the phase touches (the op bytes summed over the phase, per step): what must stay
  // resident between steps, so what decides the read roof of the phase's ops.
  double working_set_bytes(const std::string& phase) const;
  ReadRoof phase_roof(const std::string& phase) const { return read_roof_for(roofs_, working_set_bytes(phase)); }
  // An op's bandwidth roof: its resident bytes (activations made within the step) at the read roof of the level
  // their size per call fits in, the rest (weights, the KV cache of earlier positions) at the phase's, and
  // roof.gbs = bytes / the time both parts take at those rates; a part with no roof (L1) counts as free, which
  // only loosens the bound. roof.level: the part that takes longer; name: "L2", or "L2+DRAM" when both count.
  // Before, every op was set against the phase's roof: the norms of a prefill whose weights stream from DRAM
  // came out above it, their rows being in L2.
  struct OpRoof {
    ReadRoof roof;
    std::string name;
  };
  OpRoof op_roof(const std::string& phase, const OpStats& s) const;
  // The per-op table: calls, total and mean time, share, GFLOP/s, GB/s, % of peak / of its op_roof, bound.
  std::string table(const std::string& phase) const;
  std::string json() const;          // every aggregate and the roofs, one JSON document
  std::string chrome_trace() const;  // trace-event JSON: opens in Perfetto / chrome://tracing
  std::string roofline_svg() const;  // the roofline: compute roof, bandwidth slope, one point per op and phase

  const MachineRoofs& roofs() const { return roofs_; }
  // What limits the op, against `roof` (its op_roof's, or the phase's: phase_roof): "overhead" when it reaches under a tenth of
  // what the roofline allows at its intensity (neither roof explains its time: call and thread overheads,
  // latency), else "compute" at or above the roof's ridge point, else "<level> bandwidth" ("L3 bandwidth"), or
  // "no L1 roof" when the level has no measured read roof.
  std::string bound(const OpStats& s, const ReadRoof& roof) const;

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
