// tools/scaling_training.py keeps working: a few steps on a tiny model (README.md as the corpus, so no KJV package
// is needed) write the JSON every field of which the README's table and figure read, finite, with non-zero
// gradients; and each exported model, scaled or not, runs in the engine with PyTorch's logits. Skipped, with the
// reason printed, when /usr/bin/python3 cannot import torch (it is an optional extra: tools/setup.sh).
#include "tests/common/files.h"
#include "tests/common/temp_dir.h"

#include <sqrtdk/format.h>
#include <sqrtdk/model.h>
#include <sqrtdk/session.h>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <set>
#include <string>

#include <sys/wait.h>

using namespace sqrtdk;

namespace {

using sqrtdk::test::slurp;

int run(const std::string& command) {
  const int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

bool finite_number(const nlohmann::json& v) { return v.is_number() && std::isfinite(v.get<double>()); }

}  // namespace

TEST_CASE("tools/scaling_training.py: a tiny run writes finite results, non-zero gradients, models the engine runs") {
  const std::string python = "/usr/bin/python3";
  if (run(python + " -c 'import torch, numpy' >/dev/null 2>&1") != 0) {
    MESSAGE("skipped: " << python << " cannot import torch and numpy (install python3-torch to run this check)");
    return;
  }
  test::TempDir dir;
  const std::string out = dir.file("out");
  const std::string command = python + " " SQRTDK_SOURCE_DIR "/tools/scaling_training.py --tiny --steps 4 --every 2 "
                              "--corpus " SQRTDK_SOURCE_DIR "/README.md --out " + out + " >" + dir.file("log.txt") +
                              " 2>&1";
  REQUIRE_MESSAGE(run(command) == 0, "the script failed:\n" << slurp(dir.file("log.txt")));
  const auto result = nlohmann::json::parse(slurp(out + "/scaling_training.json"));
  CHECK(slurp(out + "/scaling_training.svg").find("<polyline") != std::string::npos);

  const auto& runs = result.at("runs");
  REQUIRE(runs.size() == 4);  // d_k 8 and 16, scale 1/sqrt(d_k) and 1
  std::set<std::string> names;
  for (const auto& r : runs) {
    const std::string name = r.at("name");
    CAPTURE(name);
    names.insert(name);
    const uint32_t head_dim = r.at("head_dim");
    const float scale = r.at("attention_scale").get<float>();
    if (r.at("scale") == "rsqrt") CHECK(scale == doctest::Approx(1.0 / std::sqrt(head_dim)));
    if (r.at("scale") == "one") CHECK(scale == 1.0f);

    const auto& records = r.at("records");
    REQUIRE(records.size() == 3);  // steps 0, 2, 4
    for (size_t i = 0; i < records.size(); ++i) {
      const auto& rec = records[i];
      CAPTURE(i);
      CHECK(rec.at("step") == 2 * i);
      CHECK(finite_number(rec.at("train_bpb")));
      CHECK(finite_number(rec.at("val_bpb")));
      CHECK(rec.at("val_bpb").get<double>() > 0);
      for (const char* group : {"attn_q", "attn_k", "attn_v", "attn_out", "ffn"}) {
        CAPTURE(group);
        CHECK(finite_number(rec.at("grad_norm").at(group)));
        CHECK(rec.at("grad_norm").at(group).get<double>() > 0);  // the probe's gradient reaches every group
        CHECK(rec.at("grad_norm_per_layer").at(group).size() == 1);
      }
      REQUIRE(rec.at("entropy_bits").size() == 1);  // one layer
      const double entropy = rec.at("entropy_bits")[0], saturated = rec.at("saturated_frac")[0];
      CHECK(entropy > 0);
      CHECK(entropy <= std::log2(32.0));  // rows see at most 32 keys
      CHECK(saturated >= 0);
      CHECK(saturated <= 1);
    }
    // Training moved the model: the last training loss is below the first.
    CHECK(records.back().at("train_bpb").get<double>() < records.front().at("train_bpb").get<double>());

    // The exported model carries its scale, and the engine reproduces PyTorch's logits with it.
    const std::string model_path = out + "/models/" + name + ".sqdk";
    const auto model = Model::load(model_path);
    REQUIRE(model->config().attention_scale.has_value());
    CHECK(*model->config().attention_scale == scale);
    const auto check = nlohmann::json::parse(slurp(out + "/models/" + name + ".check.json"));
    const auto ids = check.at("prompt_ids").get<std::vector<uint32_t>>();
    const auto& want = check.at("logits");
    Session session(model);
    const auto got = session.prefill(ids, /*all_logits=*/true);
    REQUIRE(got.size() == ids.size() * model->config().n_vocab);
    double worst = 0, largest = 0;
    for (size_t t = 0; t < ids.size(); ++t)
      for (size_t v = 0; v < model->config().n_vocab; ++v) {
        const double w = want[t][v].get<double>();
        largest = std::max(largest, std::fabs(w));
        worst = std::max(worst, std::fabs(got[t * model->config().n_vocab + v] - w));
      }
    CHECK(worst <= 1e-4 * std::max(1.0, largest));
  }
  CHECK(names == std::set<std::string>{"dk8-rsqrt", "dk8-one", "dk16-rsqrt", "dk16-one"});
}
