// The CLI with a BPE tokenizer: a toy Llama whose file carries the real 32k SentencePiece-BPE vocabulary
// (tests/data/tokenizers/llama2) and a Zephyr chat template. `tokenize`, `run`/`generate --prompt`, `generate
// --chat`, `inspect`, and the errors of a model without a template, against the library's own answers.
#include <doctest/doctest.h>

#include <sqrtdk/chat.h>
#include <sqrtdk/tokenizer.h>

#include "tests/common/files.h"
#include "tests/common/temp_dir.h"
#include "tests/common/toy_model.h"

#include <nlohmann/json.hpp>

#include <fstream>
#include <iterator>
#include <sstream>

#include <sys/wait.h>

#ifdef SQRTDK_BIN_DIR
namespace sqrtdk::test {
namespace {

const std::string kTok = std::string(SQRTDK_TEST_DATA_DIR) + "/tokenizers/llama2";

struct Result {
  int code = -1;
  std::string out, err;
};

Result cli(const TempDir& dir, const std::string& args) {
  const std::string out = dir.file("out.txt"), err = dir.file("err.txt");
  const int status = std::system(("'" + kCli + "' " + args + " >'" + out + "' 2>'" + err + "' </dev/null").c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(out), slurp(err)};
}

// A one-layer Llama with the llama2 vocabulary; with_chat adds the Zephyr template (tests/data/chat/templates).
TokenizerSpec llama2_spec(bool with_chat) {
  TokenizerSpec spec = tokenizer_spec_from_json(kTok + "/tokenizer.json", kTok + "/tokenizer_config.json");
  if (with_chat) {
    spec.chat_template_jinja = slurp(std::string(SQRTDK_TEST_DATA_DIR) + "/chat/templates/zephyr.jinja");
    spec.chat_template = detect_chat_template(spec.chat_template_jinja);
  }
  return spec;
}

std::string write_model(const TempDir& dir, const std::string& name, const TokenizerSpec& spec) {
  ModelConfig c = toy_llama_config();
  c.n_vocab = static_cast<uint32_t>(spec.vocab.size());
  c.d_model = 32;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 8;
  c.d_ff = 48;
  c.n_layers = 1;
  c.max_seq = 96;
  c.tokenizer = TokenizerKind::bpe;
  c.bos_id = spec.bos_id;
  c.eos_id = spec.eos_id;
  const std::string path = dir.file(name);
  write_toy_model(path, c, 5, &spec);
  return path;
}

std::string ids_csv(const std::vector<uint32_t>& ids) {
  std::string s;
  for (uint32_t id : ids) {
    if (!s.empty()) s += ',';
    s += std::to_string(id);
  }
  return s;
}

}  // namespace

TEST_CASE("cli text: tokenize, generate --prompt and --chat, run and inspect on a model with a BPE tokenizer") {
  if (!std::filesystem::exists(kCli)) return;
  TempDir dir;
  const TokenizerSpec spec = llama2_spec(/*with_chat=*/true);
  REQUIRE(spec.chat_template == ChatTemplateKind::zephyr);
  const std::string model = write_model(dir, "m.sqdk", spec);
  const auto tok = Tokenizer::create(spec);
  const std::string text = "Héllo wörld, 你好 🙂 x=1";
  const std::vector<uint32_t> ids = tok->encode(text);

  const Result t = cli(dir, "tokenize -m '" + model + "' '" + text + "'");
  CAPTURE(t.err);
  REQUIRE(t.code == 0);
  CHECK(t.out.substr(0, t.out.find('\n')) == ids_csv(ids));
  const Result d = cli(dir, "tokenize -m '" + model + "' --decode " + ids_csv(ids) + " --skip-special");
  REQUIRE(d.code == 0);
  CHECK(d.out == text + "\n");

  const Result g = cli(dir, "generate -m '" + model + "' -t 1 --prompt '" + text + "' -n 6 --temperature 0 --json");
  CAPTURE(g.err);
  REQUIRE(g.code == 0);
  const auto j = nlohmann::json::parse(g.out);
  CHECK(j["prompt_tokens"].get<std::vector<uint32_t>>() == ids);
  CHECK(j["text"] == tok->decode(j["tokens"].get<std::vector<uint32_t>>(), true));

  const Result c = cli(dir, "generate -m '" + model + "' -t 1 --chat --system 'Be brief.' --prompt 'Hi there' -n 3 "
                                                        "--temperature 0 --json");
  CAPTURE(c.err);
  REQUIRE(c.code == 0);
  const std::vector<ChatMessage> messages = {{"system", "Be brief."}, {"user", "Hi there"}};
  const std::string rendered = render_chat(*tok, messages, true);
  CHECK(rendered.find("<|user|>\nHi there</s>") != std::string::npos);
  CHECK(nlohmann::json::parse(c.out)["prompt_tokens"].get<std::vector<uint32_t>>() == tok->encode(rendered, false));

  const Result r = cli(dir, "run -m '" + model + "' -t 1 --prompt 'Hello'");
  CHECK(r.code == 0);
  const std::string n_prompt = std::to_string(tok->encode("Hello").size());
  CHECK(r.out.find(n_prompt + " tokens)") != std::string::npos);
  const Result i = cli(dir, "inspect -m '" + model + "'");
  CHECK(i.code == 0);
  CHECK(i.out.find("bpe (tokenizer section)") != std::string::npos);
  CHECK(i.out.find("SentencePiece-style BPE: ") != std::string::npos);
  CHECK(i.out.find("chat template zephyr") != std::string::npos);
}

TEST_CASE("cli text: chat without a template, stop text without a tokenizer and bad ids are clear errors") {
  if (!std::filesystem::exists(kCli)) return;
  TempDir dir;
  const std::string model = write_model(dir, "plain.sqdk", llama2_spec(/*with_chat=*/false));
  const Result c = cli(dir, "generate -m '" + model + "' --chat --prompt 'Hi' -n 2");
  CHECK(c.code == 2);
  CHECK(c.err.find("no chat template the engine can render") != std::string::npos);
  const Result d = cli(dir, "tokenize -m '" + model + "' --decode 5,99999");
  CHECK(d.code == 2);
  CHECK(d.err.find("--decode: token id 99999") != std::string::npos);

  ModelConfig none = toy_llama_config();
  const std::string ids_only = dir.file("ids.sqdk");
  write_toy_model(ids_only, none, 3);
  const Result p = cli(dir, "generate -m '" + ids_only + "' --prompt 'Hi' -n 2");
  CHECK(p.code == 2);
  CHECK(p.err.find("has no tokenizer: pass token ids with --tokens") != std::string::npos);
  const Result s = cli(dir, "generate -m '" + ids_only + "' --tokens 1,2 --stop xyz -n 2");
  CHECK(s.code == 1);
  CHECK(s.err.find("no tokenizer") != std::string::npos);
}

}  // namespace sqrtdk::test
#endif
