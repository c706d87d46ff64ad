// The profiler's arithmetic (FLOPs and bytes per op against hand-computed values), its outputs (trace JSON,
// roofline SVG) and its aggregation.
#include <doctest/doctest.h>

#include <sqrtdk/profiler.h>
#include <sqrtdk/session.h>

#include "models/family.h"
#include "tests/common/toy_model.h"
#include "tests/common/xml_check.h"

#include <nlohmann/json.hpp>

#include <map>

using namespace sqrtdk;

namespace {
const OpEvent* find_event(const std::vector<OpEvent>& events, const std::string& op, int layer) {
  for (const auto& e : events)
    if (op == e.op && e.layer == layer) return &e;
  return nullptr;
}
}  // namespace

TEST_CASE("profiler: FLOP and byte counts per op match hand-computed values") {
  test::TempDir dir;
  const ModelConfig c = test::toy_llama_config();  // d 64, 4 heads / 2 kv heads of 16, d_ff 96, vocab 67
  test::write_toy_model(dir.file("m.sqdk"), c, 1);
  Session s(Model::load(dir.file("m.sqdk")));
  std::vector<OpEvent> events;
  s.set_op_observer([&](const OpEvent& e) { events.push_back(e); });
  s.prefill(std::vector<uint32_t>{1, 2, 3, 4, 5});  // n = 5 tokens at positions 0..4

  const OpEvent* qkv = find_event(events, "attn_qkv", 0);
  REQUIRE(qkv);
  // N = (4 + 2·2)·16 = 128, K = 64: 2·n·N·K = 2·5·128·64; bytes = 4·(N·K + n·K + n·N).
  CHECK(qkv->flops == 81920.0);
  CHECK(qkv->bytes == 4.0 * (128 * 64 + 5 * 64 + 5 * 128));
  const OpEvent* att = find_event(events, "attention", 0);
  REQUIRE(att);
  // Causal pairs = 1 + 2 + 3 + 4 + 5 = 15; 4·head_dim FLOPs per (head, pair): 4·16·4·15.
  CHECK(att->flops == 3840.0);
  CHECK(att->n_keys == 5);
  const OpEvent* down = find_event(events, "ffn_down", 0);
  REQUIRE(down);
  // N = 64, K = 96, residual read too: 4·(N·K + n·K + 2·n·N).
  CHECK(down->flops == 2.0 * 5 * 64 * 96);
  CHECK(down->bytes == 4.0 * (64 * 96 + 5 * 96 + 2 * 5 * 64));
  // The last block (layer 1) past its KV store runs for the last position only (its logits are all prefill
  // returns): one query over 5 keys, 4·16·4·5 FLOPs, and one row through the feed-forward.
  const OpEvent* last_qkv = find_event(events, "attn_qkv", 1);
  REQUIRE(last_qkv);
  CHECK(last_qkv->n_tokens == 5);  // every position's k and v still go to the cache
  const OpEvent* last_att = find_event(events, "attention", 1);
  REQUIRE(last_att);
  CHECK(last_att->n_tokens == 1);
  CHECK(last_att->flops == 1280.0);
  CHECK(last_att->n_keys == 5);
  const OpEvent* last_down = find_event(events, "ffn_down", 1);
  REQUIRE(last_down);
  CHECK(last_down->flops == 2.0 * 1 * 64 * 96);
  CHECK(last_down->bytes == 4.0 * (64 * 96 + 96 + 2 * 64));
  const OpEvent* head = find_event(events, "lm_head", -1);
  REQUIRE(head);
  CHECK(head->n_tokens == 1);  // only the last position's logits
  CHECK(head->flops == 2.0 * 67 * 64);
  // Every op of every layer reported once, in order, with non-negative durations.
  std::map<std::string, int> count;
  for (const auto& e : events) {
    count[e.op]++;
    CHECK(e.end_seconds >= e.start_seconds);
  }
  CHECK(count["attention"] == 2);
  CHECK(count["ffn_gate"] == 2);
  CHECK(count["embedding"] == 1);
}

// sqrtdk bench sets prefill tokens/s against the FMA peak with prefill_work's FLOPs: they must be the FLOPs that
// ran, op by op as the executor reports them (the last block past its KV store for each chunk's last row only).
TEST_CASE("profiler: prefill_work counts the linear and attention FLOPs a prefill reports") {
  test::TempDir dir;
  for (const ModelConfig& c : {test::toy_llama_config(), test::toy_gpt2_config()}) {
    CAPTURE(arch_name(c.arch));
    test::write_toy_model(dir.file("m.sqdk"), c, 4);
    const auto model = Model::load(dir.file("m.sqdk"));
    std::vector<uint32_t> tokens(23);
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint32_t>((7 * i + 3) % c.n_vocab);
    for (size_t max_batch : {size_t{512}, size_t{5}}) {  // one chunk; chunks of 5 with a partial last one
      CAPTURE(max_batch);
      SessionOptions o;
      o.max_batch = max_batch;
      Session s(model, o);
      double linear = 0, attention = 0;
      s.set_op_observer([&](const OpEvent& e) {
        const std::string op = e.op;
        if (op == "attention") attention += e.flops;
        else if (op.rfind("attn_", 0) == 0 || op.rfind("ffn_", 0) == 0 || op == "lm_head") {
          if (op != "attn_norm" && op != "ffn_norm") linear += e.flops;
        }
      });
      s.prefill(tokens);
      const PrefillWork want = prefill_work(c, tokens.size(), s.max_batch());
      CHECK(2 * want.linear_macs == doctest::Approx(linear).epsilon(1e-12));
      CHECK(want.flops == doctest::Approx(linear + attention).epsilon(1e-12));
    }
  }
}

TEST_CASE("profiler: aggregates, trace JSON and a well-formed roofline with a point per op") {
  test::TempDir dir;
  const ModelConfig c = test::toy_gpt2_config();
  test::write_toy_model(dir.file("g.sqdk"), c, 2);
  Session s(Model::load(dir.file("g.sqdk")));
  MachineRoofs roofs;
  roofs.peak_gflops = 100.0;
  roofs.dram_gbs = 10.0;  // no cache sizes: every working set is set against DRAM
  roofs.source = "given";
  Profiler prof(roofs);
  prof.reserve(4096);  // only makes room: nothing is recorded by it (the step and call counts below say so)
  s.set_op_observer(prof.observer());
  prof.set_phase("prefill");
  prof.begin_step("prefill");
  s.prefill(std::vector<uint32_t>{3, 4, 5, 6});
  prof.end_step();
  prof.set_phase("decode");
  for (uint32_t t : {7u, 8u}) {
    prof.begin_step("decode");
    s.decode(t);
    prof.end_step();
  }
  const auto ops = prof.by_op("decode");
  REQUIRE(!ops.empty());
  size_t qkv_calls = 0;
  for (const auto& o : ops)
    if (o.op == "attn_qkv") qkv_calls = o.calls;
  CHECK(qkv_calls == 2 * c.n_layers);  // 2 decode steps × layers
  CHECK(prof.phase_steps("decode") == 2);
  CHECK(prof.by_layer("prefill").size() > ops.size());

  // Ridge point 100 / 10 = 10 FLOP/byte: a GEMM over 4 tokens is far below it, so never compute-bound (memory-bound,
  // or overhead-bound if this tiny GEMM reaches under a tenth of the DRAM slope).
  CHECK(prof.phase_roof("prefill").level == MemoryLevel::dram);
  for (const auto& o : prof.by_op("prefill"))
    if (o.op == "attn_qkv") {
      const std::string bound = prof.bound(o, prof.phase_roof("prefill"));
      CAPTURE(bound);
      CHECK((bound == "DRAM bandwidth" || bound == "overhead"));
    }

  const auto trace = nlohmann::json::parse(prof.chrome_trace());
  size_t op_slices = 0, layer_slices = 0, step_slices = 0;
  for (const auto& e : trace["traceEvents"]) {
    if (e.value("cat", "") == "op") op_slices++;
    if (e.value("cat", "") == "layer") layer_slices++;
    if (e.value("cat", "") == "step") step_slices++;
  }
  CHECK(step_slices == 3);
  CHECK(layer_slices == 3 * c.n_layers);
  CHECK(op_slices > layer_slices);

  const std::string svg = prof.roofline_svg();
  std::string why;
  CHECK_MESSAGE(test::xml_well_formed(svg, &why), why);
  size_t points = 0, expected = 0;
  for (size_t at = svg.find("<circle"); at != std::string::npos; at = svg.find("<circle", at + 1)) points++;
  for (const auto& phase : prof.phases())
    for (const auto& o : prof.by_op(phase)) expected += o.flops > 0 && o.bytes > 0 && o.seconds > 0;
  CHECK(points == expected);
  CHECK(expected >= 8);
  CHECK(nlohmann::json::parse(prof.json())["phases"].contains("decode"));
}
