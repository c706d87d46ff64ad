// Rooflines that bound: the bytes one decode step moves (pinned against hand counts), the cache sizes and probe
// sizes behind the L2/L3 roofs, which roof a working set is set against, that no share above 100% is ever printed,
// the profiler's bound labels, and a roofline SVG whose labels do not collide.
#include <doctest/doctest.h>

#include <sqrtdk/profiler.h>

#include "models/family.h"
#include "ops/base/roofs.h"
#include "tests/common/temp_dir.h"
#include "tests/common/toy_model.h"
#include "tests/common/xml_check.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <regex>
#include <string>
#include <vector>

using namespace sqrtdk;

namespace {

constexpr size_t KiB = size_t{1} << 10, MiB = size_t{1} << 20;

// This VM's shape: 2 threads, 48 KiB L1d and 2 MiB L2 per core, a 300 MiB L3; round roofs.
MachineRoofs synthetic_roofs() {
  MachineRoofs r;
  r.n_threads = 2;
  r.peak_gflops = 100;
  r.dram_gbs = 10;
  r.l3_gbs = 40;
  r.l2_gbs = 100;
  r.l1d_bytes = 48 * KiB;
  r.l2_bytes = 2 * MiB;
  r.l3_bytes = 300 * MiB;
  r.source = "given";
  return r;
}

void write_file(const std::filesystem::path& path, const std::string& text) {
  std::filesystem::create_directories(path.parent_path());
  std::ofstream(path) << text << "\n";
}

}  // namespace

TEST_CASE("decode bytes per token: llama, untied and tied, against a hand count") {
  ModelConfig c = test::toy_llama_config();  // d 64, 2 layers, 4 heads / 2 kv heads of 16, d_ff 96, vocab 67
  // Per layer, in floats: attn_norm + ffn_norm 2·64 = 128; q 64·64 = 4096, k and v 32·64 = 2048 each,
  // out 64·64 = 4096; gate, up, down 96·64 = 6144 each. 128 + 4096 + 2·2048 + 4096 + 3·6144 = 30848.
  // Model: 2 layers = 61696, + out_norm 64, + lm head 67·64 = 4288: 66048 floats = 264192 bytes. Tied, the head is
  // still read in full (its packed copy of tok_emb), so the same; the token's tok_emb row is one more read.
  const double weights = 4.0 * (2 * (128 + 4096 + 2 * 2048 + 4096 + 3 * 6144) + 64 + 67 * 64);
  REQUIRE(weights == 264192.0);
  // K and V per position: 2 (K, V) · 2 layers · 2 kv heads · 16 floats · 4 bytes = 512. Decoding position 10 reads
  // positions 0..10 (11 of them) and writes one.
  for (bool tied : {false, true}) {
    CAPTURE(tied);
    c.tied_embeddings = tied;
    const DecodeBytes b = decode_bytes_per_token(c, 10);
    CHECK(b.weights == weights);
    CHECK(b.embedding == 64 * 4);
    CHECK(b.kv_read == 512.0 * 11);
    CHECK(b.kv_written == 512.0);
    CHECK(b.total() == 264192.0 + 256 + 5632 + 512);
  }
  CHECK(decode_bytes_per_token(c, 0).kv_read == 512.0);  // the first token attends to itself
}

TEST_CASE("decode bytes per token: gpt2 reads one pos_emb row, not the table") {
  const ModelConfig c = test::toy_gpt2_config();  // d 48, 2 layers, 3 heads of 16, d_ff 80, vocab 61, tied
  // Per layer, in floats: 2 layer norms, weight and bias, 4·48 = 192; qkv 144·48 = 6912 + bias 144; out 48·48 =
  // 2304 + 48; up 80·48 = 3840 + 80; down 48·80 = 3840 + 48: 17408. 2 layers = 34816, + out_norm 2·48 = 96,
  // + lm head 61·48 = 2928: 37840 floats = 151360 bytes. The 40·48 pos_emb table is not in it.
  const double weights = 4.0 * (2 * (192 + 6912 + 144 + 2304 + 48 + 3840 + 80 + 3840 + 48) + 96 + 61 * 48);
  REQUIRE(weights == 151360.0);
  const DecodeBytes b = decode_bytes_per_token(c, 5);
  CHECK(b.weights == weights);
  CHECK(b.embedding == 2 * 48 * 4);  // one tok_emb row and one pos_emb row
  // K and V per position: 2 · 2 layers · 3 kv heads · 16 floats · 4 bytes = 768; positions 0..5 read.
  CHECK(b.kv_read == 768.0 * 6);
  CHECK(b.kv_written == 768.0);
  CHECK(b.total() == 151360.0 + 384 + 4608 + 768);
}

TEST_CASE("roofs: cache sizes from sysfs and the read probes sized from them") {
  test::TempDir dir;
  const auto root = dir.path() / "cache";
  auto index = [&](int i, const char* level, const char* type, const char* size) {
    write_file(root / ("index" + std::to_string(i)) / "level", level);
    write_file(root / ("index" + std::to_string(i)) / "type", type);
    write_file(root / ("index" + std::to_string(i)) / "size", size);
  };
  index(0, "1", "Data", "48K");
  index(1, "1", "Instruction", "32K");  // must not overwrite the L1d
  index(2, "2", "Unified", "2048K");
  index(3, "3", "Unified", "307200K");
  const roofs::CacheSizes caches = roofs::sysfs_cache_sizes(root.string());
  CHECK(caches.l1d == 48 * KiB);
  CHECK(caches.l2 == 2 * MiB);
  CHECK(caches.l3 == 300 * MiB);
  const roofs::CacheSizes none = roofs::sysfs_cache_sizes((dir.path() / "missing").string());
  CHECK((none.l1d == 0 && none.l2 == 0 && none.l3 == 0));

  CHECK(roofs::l2_probe_bytes(caches, 2) == 2 * MiB);   // half of each thread's L2
  CHECK(roofs::l3_probe_bytes(caches, 2) == 16 * MiB);  // 4x the two L2s, well inside the L3
  CHECK(roofs::dram_probe_bytes(caches) == 600 * MiB);  // twice the L3: a 256 MiB probe would sit inside it
  CHECK(roofs::dram_probe_bytes({}) == 256 * MiB);
  CHECK(roofs::dram_probe_bytes({0, 0, size_t{2} << 30}) == size_t{1} << 30);
  // An L3 not much larger than the L2s cannot be probed apart from them: no L3 roof rather than a wrong one.
  CHECK(roofs::l3_probe_bytes({48 * KiB, 2 * MiB, 8 * MiB}, 2) == 0);
  CHECK(roofs::l3_probe_bytes({}, 1) == 0);
  CHECK(roofs::read_probe_passes(2 * MiB) == 32);  // 64 MiB read per timed run
  CHECK(roofs::read_probe_passes(600 * MiB) == 1);
}

TEST_CASE("roofs: a working set is set against the level it fits in") {
  const MachineRoofs r = synthetic_roofs();
  // L1d and L2 are per core: with 2 threads, 96 KiB and 4 MiB hold; the L3 is shared.
  CHECK(read_roof_for(r, 64 * KiB).level == MemoryLevel::l1);
  CHECK(read_roof_for(r, 64 * KiB).gbs == 0);  // no L1 roof is measured: no share can be given
  CHECK(read_roof_for(r, 1 * MiB).level == MemoryLevel::l2);
  CHECK(read_roof_for(r, 4 * MiB).level == MemoryLevel::l2);
  CHECK(read_roof_for(r, 4 * MiB + 1).level == MemoryLevel::l3);
  CHECK(read_roof_for(r, 8 * MiB).gbs == 40);  // the bundled 8 MB model decodes from L3, not DRAM
  CHECK(read_roof_for(r, 300 * MiB).level == MemoryLevel::l3);
  CHECK(read_roof_for(r, 440 * MiB).level == MemoryLevel::dram);
  CHECK(read_roof_for(r, 440 * MiB).gbs == 10);
  MachineRoofs one = r;
  one.n_threads = 1;
  CHECK(read_roof_for(one, 3 * MiB).level == MemoryLevel::l3);  // one thread has one L2
  MachineRoofs unknown = r;
  unknown.l1d_bytes = unknown.l2_bytes = unknown.l3_bytes = 0;
  CHECK(read_roof_for(unknown, 8 * MiB).level == MemoryLevel::dram);
}

TEST_CASE("roofs: a share above 100% is never given; the roof is called wrong instead") {
  const RoofShare half = share_of_roof(20, 40, "L3 read");
  CHECK(half.ok);
  CHECK(half.percent == 50);
  CHECK(half.text == "50% of the L3 read roof");
  CHECK(share_of_roof(100.4, 100, "L2 read").ok);  // prints as 100%
  // The bundled model once printed "1228% of the DRAM roofline": decode at 122.8 GB/s against a 10 GB/s roof.
  const RoofShare above = share_of_roof(122.8, 10, "DRAM read");
  CHECK_FALSE(above.ok);
  CHECK(above.text == "above the DRAM read roof: roof under-measured?");
  CHECK(above.text.find('%') == std::string::npos);
  const RoofShare none = share_of_roof(5, 0, "L1 read");
  CHECK_FALSE(none.ok);
  CHECK(none.text == "no L1 read roof measured");
  // The same decode, set against the roof of the level its 8 MiB working set fits in, is a real share.
  const ReadRoof roof = read_roof_for(synthetic_roofs(), 8 * MiB);
  CHECK(share_of_roof(30, roof.gbs, memory_level_name(roof.level)).text == "75% of the L3 roof");
}

namespace {

// Records one op of `seconds` into the profiler through its observer, as a Session would.
void record(Profiler& prof, const char* op, int layer, double flops, double bytes, double seconds, double& clock) {
  prof.observer()(OpEvent{op, layer, 1, 0, flops, bytes, clock, clock + seconds});
  clock += seconds;
}

}  // namespace

TEST_CASE("profiler: ops classified against the phase's roof; overhead when far below both roofs") {
  Profiler prof(synthetic_roofs());
  double clock = 0;
  prof.set_phase("decode");
  // One step whose ops touch 8 MB in all: it fits the 300 MiB L3, so the L3 roof (40 GB/s, ridge 2.5 FLOP/B).
  record(prof, "gemv", 0, 2e6, 4e6, 4e6 / 30e9, clock);           // 0.5 FLOP/B at 30 GB/s: 75% of the L3 slope
  record(prof, "slow_gemm", 0, 50e6, 1e6, 50e6 / 2.5e9, clock);   // 50 FLOP/B at 2.5 GFLOP/s: 2.5% of peak
  record(prof, "fast_gemm", 0, 50e6, 1e6, 50e6 / 60e9, clock);    // 50 FLOP/B at 60 GFLOP/s
  record(prof, "copy", 0, 0, 1e6, 1e6 / 0.5e9, clock);            // bytes only, at 0.5 of 40 GB/s
  record(prof, "hot", 0, 1e3, 1e6, 1e6 / 90e9, clock);            // 90 GB/s: above the L3 roof
  const ReadRoof roof = prof.phase_roof("decode");
  CHECK(prof.working_set_bytes("decode") == doctest::Approx(8e6));  // no steps marked: one forward
  CHECK(roof.level == MemoryLevel::l3);
  std::map<std::string, std::string> bound;
  for (const auto& s : prof.by_op("decode")) bound[s.op] = prof.bound(s, roof);
  CHECK(bound["gemv"] == "L3 bandwidth");
  CHECK(bound["slow_gemm"] == "overhead");  // at 2.5% of peak it was once labelled "compute-bound"
  CHECK(bound["fast_gemm"] == "compute");
  CHECK(bound["copy"] == "overhead");
  // A working set that fits in L1 has no measured roof: no ridge point, so no compute/memory verdict either.
  const ReadRoof l1 = read_roof_for(synthetic_roofs(), 64 * KiB);
  for (const auto& s : prof.by_op("decode"))
    if (s.op == "fast_gemm") CHECK(prof.bound(s, l1) == "no L1 roof");

  const std::string table = prof.table("decode");
  CAPTURE(table);
  CHECK(table.find("read roof: L3, 40.0 GB/s") != std::string::npos);
  CHECK(table.find("hot: above the L3 read roof: roof under-measured?") != std::string::npos);
  // No share above 100% anywhere in the table (the "hot" op's 225% is replaced by "roof?").
  const std::regex percent(R"(([0-9]+(\.[0-9]+)?)%)");
  for (auto it = std::sregex_iterator(table.begin(), table.end(), percent); it != std::sregex_iterator(); ++it)
    CHECK(std::stod((*it)[1]) <= 100.0);
  const auto json = nlohmann::json::parse(prof.json());
  for (const auto& op : json["phases"]["decode"]["ops"]) {
    CAPTURE(op.dump());
    if (op["op"] == "hot") CHECK(op["pct_read_roof"].is_null());
    if (op["op"] == "gemv") CHECK(op["pct_read_roof"].get<double>() == doctest::Approx(75));
  }
  CHECK(json["phases"]["decode"]["read_roof"]["level"] == "L3");
  CHECK(json["machine"]["logical_cores"].get<int>() >= 1);
  CHECK(json["machine"]["roofs"][0]["l3_read_gbs"] == 40);
}

TEST_CASE("profiler: an op's activations made in the step are set against the level they fit in, the rest against the phase's") {
  Profiler prof(synthetic_roofs());  // L2 100 GB/s (2 MiB per thread, 2 threads), L3 40, DRAM 10
  double clock = 0;
  prof.set_phase("prefill");
  auto record_resident = [&](const char* op, double bytes, double resident, double seconds) {
    prof.observer()(OpEvent{op, 0, 128, 0, 0, bytes, clock, clock + seconds, resident});
    clock += seconds;
  };
  // A step streaming 400 MB (past the 300 MiB L3: the phase's roof is DRAM's 10 GB/s) ...
  record_resident("weights", 400e6, 0, 400e6 / 9e9);                // all streamed, at 9 GB/s
  // ... a norm whose 1 MB of rows sit in L2, at 50 GB/s: above the DRAM roof, half of L2's.
  record_resident("norm", 1e6, 1e6, 1e6 / 50e9);
  // ... and a GEMM-like op: 3 MB of activations (L2: 100 GB/s, 30 us) and 10 MB of weights (DRAM: 1 ms).
  record_resident("linear", 13e6, 3e6, 13e6 / 6.5e9);
  CHECK(prof.phase_roof("prefill").level == MemoryLevel::dram);
  std::map<std::string, Profiler::OpRoof> roof;
  for (const auto& s : prof.by_op("prefill")) roof[s.op] = prof.op_roof("prefill", s);
  CHECK(roof["weights"].name == "DRAM");
  CHECK(roof["weights"].roof.gbs == doctest::Approx(10));
  CHECK(roof["norm"].name == "L2");
  CHECK(roof["norm"].roof.gbs == doctest::Approx(100));
  CHECK(roof["linear"].name == "L2+DRAM");
  CHECK(roof["linear"].roof.level == MemoryLevel::dram);  // the weights' 1 ms outweighs the rows' 30 us
  CHECK(roof["linear"].roof.gbs == doctest::Approx(13e6 / (3e6 / 100e9 + 10e6 / 10e9) * 1e-9));
  const std::string table = prof.table("prefill");
  CAPTURE(table);
  CHECK(table.find("roof?") == std::string::npos);  // against the phase's DRAM roof the norm read 500%
  const auto json = nlohmann::json::parse(prof.json());
  for (const auto& op : json["phases"]["prefill"]["ops"]) {
    CAPTURE(op.dump());
    if (op["op"] == "norm") CHECK(op["pct_read_roof"].get<double>() == doctest::Approx(50));
    if (op["op"] == "norm") CHECK(op["read_roof_level"] == "L2");
    if (op["op"] == "linear")  // 6.5 GB/s of a 13 MB / 1.03 ms = 12.62 GB/s roof
      CHECK(op["pct_read_roof"].get<double>() == doctest::Approx(100 * 6.5 / (13e6 / 1.03e-3 * 1e-9)));
  }
}

TEST_CASE("profiler: the roofline SVG's labels do not collide and its legend is outside the plot") {
  // A llama of d_model 768, d_ff 2048, 12 layers, vocab 32000 on two threads: prefill of 128 tokens and decode,
  // with times at plausible rates. ffn_gate and ffn_up share FLOPs, bytes and nearly their time (one point over
  // the other); the three norms likewise.
  const double d = 768, ff = 2048, v = 32000, n = 128;
  struct Op {
    const char* name;
    double flops_per_token, weight_bytes, gflops_prefill, gflops_decode;
  };
  const Op ops[] = {{"attn_norm", 4 * d, 4 * d, 2, 0.5},        {"attn_qkv", 2 * d * 3 * d, 4 * 3 * d * d, 120, 6},
                    {"rope", 3 * d, 0, 3, 0.6},                  {"attention", 4 * d * 64, 0, 40, 2},
                    {"attn_out", 2 * d * d, 4 * d * d, 118, 6.1}, {"ffn_norm", 4 * d, 4 * d, 2.05, 0.51},
                    {"ffn_gate", 2 * d * ff, 4 * d * ff, 125, 6.5}, {"ffn_up", 2 * d * ff, 4 * d * ff, 125.5, 6.52},
                    {"ffn_down", 2 * d * ff, 4 * d * ff, 122, 6.4}, {"out_norm", 4 * d, 4 * d, 2.02, 0.505},
                    {"lm_head", 2 * d * v, 4 * d * v, 130, 5.8}};
  Profiler prof(synthetic_roofs());
  double clock = 0;
  for (const char* phase : {"prefill", "decode"}) {
    prof.set_phase(phase);
    const bool decode = std::string(phase) == "decode";
    const double tokens = decode ? 1 : n;
    for (const Op& op : ops) {
      const double flops = op.flops_per_token * tokens;
      const double bytes = op.weight_bytes + 8 * d * tokens;
      record(prof, op.name, 0, flops, bytes, flops / ((decode ? op.gflops_decode : op.gflops_prefill) * 1e9), clock);
    }
  }
  const std::string svg = prof.roofline_svg();
  std::string why;
  REQUIRE_MESSAGE(test::xml_well_formed(svg, &why), why);

  auto attr = [](const std::string& tag, const std::string& name) {
    const size_t at = tag.find(" " + name + "=\"");
    REQUIRE_MESSAGE(at != std::string::npos, (name + " missing in " + tag));
    return std::stod(tag.substr(at + name.size() + 3));
  };
  std::vector<std::string> labels, circles, squares;
  std::string plot;
  for (size_t at = svg.find('<'); at != std::string::npos; at = svg.find('<', at + 1)) {
    const std::string tag = svg.substr(at, svg.find('>', at) - at);
    if (tag.rfind("<text class=\"label\"", 0) == 0) labels.push_back(tag);
    if (tag.rfind("<circle", 0) == 0) circles.push_back(tag);
    if (tag.rfind("<rect class=\"plot-area\"", 0) == 0) plot = tag;
    if (tag.rfind("<rect x=", 0) == 0) squares.push_back(tag);  // the legend's phase marks
  }
  REQUIRE(!plot.empty());
  CHECK(circles.size() == 2 * std::size(ops));
  REQUIRE(labels.size() == circles.size());  // every point labelled
  // A label's box: textLength wide from x; from one font size above the baseline y to 0.3 of it below.
  struct Box {
    double x0, y0, x1, y1;
  };
  std::vector<Box> boxes;
  for (const auto& l : labels) {
    const double x = attr(l, "x"), y = attr(l, "y"), fs = attr(l, "font-size"), w = attr(l, "textLength");
    boxes.push_back({x, y - fs, x + w, y + 0.3 * fs});
  }
  for (size_t i = 0; i < boxes.size(); ++i)
    for (size_t j = i + 1; j < boxes.size(); ++j) {
      const Box &a = boxes[i], &b = boxes[j];
      const bool overlap = a.x0 < b.x1 && b.x0 < a.x1 && a.y0 < b.y1 && b.y0 < a.y1;
      CHECK_MESSAGE(!overlap, (labels[i] + " overlaps " + labels[j]));
    }
  // The legend marks are squares right of the plot, never inside it where they would read as data.
  const double plot_right = attr(plot, "x") + attr(plot, "width");
  REQUIRE(squares.size() == 2);
  for (const auto& sq : squares) CHECK(attr(sq, "x") > plot_right);
  for (const auto& c : circles) CHECK(attr(c, "cx") <= plot_right);
}
