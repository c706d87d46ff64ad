// Attention maps (engine/src/attention_map.*, Session::capture_attention): the captured probabilities are valid
// causal softmax rows for every ISA and family, long prompts captured across prefill chunks, decode captures,
// --scale sharpening, and the SVG (well-formed, one cell per (query, key) per head, labels escaped). Also the
// two CLI subcommands end to end when the sqrtdk binary is built.
#include <doctest/doctest.h>

#include "tests/common/isas.h"

#include <sqrtdk/error.h>
#include <sqrtdk/model.h>
#include <sqrtdk/session.h>

#include "tools/explain/attention_map.h"
#include "tests/common/toy_model.h"
#include "tests/common/close.h"
#include "tests/common/xml_check.h"

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <sys/wait.h>
#include <vector>

using namespace sqrtdk;

namespace {

std::vector<uint32_t> map_tokens(size_t n, uint32_t n_vocab) {
  std::vector<uint32_t> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = static_cast<uint32_t>((i * 29 + 5) % n_vocab);
  return t;
}

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t i = s.find(what); i != std::string::npos; i = s.find(what, i + 1)) ++n;
  return n;
}

// Rows sum to 1 (float softmax: n·2^-24 plus exp error, 1e-5 is ~100x that for 40 keys), entries in [0, 1],
// and under the causal mask exactly 0 for keys after the query's position.
void check_causal_rows(const AttentionMap& map) {
  const size_t pos0 = map.n_keys - map.n_queries;
  for (size_t h = 0; h < map.n_heads; ++h)
    for (size_t i = 0; i < map.n_queries; ++i) {
      const float* p = map.row(h, i);
      double sum = 0;
      bool in_range = true, zero_above = true;
      for (size_t j = 0; j < map.n_keys; ++j) {
        sum += p[j];
        in_range = in_range && p[j] >= 0.0f && p[j] <= 1.0f;
        if (j > pos0 + i) zero_above = zero_above && p[j] == 0.0f;
      }
      CAPTURE(h);
      CAPTURE(i);
      CHECK(std::fabs(sum - 1.0) < 1e-5);
      CHECK(in_range);
      CHECK(zero_above);
    }
}

}  // namespace

TEST_CASE("attention map: captured probabilities are causal softmax rows (every ISA, llama and gpt2, every layer)") {
  test::TempDir dir;
  for (const ModelConfig& config : {test::toy_llama_config(), test::toy_gpt2_config()}) {
    const std::string path = dir.file(std::string(arch_name(config.arch)) + ".sqdk");
    test::write_toy_model(path, config, 7);
    for (Isa isa : test::f32_isas()) {
      CAPTURE(arch_name(config.arch));
      CAPTURE(isa_name(isa));
      ModelOptions mo;
      mo.isa = static_cast<int>(isa);
      SessionOptions so;
      so.n_threads = 1;  // tiny shapes: threads would only add OpenMP overhead (thread counts: test_session)
      Session session(Model::load(path, mo), so);
      const auto tokens = map_tokens(21, config.n_vocab);
      for (int layer = 0; layer < static_cast<int>(config.n_layers); ++layer) {
        const AttentionMap map = capture_attention_map(session, tokens, layer);
        CHECK(map.n_heads == config.n_heads);
        CHECK(map.n_queries == 21);
        CHECK(map.n_keys == 21);
        // The scale is 1/sqrt(head_dim) as a float: 1 ulp of the exact value.
        SQRTDK_CHECK_ULP(map.scale, 1.0 / std::sqrt(static_cast<double>(config.head_dim)), 1, "one float rounding");
        check_causal_rows(map);
        CHECK(map.row(0, 0)[0] == 1.0f);  // the first query sees only itself: exp(0) / exp(0), exact
      }
    }
  }
}

TEST_CASE("attention map: a prompt longer than one prefill chunk is captured whole; decode captures one row") {
  test::TempDir dir;
  const ModelConfig config = test::toy_llama_config();
  const std::string path = dir.file("m.sqdk");
  test::write_toy_model(path, config, 11);
  auto model = Model::load(path);
  const auto tokens = map_tokens(30, config.n_vocab);
  Session whole(model);
  SessionOptions chunked_opts;
  chunked_opts.max_batch = 7;  // 30 tokens: chunks of 7, 7, 7, 7, 2
  Session chunked(model, chunked_opts);
  const AttentionMap a = capture_attention_map(whole, tokens, 1);
  const AttentionMap b = capture_attention_map(chunked, tokens, 1);
  REQUIRE(a.probs.size() == b.probs.size());
  check_causal_rows(b);
  // Same probabilities up to float rounding (chunks change GEMM row blocking, not the math): 1e-5 absolute.
  double worst = 0;
  for (size_t i = 0; i < a.probs.size(); ++i) worst = std::max(worst, std::fabs(double{a.probs[i]} - b.probs[i]));
  CHECK(worst < 1e-5);

  // Decode: one query over every key so far, equal to the last row of the whole-prompt capture.
  Session s(model);
  s.prefill(std::span<const uint32_t>(tokens.data(), tokens.size() - 1));
  s.capture_attention(1);
  s.decode(tokens.back());
  const std::vector<float>& row = s.captured_attention();
  REQUIRE(row.size() == config.n_heads * tokens.size());
  worst = 0;
  for (size_t h = 0; h < config.n_heads; ++h)
    for (size_t j = 0; j < tokens.size(); ++j)
      worst = std::max(worst, std::fabs(double{row[h * tokens.size() + j]} - a.row(h, tokens.size() - 1)[j]));
  CHECK(worst < 1e-5);
}

TEST_CASE("attention map: a larger scale makes rows sharper (lower mean entropy) than 1/sqrt(head_dim)") {
  test::TempDir dir;
  const ModelConfig config = test::toy_llama_config();
  const std::string path = dir.file("m.sqdk");
  test::write_toy_model(path, config, 3);
  SessionOptions so;
  so.n_threads = 1;
  Session session(Model::load(path), so);
  const auto tokens = map_tokens(24, config.n_vocab);
  const AttentionMap base = capture_attention_map(session, tokens, 0);
  const AttentionMap sharp = capture_attention_map(session, tokens, 0, 10.0f);  // 40x the default 1/4
  CHECK(sharp.scale == 10.0f);
  check_causal_rows(sharp);
  for (size_t h = 0; h < config.n_heads; ++h) {
    CAPTURE(h);
    CHECK(mean_row_entropy(sharp, h) < mean_row_entropy(base, h));
    CHECK(mean_row_entropy(base, h) <= mean_uniform_entropy(base) + 1e-9);
  }
  // The capture is switched off afterwards: a later prefill leaves the last capture as it was.
  const std::vector<float> before = session.captured_attention();
  session.reset();
  session.prefill(tokens);
  CHECK(session.captured_attention() == before);
  CHECK_THROWS_AS(capture_attention_map(session, tokens, static_cast<int>(config.n_layers)), Error);
  CHECK_THROWS_AS(capture_attention_map(session, tokens, -1), Error);
}

TEST_CASE("attention map: SVG is well-formed with one cell per (query, key) per head and escaped labels") {
  AttentionMap map;
  map.n_heads = 3, map.n_queries = 5, map.n_keys = 5, map.scale = 0.25f;
  map.probs.assign(3 * 5 * 5, 0.0f);
  for (size_t h = 0; h < 3; ++h)
    for (size_t i = 0; i < 5; ++i)
      for (size_t j = 0; j <= i; ++j) map.probs[(h * 5 + i) * 5 + j] = 1.0f / static_cast<float>(i + 1);
  const std::vector<std::string> labels = {"<bos>", "a&b", "\"q\"", "'", "\x01"};
  std::string why;
  const std::string all = attention_map_svg(map, labels, {0, 1, 2}, "title <&>");
  CHECK_MESSAGE(test::xml_well_formed(all, &why), why);
  CHECK(count(all, "<rect class=\"c\"") == 3 * 5 * 5);
  CHECK(count(all, "<g class=\"head\"") == 3);
  CHECK(count(all, "mean entropy") == 3);
  CHECK(all.find("&lt;bos&gt;") != std::string::npos);
  CHECK(all.find("a&amp;b") != std::string::npos);
  CHECK(all.find("&quot;q&quot;") != std::string::npos);
  CHECK(all.find("title &lt;&amp;&gt;") != std::string::npos);
  CHECK(all.find('\x01') == std::string::npos);
  CHECK(all.find("a&b") == std::string::npos);
  // Uniform causal rows: each head's entropy is the uniform bound, mean of ln(i + 1).
  const double uniform = (std::log(1.0) + std::log(2.0) + std::log(3.0) + std::log(4.0) + std::log(5.0)) / 5;
  // Float probabilities 1/(i+1) (1 ulp each) summed with logs over 5 rows: 1e-6 relative.
  SQRTDK_CHECK_REL(mean_row_entropy(map, 1), uniform, 1e-6, "float probabilities 1/(i+1), 1 ulp each");
  SQRTDK_CHECK_REL(mean_uniform_entropy(map), uniform, 1e-12, "the same logs in double");

  const std::string one = attention_map_svg(map, labels, {2}, "one head");
  CHECK(test::xml_well_formed(one));
  CHECK(count(one, "<rect class=\"c\"") == 5 * 5);
  CHECK_THROWS_AS(attention_map_svg(map, labels, {3}, ""), Error);
  CHECK_THROWS_AS(attention_map_svg(map, {"a"}, {0}, ""), Error);
}

#ifdef SQRTDK_BIN_DIR
namespace {
int run_cli(const std::string& args) {
  const std::string cmd = std::string("'") + SQRTDK_BIN_DIR + "/sqrtdk' " + args + " >/dev/null 2>&1";
  const int status = std::system(cmd.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}
}  // namespace

TEST_CASE("attention map: the CLI subcommands run end to end (skipped if bin/sqrtdk is not built)") {
  if (!std::filesystem::exists(std::string(SQRTDK_BIN_DIR) + "/sqrtdk")) return;
  test::TempDir dir;
  const ModelConfig config = test::toy_llama_config();
  const std::string model = dir.file("m.sqdk"), svg = dir.file("map.svg");
  test::write_toy_model(model, config, 5);
  CHECK(run_cli("attention-map --model '" + model + "' --tokens 1,2,3,4,5,6 --out '" + svg + "' --no-png") == 0);
  std::ifstream in(svg);
  std::stringstream ss;
  ss << in.rdbuf();
  CHECK(test::xml_well_formed(ss.str()));
  CHECK(count(ss.str(), "<rect class=\"c\"") == config.n_heads * 6 * 6);
  CHECK(run_cli("attention-map --model '" + model + "' --tokens 1,2,3 --layer 2 --out '" + svg + "'") == 1);
  CHECK(run_cli("attention-map --model '" + model + "' --tokens 1,2,3 --head 4 --out '" + svg + "'") == 1);
  CHECK(run_cli("attention-map --model '" + model + "' --tokens 1,2,3 --scale 0 --out '" + svg + "'") == 1);
  CHECK(run_cli("attention-map --model '" + dir.file("missing.sqdk") + "' --tokens 1 --out '" + svg + "'") == 2);
  CHECK(run_cli("explain-scaling --dk 4,8 --keys 8 --samples 50 --json --svg '" + dir.file("s.svg") + "'") == 0);
  CHECK(run_cli("explain-scaling --dk 0") == 1);
  CHECK(run_cli("explain-scaling --keys x") == 1);
}
#endif
