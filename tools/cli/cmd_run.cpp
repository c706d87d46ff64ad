// sqrtdk run: one forward pass over a prompt; prints the next-token top-k with probabilities and the timings.
#include "tools/cli/cli_util.h"
#include "tools/cli/commands.h"

#include <sqrtdk/error.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <numeric>

namespace sqrtdk::cli {

namespace {

struct RunArgs {
  ModelArgs model;
  PromptArgs prompt;
  size_t top_k = 5;
  std::string logits_path;
  bool json = false;
};

void run(const RunArgs& a) {
  auto model = a.model.load();
  const ModelConfig& c = model->config();
  const std::vector<uint32_t> tokens = a.prompt.resolve(*model);
  SessionOptions so;
  so.n_threads = a.model.threads;
  Session session(model, so);

  const auto t0 = std::chrono::steady_clock::now();
  auto logits = session.prefill(tokens, /*all_logits=*/!a.logits_path.empty());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!a.logits_path.empty()) write_npy(a.logits_path, logits.data(), {tokens.size(), c.n_vocab});
  const float* last = logits.data() + logits.size() - c.n_vocab;

  // Probabilities of the last position (softmax in double; generate.h's rules for +/-Inf). A NaN logit is an error
  // that says so, never a silent "p = nan" table.
  std::vector<double> p;
  try {
    p = token_probabilities(std::span<const float>(last, c.n_vocab));
  } catch (const Error& e) {
    throw Error(model->path() + ": the next-token " + e.what());
  }
  std::vector<uint32_t> order(c.n_vocab);
  std::iota(order.begin(), order.end(), 0u);
  const size_t k = std::min<size_t>(a.top_k, c.n_vocab);
  std::partial_sort(order.begin(), order.begin() + k, order.end(),
                    [&](uint32_t x, uint32_t y) { return p[x] > p[y] || (p[x] == p[y] && x < y); });

  if (a.json) {
    nlohmann::json out = {{"model", model->path()}, {"arch", arch_name(c.arch)}, {"isa", isa_name(model->isa())},
                          {"threads", session.n_threads()}, {"n_tokens", tokens.size()},
                          {"load_seconds", model->load_seconds()}, {"forward_seconds", seconds},
                          {"tokens_per_second", tokens.size() / seconds}, {"top", nlohmann::json::array()}};
    for (size_t i = 0; i < k; ++i)
      out["top"].push_back({{"id", order[i]}, {"text", token_text(*model, order[i])}, {"p", p[order[i]]}});
    std::printf("%s\n", out.dump(2).c_str());
    return;
  }
  std::printf("model   %s (%s, %u layers, d_model %u, %.2f M params, ISA %s, %d threads)\n", model->path().c_str(),
              arch_name(c.arch), c.n_layers, c.d_model, model->n_params() / 1e6, isa_name(model->isa()),
              session.n_threads());
  if (model->tokenizer() && a.prompt.tokens.empty())
    std::printf("prompt  \"%s\" (%zu tokens)\n", a.prompt.prompt.c_str(), tokens.size());
  else
    std::printf("prompt  %zu tokens\n", tokens.size());
  std::printf("next-token top-%zu:\n", k);
  for (size_t i = 0; i < k; ++i)
    std::printf("  %2zu. %-10s id %-6u p = %.4f\n", i + 1, token_text(*model, order[i]).c_str(), order[i],
                p[order[i]]);
  std::printf("time    load %.1f ms, forward %.2f ms (%.0f tokens/s)\n", model->load_seconds() * 1e3, seconds * 1e3,
              tokens.size() / seconds);
  if (!a.logits_path.empty())
    std::printf("logits  written to %s [%zu, %u]\n", a.logits_path.c_str(), tokens.size(), c.n_vocab);
}

}  // namespace

void add_run_command(CLI::App& app) {
  auto a = std::make_shared<RunArgs>();
  CLI::App* cmd = app.add_subcommand("run", "One forward pass: the next-token top-k with probabilities.");
  cmd->footer("Examples:\n  sqrtdk run\n  sqrtdk run --prompt \"Once upon a time\" --top-k 10\n"
              "  sqrtdk run --model m.sqdk --tokens 5,17,42 --logits logits.npy   # [n_tokens, n_vocab] f32");
  a->model.add_to(*cmd);
  a->prompt.add_to(*cmd, "The ");
  cmd->add_option("-k,--top-k", a->top_k, "how many candidates to print")->check(at_least(1));
  cmd->add_option("--logits", a->logits_path, "write the logits of every position to this .npy file")
      ->check(non_empty("give the file to write"));
  cmd->add_flag("--json", a->json, "print JSON instead of text");
  cmd->callback([a] { run(*a); });
}

}  // namespace sqrtdk::cli
