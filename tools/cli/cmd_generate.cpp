// sqrtdk generate: streams generated text (byte-level models) or token ids as they are produced.
#include "tools/cli/cli_util.h"
#include "tools/cli/commands.h"

#include <sqrtdk/error.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>

namespace sqrtdk::cli {

namespace {

struct GenerateArgs {
  ModelArgs model;
  PromptArgs prompt;
  GenerateOptions gen;
  std::string stop;
  bool json = false;
};

void run(GenerateArgs& a) {
  auto model = a.model.load();
  const ModelConfig& c = model->config();
  const std::vector<uint32_t> tokens = a.prompt.resolve(c);
  if (!a.stop.empty()) a.gen.stop_tokens = parse_token_list(a.stop);
  if (c.eos_id != kNoToken) a.gen.stop_tokens.push_back(c.eos_id);
  SessionOptions so;
  so.n_threads = a.model.threads;
  Session session(model, so);

  const bool text = c.tokenizer == TokenizerKind::byte_level && !a.json;
  if (text) {
    std::fputs(a.prompt.tokens.empty() ? a.prompt.prompt.c_str() : "", stdout);
    std::fflush(stdout);
    a.gen.on_token = [](uint32_t id) {
      if (id < 256) {
        std::fputc(static_cast<int>(id), stdout);
        std::fflush(stdout);
      }
      return true;
    };
  }
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<uint32_t> out = generate(session, tokens, a.gen);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const bool stopped_by_token =
      !out.empty() && std::find(a.gen.stop_tokens.begin(), a.gen.stop_tokens.end(), out.back()) != a.gen.stop_tokens.end();
  const bool stopped_at_context_limit = out.size() < a.gen.max_new_tokens && !stopped_by_token;
  if (a.json) {
    nlohmann::json j = {{"prompt_tokens", tokens}, {"tokens", out}, {"seconds", seconds},
                        {"tokens_per_second", out.size() / seconds},
                        {"stop_reason", stopped_by_token           ? "stop_token"
                                        : stopped_at_context_limit ? "context_full"
                                                                   : "max_tokens"}};
    if (c.tokenizer == TokenizerKind::byte_level) j["text"] = byte_decode(out);
    // Bytes that are not valid UTF-8 print as U+FFFD.
    std::printf("%s\n", j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else if (text) {
    std::fprintf(stderr, "\n[%zu tokens in %.2f s, %.1f tokens/s%s]\n", out.size(), seconds, out.size() / seconds,
                 stopped_at_context_limit ? "; stopped: the context is full" : "");
  } else {
    for (size_t i = 0; i < out.size(); ++i) std::printf(i ? ",%u" : "%u", out[i]);
    std::printf("\n");
  }
}

}  // namespace

void add_generate_command(CLI::App& app) {
  auto a = std::make_shared<GenerateArgs>();
  CLI::App* cmd = app.add_subcommand("generate", "Generate text (or token ids), streamed as produced.");
  cmd->footer("Examples:\n  sqrtdk generate --prompt \"Once upon a time\" -n 200\n"
              "  sqrtdk generate --tokens 5,17,42 --temperature 0 -n 32 --json   # greedy ids as JSON");
  a->model.add_to(*cmd);
  a->prompt.add_to(*cmd, "The ");
  cmd->add_option("-n,--max-tokens", a->gen.max_new_tokens, "new tokens at most")->check(at_least(0))->capture_default_str();
  cmd->add_option("--temperature", a->gen.sampling.temperature, "0 = greedy")
      ->check(at_least(0, false))->capture_default_str();
  cmd->add_option("--top-k", a->gen.sampling.top_k, "sample from the k most likely (0 = all)")->check(at_least(0))->capture_default_str();
  cmd->add_option("--top-p", a->gen.sampling.top_p, "nucleus: smallest set reaching p")
      ->check(CLI::Range(0.0f, 1.0f))->capture_default_str();
  cmd->add_option("--seed", a->gen.sampling.seed, "random seed (same seed, same tokens)")->capture_default_str();
  cmd->add_option("--stop", a->stop, "stop token ids, comma-separated (the model's EOS always stops)");
  cmd->add_flag("--json", a->json, "print the generated ids (and text) as JSON");
  cmd->callback([a] { run(*a); });
}

}  // namespace sqrtdk::cli
