// The golden fixtures themselves (tests/data/golden/<model>/, written by tools/make_golden.py) are well formed:
// each model.sqdk passes the loader's full validation (family tensor set, CRCs, finite values) with the config its
// fixture.json states, the logits files have the stated shapes, greedy.json agrees with fixture.json, and the
// first greedy token is the argmax of PyTorch's last prompt row. The comparisons with sqrtdk's forward pass are
// the executor's golden tests; this only guards the data they read.
#include <doctest/doctest.h>

#include "tests/common/files.h"
#include "tests/common/golden.h"
#include "tests/common/npy.h"

#include <sqrtdk/format.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <string>

using namespace sqrtdk;

namespace {

using sqrtdk::test::read_json;


}  // namespace

TEST_CASE("golden fixtures: model.sqdk loads with the stated config; logits and tokens are consistent") {
  for (const std::string& model : test::golden_names()) {
    CAPTURE(model);
    const std::string dir = test::golden_dir(model) + "/";
    const nlohmann::json fixture = read_json(dir + "fixture.json");
    const nlohmann::json& c = fixture["config"];

    LoadOptions options;
    options.check_finite = true;
    const auto file = WeightFile::open(dir + fixture["files"]["sqdk"].get<std::string>(), options);
    const ModelConfig& config = file->config();
    CHECK(arch_name(config.arch) == c["arch"].get<std::string>());
    CHECK(config.d_model == c["d_model"].get<uint32_t>());
    CHECK(config.n_layers == c["n_layers"].get<uint32_t>());
    CHECK(config.n_heads == c["n_heads"].get<uint32_t>());
    CHECK(config.n_kv_heads == c["n_kv_heads"].get<uint32_t>());
    CHECK(config.head_dim == c["head_dim"].get<uint32_t>());
    CHECK(config.d_ff == c["d_ff"].get<uint32_t>());
    CHECK(config.n_vocab == c["n_vocab"].get<uint32_t>());
    CHECK(config.max_seq == c["max_seq"].get<uint32_t>());
    CHECK(config.norm_eps == c["norm_eps"].get<float>());
    CHECK(config.rope_theta == c["rope_theta"].get<float>());
    CHECK(config.tied_embeddings == c["tied_embeddings"].get<bool>());
    CHECK(config.rope_interleaved == c["rope_interleaved"].get<bool>());

    const auto prompt = fixture["prompt"].get<std::vector<uint32_t>>();
    const auto generated = fixture["generated"].get<std::vector<uint32_t>>();
    const nlohmann::json greedy = read_json(dir + fixture["files"]["greedy"].get<std::string>());
    CHECK(greedy["prompt"].get<std::vector<uint32_t>>() == prompt);
    CHECK(greedy["generated"].get<std::vector<uint32_t>>() == generated);
    CHECK(generated.size() == 32);
    CHECK(prompt.size() + generated.size() <= config.max_seq);

    const test::NpyF32 logits = test::read_npy_f32(dir + fixture["files"]["logits"].get<std::string>());
    const test::NpyF32 full = test::read_npy_f32(dir + fixture["files"]["logits_full"].get<std::string>());
    CHECK(logits.shape == std::vector<size_t>{prompt.size(), config.n_vocab});
    CHECK(full.shape == std::vector<size_t>{prompt.size() + generated.size(), config.n_vocab});
    // Row t of logits_full predicts token t + 1: its argmax is the next greedy token.
    for (size_t t = prompt.size() - 1; t + 1 < full.shape[0]; ++t) {
      const float* row = full.row(t);
      const auto argmax = static_cast<uint32_t>(std::max_element(row, row + config.n_vocab) - row);
      CHECK(argmax == generated[t + 1 - prompt.size()]);
    }
  }
}
