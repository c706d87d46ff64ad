// sqrtdk generate: streams generated text (models with a tokenizer) or token ids as they are produced.
#include "tools/cli/cli_util.h"
#include "tools/cli/commands.h"

#include <sqrtdk/chat.h>
#include <sqrtdk/error.h>
#include <sqrtdk/tokenizer.h>

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
  std::vector<std::string> stop;       // --stop: token ids ("13,10") or text (".")
  std::vector<std::string> stop_text;  // --stop-text: always text (e.g. "10" as two characters)
  bool json = false;
  bool ignore_eos = false;
  bool chat = false;   // --chat: the prompt is a user message in the model's chat template
  std::string system;  // --system: a system message before it
};

void run(GenerateArgs& a) {
  auto model = a.model.load();
  const ModelConfig& c = model->config();
  const Tokenizer* tokenizer = model->tokenizer();
  std::vector<uint32_t> tokens;
  if (a.chat) {
    if (!a.prompt.tokens.empty()) throw CLI::ValidationError("--chat", "takes --prompt text, not --tokens");
    std::vector<ChatMessage> messages;
    if (!a.system.empty()) messages.push_back({"system", a.system});
    messages.push_back({"user", a.prompt.prompt});
    const std::string rendered = render_chat(model->require_tokenizer(), messages, /*add_generation_prompt=*/true);
    tokens = tokenizer->encode(rendered, /*add_special=*/false);  // the template writes BOS where it wants it
  } else {
    if (!a.system.empty()) throw CLI::ValidationError("--system", "needs --chat");
    tokens = a.prompt.resolve(*model);
  }
  // --stop values made only of digits and commas are token ids; anything else (and every --stop-text) is text:
  // generation stops as soon as the generated text contains it, and the text is cut before it (as OpenAI's `stop`).
  a.gen.stop_strings = a.stop_text;
  for (const std::string& s : a.stop) {
    if (!s.empty() && s.find_first_not_of("0123456789,") == std::string::npos) {
      for (uint32_t id : parse_token_list(s, "--stop")) {
        if (id >= c.n_vocab)
          throw Error("--stop: token id " + std::to_string(id) + " is out of range (the model's vocabulary has " +
                      std::to_string(c.n_vocab) + " ids)");
        a.gen.stop_tokens.push_back(id);
      }
    } else {
      a.gen.stop_strings.push_back(s);
    }
  }
  for (const std::string& s : a.stop_text)
    if (s.empty()) throw CLI::ValidationError("--stop-text", "an empty stop string never matches");
  for (const std::string& s : a.gen.stop_strings) {
    if (s.empty()) throw CLI::ValidationError("--stop", "an empty stop string never matches");
    if (!tokenizer)
      throw CLI::ValidationError("--stop", "'" + s + "' is text, but this model has no tokenizer: pass token ids "
                                           "(e.g. --stop 13,10)");
  }
  a.gen.stop_at_eos = !a.ignore_eos;
  SessionOptions so;
  so.n_threads = a.model.threads;
  Session session(model, so);

  // Checked here too, not only by prefill: the prompt is echoed before generation starts, and a prompt that cannot
  // run must not be printed as if it had.
  if (tokens.size() > session.max_context())
    throw Error(ErrorKind::context_full, model->path() + ": the prompt is " + std::to_string(tokens.size()) +
                                             " tokens, more than the model's context of " +
                                             std::to_string(session.max_context()));

  // Text models stream whole UTF-8 characters as they become final (never half a character, never a stop string).
  const bool text = tokenizer && !a.json;
  if (text) {
    std::fputs(a.prompt.tokens.empty() && !a.chat ? a.prompt.prompt.c_str() : "", stdout);
    std::fflush(stdout);
    a.gen.on_text = [](std::string_view piece) {
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
      return true;
    };
  }
  const auto t0 = std::chrono::steady_clock::now();
  GenerateResult result;
  try {
    result = generate(session, tokens, a.gen);
  } catch (const Error& e) {
    throw Error(e.kind(), model->path() + ": " + e.what());  // e.g. NaN logits: which model made them
  }
  const std::vector<uint32_t>& out = result.tokens;
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (a.json) {
    nlohmann::json j = {{"prompt_tokens", tokens}, {"tokens", out}, {"seconds", seconds},
                        {"tokens_per_second", out.size() / seconds},
                        {"stop_reason", stop_reason_name(result.stop_reason)}};
    if (tokenizer) j["text"] = result.text;
    // Tokens whose bytes are not valid UTF-8 were already repaired to U+FFFD by the tokenizer's decoder.
    std::printf("%s\n", j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else if (text) {
    const bool full = result.stop_reason == StopReason::context_full;
    std::fprintf(stderr, "\n[%zu tokens in %.2f s, %.1f tokens/s; stopped: %s]\n", out.size(), seconds,
                 out.size() / seconds, full ? "the context is full" : stop_reason_name(result.stop_reason));
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
              "  sqrtdk generate --tokens 5,17,42 --temperature 0 -n 32 --json   # greedy ids as JSON\n"
              "  sqrtdk generate --prompt \"Once\" --stop . --stop 257   # stop at the first '.' or at id 257");
  a->model.add_to(*cmd);
  a->prompt.add_to(*cmd, "The ");
  cmd->add_option("-n,--max-tokens", a->gen.max_new_tokens, "new tokens at most")->check(at_least(0))->capture_default_str();
  cmd->add_option("--temperature", a->gen.sampling.temperature, "0 = greedy")
      ->check(at_least(0, false))->capture_default_str();
  cmd->add_option("--top-k", a->gen.sampling.top_k, "sample from the k most likely (0 = all)")->check(at_least(0))->capture_default_str();
  cmd->add_option("--top-p", a->gen.sampling.top_p, "nucleus: smallest set reaching p")
      ->check(number_in(0, 1, /*integer=*/false, /*lo_open=*/true))->capture_default_str();
  cmd->add_option("--seed", a->gen.sampling.seed, "random seed (same seed, same tokens)")->capture_default_str();
  cmd->add_option("--stop", a->stop,
                  "stop at these token ids (digits and commas: 13,10) or at this text (e.g. '.', cut from the "
                  "output); repeatable; the model's end tokens (EOS, end of turn) stop too unless --ignore-eos")
      ->allow_extra_args(false);
  cmd->add_option("--stop-text", a->stop_text, "stop at this text, even if it is all digits (e.g. \"10\"); repeatable")
      ->allow_extra_args(false);
  cmd->add_flag("--ignore-eos", a->ignore_eos, "do not stop at the model's end tokens");
  cmd->add_flag("--chat", a->chat,
                "the prompt is a user message, rendered with the model's chat template (ChatML, Llama 2, Llama 3, "
                "Zephyr); prints the reply");
  cmd->add_option("--system", a->system, "--chat: a system message first");
  cmd->add_flag("--json", a->json, "print the generated ids (and text), and why generation stopped, as JSON");
  cmd->callback([a] { run(*a); });
}

}  // namespace sqrtdk::cli
