// Golden tests: sqrtdk's logits and greedy tokens against PyTorch's, for the fixtures tools/make_golden.py wrote
// (tests/data/golden/<name>/: fixture.json, model.sqdk, logits.npy, logits_full.npy, greedy.json). Each
// fixture.json states its tolerance and why (float32 reassociation noise and RoPE table rounding, ~1e-6 of the
// largest logit, against a bound of 1e-4 of it); greedy tokens must match exactly, which the fixture's minimum
// top-1/top-2 gap (> 2x the bound) guarantees for any engine within the bound.
#include <doctest/doctest.h>

#include "tests/common/isas.h"

#include <sqrtdk/generate.h>
#include <sqrtdk/model.h>
#include <sqrtdk/session.h>

#include "tests/common/golden.h"
#include "tests/common/npy.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

// Named after the file: the sanitizer builds compile test files together (a unity build), and this file's
// helpers share their names with another test file's.
namespace test_golden {

using namespace sqrtdk;
using sqrtdk::test::NpyF32;
using sqrtdk::test::read_npy_f32;
namespace fs = std::filesystem;

namespace {

struct Fixture {
  std::string name;
  fs::path dir;
  nlohmann::json json;
  std::vector<uint32_t> prompt, generated;
  double tolerance = 0;  // max abs logit error allowed
  std::string sqdk() const { return (dir / json["files"]["sqdk"].get<std::string>()).string(); }
};

// The fixtures with stored weights (tests/common/golden.h; the realistic-size one has its own test file).
std::vector<Fixture> fixtures() {
  std::vector<Fixture> out;
  for (const std::string& name : test::golden_names()) {
    Fixture f;
    f.dir = test::golden_dir(name);
    std::ifstream in(f.dir / "fixture.json");
    f.json = nlohmann::json::parse(in);
    f.name = f.json["name"];
    f.prompt = f.json["prompt"].get<std::vector<uint32_t>>();
    f.generated = f.json["generated"].get<std::vector<uint32_t>>();
    f.tolerance = f.json["tolerance"]["logits_max_abs"].get<double>();
    out.push_back(std::move(f));
  }
  return out;
}

double max_abs_diff(std::span<const float> got, const std::vector<float>& want) {
  REQUIRE(got.size() == want.size());
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::fabs(double{got[i]} - want[i]));
  return worst;
}

}  // namespace

TEST_CASE("golden: prefill logits match PyTorch on every fixture, every ISA, 1 and 2 threads bit-identical") {
  const auto all = fixtures();
  REQUIRE(all.size() >= 5);  // gpt2, llama MHA, GQA, head_dim 80, interleaved RoPE
  for (const Fixture& f : all) {
    CAPTURE(f.name);
    REQUIRE(f.json["files"]["sqdk"].is_string());
    const NpyF32 want = read_npy_f32((f.dir / f.json["files"]["logits"].get<std::string>()).string());
    for (Isa isa : test::f32_isas()) {
      const std::string isa_str = isa_name(isa);
      CAPTURE(isa_str);
      ModelOptions mo;
      mo.isa = static_cast<int>(isa);
      auto model = Model::load(f.sqdk(), mo);
      SessionOptions one, two;
      one.n_threads = 1;
      two.n_threads = 2;
      Session s1(model, one), s2(model, two);
      auto got = s1.prefill(f.prompt, true);
      const double err = max_abs_diff(got, want.data);
      MESSAGE(f.name << " " << isa_str << ": max |logit error| " << err << " (bound " << f.tolerance << ")");
      CHECK(err <= f.tolerance);
      const std::vector<float> copy(got.begin(), got.end());
      auto got2 = s2.prefill(f.prompt, true);
      CHECK(std::memcmp(copy.data(), got2.data(), copy.size() * sizeof(float)) == 0);
    }
  }
}

TEST_CASE("golden: greedy generation of 32 tokens equals PyTorch's; decode step by step equals the full pass") {
  for (const Fixture& f : fixtures()) {
    CAPTURE(f.name);
    auto model = Model::load(f.sqdk());
    Session s(model);
    GenerateOptions greedy;
    greedy.sampling.temperature = 0;
    greedy.max_new_tokens = f.generated.size();
    greedy.stop_at_eos = false;  // PyTorch's greedy loop does not stop at EOS either
    CHECK(generate(s, f.prompt, greedy).tokens == f.generated);

    // The prompt + generated tokens decoded one at a time give PyTorch's full-sequence logits.
    const NpyF32 full = read_npy_f32((f.dir / f.json["files"]["logits_full"].get<std::string>()).string());
    std::vector<uint32_t> seq = f.prompt;
    seq.insert(seq.end(), f.generated.begin(), f.generated.end());
    REQUIRE(full.shape.at(0) == seq.size());
    Session stepwise(model);
    const size_t V = full.shape.at(1);
    double worst = 0;
    for (size_t t = 0; t < seq.size(); ++t) {
      auto logits = stepwise.decode(seq[t]);
      REQUIRE(logits.size() == V);
      for (size_t v = 0; v < V; ++v) worst = std::max(worst, std::fabs(double{logits[v]} - full.at(t, v)));
    }
    CHECK(worst <= f.tolerance);
  }
}

TEST_CASE("golden: the bundled trained model matches PyTorch (logits and 32 greedy tokens)") {
  // tests/data/tiny/ was written by tools/train_tiny.py from the same weights as models/tiny-llama-bytes.sqdk.
  // Tolerance: 1e-4 x max |logit| as for the other fixtures (float32 reassociation noise is ~1e-6 of it); the
  // greedy tokens must match exactly (smallest top-1/top-2 gap over the 32 steps: 0.043).
  const fs::path dir = fs::path(SQRTDK_TEST_DATA_DIR) / "tiny";
  std::ifstream in(dir / "greedy.json");
  const auto j = nlohmann::json::parse(in);
  const auto prompt = j["prompt_ids"].get<std::vector<uint32_t>>();
  const auto greedy_ids = j["greedy_ids"].get<std::vector<uint32_t>>();
  CHECK(prompt == byte_encode(j["prompt"].get<std::string>(), 256));
  const NpyF32 want = read_npy_f32((dir / "logits.npy").string());
  double max_logit = 0;
  for (float v : want.data) max_logit = std::max(max_logit, std::fabs(double{v}));
  const double bound = 1e-4 * max_logit;

  auto model = Model::load(std::string(SQRTDK_SOURCE_DIR) + "/models/tiny-llama-bytes.sqdk");
  Session s(model);
  const double err = max_abs_diff(s.prefill(prompt, true), want.data);
  MESSAGE("tiny-llama-bytes: max |logit error| " << err << " (bound " << bound << ")");
  CHECK(err <= bound);
  Session g(model);
  GenerateOptions greedy;
  greedy.sampling.temperature = 0;
  greedy.max_new_tokens = greedy_ids.size();
  greedy.stop_at_eos = false;
  CHECK(generate(g, prompt, greedy).tokens == greedy_ids);
}

}  // namespace test_golden
