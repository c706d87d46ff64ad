// sqrtdk tokenize: text -> token ids and pieces with a model's tokenizer, or ids -> text (--decode).
#include "tools/cli/cli_util.h"
#include "tools/cli/commands.h"
#include "tools/common/default_model.h"

#include <sqrtdk/error.h>
#include <sqrtdk/format.h>
#include <sqrtdk/tokenizer.h>

#include <nlohmann/json.hpp>

#include <cstdio>

namespace sqrtdk::cli {

namespace {

struct TokenizeArgs {
  std::string model;
  std::string text;
  std::string decode;  // comma-separated ids
  bool no_special = false, skip_special = false, json = false;
};

// Only the file is opened (checksums verified, weights not packed): tokenizing a 1 GB model takes milliseconds.
std::shared_ptr<const Tokenizer> open_tokenizer(const std::string& path) {
  const auto file = WeightFile::open(path);
  if (auto tokenizer = Tokenizer::of_file(*file)) return tokenizer;
  throw Error(path + ": this model has no tokenizer (convert it from a folder with tokenizer.json, or from a GGUF "
                     "file, to store one)");
}

// A piece as readable text: the token's bytes with control and non-UTF-8 bytes escaped.
std::string shown(const Tokenizer& t, uint32_t id) {
  if (t.is_special(id) && !t.piece(id).empty()) return std::string(t.piece(id));
  return escaped_bytes(t.token_bytes(id), /*keep_utf8=*/true);
}

void run(const TokenizeArgs& a) {
  const std::string path = a.model.empty() ? default_model_path() : a.model;
  const auto tokenizer = open_tokenizer(path);
  const Tokenizer& t = *tokenizer;
  if (!a.decode.empty()) {
    const std::vector<uint32_t> ids = parse_token_list(a.decode, "--decode");
    for (uint32_t id : ids)
      if (id >= t.vocab_size())
        throw Error("--decode: token id " + std::to_string(id) + " is out of range (the tokenizer has " +
                    std::to_string(t.vocab_size()) + " ids)");
    const std::string text = t.decode(ids, a.skip_special);
    if (a.json)
      std::printf("%s\n", nlohmann::json({{"ids", ids}, {"text", text}}).dump(2).c_str());
    else
      std::printf("%s\n", text.c_str());
    return;
  }
  const std::vector<uint32_t> ids = t.encode(a.text, !a.no_special);
  if (a.json) {
    nlohmann::json pieces = nlohmann::json::array();
    for (uint32_t id : ids) pieces.push_back(std::string(t.piece(id)));
    std::printf("%s\n", nlohmann::json({{"ids", ids}, {"pieces", pieces}, {"n_tokens", ids.size()},
                                        {"bytes", a.text.size()}})
                            .dump(2, ' ', false, nlohmann::json::error_handler_t::replace)
                            .c_str());
    return;
  }
  for (size_t i = 0; i < ids.size(); ++i) std::printf(i ? ",%u" : "%u", ids[i]);
  std::printf("\n");
  for (uint32_t id : ids) std::printf("%8u  %s\n", id, shown(t, id).c_str());
  std::printf("%zu tokens for %zu bytes (%s tokenizer)\n", ids.size(), a.text.size(), t.kind_name());
}

}  // namespace

void add_tokenize_command(CLI::App& app) {
  auto a = std::make_shared<TokenizeArgs>();
  CLI::App* cmd = app.add_subcommand("tokenize", "Text to token ids and pieces with a model's tokenizer (or back).");
  cmd->footer("Examples:\n  sqrtdk tokenize --model gpt2.sqdk \"Hello world\"\n"
              "  sqrtdk tokenize --model gpt2.sqdk --decode 15496,995\n"
              "  sqrtdk tokenize --model llama.sqdk --no-special --json \"héllo 你好\"");
  cmd->add_option("-m,--model", a->model, "model file (.sqdk); default: the bundled model")
      ->check(non_empty("give a model file, or leave the option out for the bundled model"));
  auto* text = cmd->add_option("text", a->text, "the text to encode");
  cmd->add_option("--decode", a->decode, "decode these comma-separated ids instead")
      ->check(non_empty("give comma-separated token ids"))
      ->excludes(text);
  cmd->add_flag("--no-special", a->no_special, "do not add BOS/EOS (Hugging Face add_special_tokens=False)");
  cmd->add_flag("--skip-special", a->skip_special, "--decode: leave special tokens out of the text");
  cmd->add_flag("--json", a->json, "print JSON");
  cmd->callback([a] { run(*a); });
}

}  // namespace sqrtdk::cli
