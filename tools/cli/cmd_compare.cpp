// sqrtdk compare REF.sqdk OTHER.sqdk... [--text FILE | --random-tokens N]: how far each other model's next-token
// distributions are from the reference's over the same tokens (tools/common/logit_compare.h has the measures).
// Made to measure what bf16 and q8 weights cost against f32 (`sqrtdk convert --dtype`), on real text (bits per
// byte) or on random tokens (random-weight models: no text means anything to them). Tokens run in windows of
// --window positions, each window a fresh session, all logits kept; both models see exactly the same windows.
#include "tools/cli/cli_util.h"
#include "tools/cli/commands.h"
#include "tools/common/logit_compare.h"

#include <sqrtdk/error.h>
#include <sqrtdk/session.h>
#include <sqrtdk/tokenizer.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

namespace sqrtdk::cli {

namespace {

struct CompareArgs {
  std::vector<std::string> models;
  std::string text;
  size_t random_tokens = 0, window = 0, max_tokens = 1u << 20;
  uint64_t seed = 1;
  int threads = 0;
  bool json = false;
};

std::string read_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw Error(ErrorKind::bad_input, "compare: --text '" + path + "' is a directory, not a text file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ErrorKind::bad_input, "compare: cannot read --text file '" + path + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Every logit of one window's positions must be finite: a NaN or Inf makes the measures NaN or, worse, a KL of 0
// that reads as a perfect match. The model that made it is named (exit 2, as run and generate do).
void require_finite_logits(std::span<const float> logits, size_t vocab, const std::string& model, size_t w0) {
  for (size_t i = 0; i < logits.size(); ++i)
    if (!std::isfinite(logits[i]))
      throw Error(model + ": logit " + std::to_string(logits[i]) + " at id " + std::to_string(i % vocab) +
                  ", position " + std::to_string(w0 + i / vocab) +
                  ": the model produced non-finite values (--check-finite names a NaN or Inf weight)");
}

void run_compare(const CompareArgs& a) {
  if (a.models.size() < 2) throw Error("compare: give a reference model and at least one model to compare with it");
  std::vector<std::shared_ptr<const Model>> models;
  for (const std::string& path : a.models) {
    ModelOptions options;
    options.n_threads = a.threads;
    models.push_back(Model::load(path, options));
  }
  const Model& ref = *models.front();
  const size_t vocab = ref.config().n_vocab;
  for (size_t i = 1; i < models.size(); ++i)
    if (models[i]->config().n_vocab != vocab)
      throw Error("compare: " + a.models[i] + " has n_vocab " + std::to_string(models[i]->config().n_vocab) +
                  ", the reference " + a.models[0] + " has " + std::to_string(vocab));

  // The tokens, and the bytes each stands for (text only: bits per byte).
  std::vector<uint32_t> tokens;
  std::vector<size_t> token_bytes;
  std::string source;
  if (!a.text.empty()) {
    const Tokenizer& tok = ref.require_tokenizer();
    tokens = tok.encode(read_file(a.text), /*add_special=*/false);
    if (tokens.size() > a.max_tokens) tokens.resize(a.max_tokens);
    for (uint32_t id : tokens) token_bytes.push_back(tok.decode(std::span<const uint32_t>(&id, 1)).size());
    source = a.text;
  } else {
    const size_t n = a.random_tokens ? a.random_tokens : 512;
    std::mt19937_64 rng(a.seed);
    for (size_t i = 0; i < n; ++i) tokens.push_back(static_cast<uint32_t>(rng() % vocab));
    source = "random tokens (seed " + std::to_string(a.seed) + ")";
  }
  size_t window = a.window ? a.window : std::min<size_t>(ref.config().max_seq, 512);
  for (const auto& m : models) window = std::min<size_t>(window, m->config().max_seq);
  if (tokens.size() < 2) throw Error("compare: need at least 2 tokens, got " + std::to_string(tokens.size()));

  std::vector<tools::LogitComparison> result(models.size());
  std::vector<Session> sessions;
  for (const auto& m : models) sessions.emplace_back(m);
  size_t windows = 0, bytes_scored = 0;
  std::vector<float> ref_logits;
  for (size_t w0 = 0; w0 < tokens.size(); w0 += window) {
    const size_t len = std::min(window, tokens.size() - w0);
    const std::span<const uint32_t> win(tokens.data() + w0, len);
    ++windows;
    sessions[0].reset();
    const std::span<const float> r = sessions[0].prefill(win, /*all_logits=*/true);
    require_finite_logits(r, vocab, a.models[0], w0);
    ref_logits.assign(r.begin(), r.end());
    for (size_t p = 0; p + 1 < len; ++p) bytes_scored += token_bytes.empty() ? 0 : token_bytes[w0 + p + 1];
    for (size_t i = 0; i < models.size(); ++i) {
      std::span<const float> o(ref_logits);
      if (i > 0) {
        sessions[i].reset();
        o = sessions[i].prefill(win, true);
        require_finite_logits(o, vocab, a.models[i], w0);
      }
      for (size_t p = 0; p < len; ++p)
        result[i].add(std::span<const float>(ref_logits.data() + p * vocab, vocab), o.subspan(p * vocab, vocab),
                      p + 1 < len ? static_cast<int64_t>(win[p + 1]) : -1);
    }
  }

  auto bpt = [](double bits, size_t n) { return n ? bits / n : 0.0; };
  const bool text = !token_bytes.empty();
  if (a.json) {
    nlohmann::json j;
    j["reference"] = a.models[0];
    j["source"] = source;
    j["tokens"] = tokens.size();
    j["window"] = window;
    j["windows"] = windows;
    for (size_t i = 0; i < models.size(); ++i) {
      const tools::LogitComparison& c = result[i];
      nlohmann::json m;
      m["model"] = a.models[i];
      m["file_bytes"] = std::filesystem::file_size(a.models[i]);
      m["positions"] = c.positions;
      m["bits_per_token"] = bpt(c.bits_other, c.scored);
      if (text) m["bits_per_byte"] = bytes_scored ? c.bits_other / bytes_scored : 0.0;
      m["top1_agreement"] = c.top1_rate();
      m["kl_mean_nats"] = c.kl_mean();
      m["kl_max_nats"] = c.kl_max;
      m["max_abs_dlogp"] = c.dlogp_max;
      m["next_abs_dlogp_mean"] = c.dnext_mean();
      m["next_abs_dlogp_max"] = c.dnext_max;
      j["models"].push_back(m);
    }
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  std::printf("reference  %s\nsource     %s: %zu tokens in %zu windows of ≤ %zu\n", a.models[0].c_str(),
              source.c_str(), tokens.size(), windows, window);
  std::printf("\n%-40s %12s %9s %9s %8s %10s %10s %11s %11s\n", "model", "file bytes", text ? "bits/B" : "bits/tok",
              "Δ rel", "top-1", "KL mean", "KL max", "max|Δlogp|", "|Δlogp next|");
  const double base = text ? result[0].bits_other / std::max<size_t>(bytes_scored, 1)
                           : bpt(result[0].bits_other, result[0].scored);
  for (size_t i = 0; i < models.size(); ++i) {
    const tools::LogitComparison& c = result[i];
    const double bits =
        text ? c.bits_other / std::max<size_t>(bytes_scored, 1) : bpt(c.bits_other, c.scored);
    std::printf("%-40s %12ju %9.4f %+8.3f%% %7.2f%% %10.2e %10.2e %11.2e %11.2e\n", a.models[i].c_str(),
                static_cast<uintmax_t>(std::filesystem::file_size(a.models[i])), bits,
                100.0 * (bits - base) / base, 100.0 * c.top1_rate(), c.kl_mean(), c.kl_max, c.dlogp_max,
                c.dnext_mean());
  }
  std::printf("\nKL in nats (KL(ref ‖ model)); max|Δlogp| over entries the reference gives p ≥ 1e-4; |Δlogp next|: "
              "mean over the tokens that came next.\n");
}

}  // namespace

void add_compare_command(CLI::App& app) {
  auto a = std::make_shared<CompareArgs>();
  CLI::App* sub = app.add_subcommand(
      "compare", "Compare models' next-token distributions with a reference's (e.g. q8/bf16 weights vs f32)");
  sub->footer(
      "Examples:\n  sqrtdk convert model.sqdk -o model-q8.sqdk --dtype q8\n"
      "  sqrtdk compare model.sqdk model-q8.sqdk model-bf16.sqdk --text valid.txt\n"
      "  sqrtdk compare random.sqdk random-q8.sqdk --random-tokens 1024 --json");
  sub->add_option("models", a->models, "reference model, then the models to compare with it")->required()->expected(2, -1);
  auto* text = sub->add_option("--text", a->text, "score this text file (bits per byte; needs a tokenizer)");
  // A window scores each position by the next token, so it needs two tokens; so does the whole run.
  sub->add_option("--random-tokens", a->random_tokens, "compare on N uniform random token ids (default 512)")
      ->check(at_least(2))
      ->excludes(text);
  sub->add_option("--seed", a->seed, "seed of the random tokens")->capture_default_str();
  sub->add_option("--window", a->window, "positions per window (default: min(max_seq, 512))")->check(at_least(2));
  sub->add_option("--max-tokens", a->max_tokens, "use at most this many tokens of the text")
      ->check(at_least(2))
      ->capture_default_str();
  sub->add_option("-t,--threads", a->threads, "threads (0 = default)")->check(number_in(0, 1024));
  sub->add_flag("--json", a->json, "print JSON");
  sub->callback([a] { run_compare(*a); });
}

}  // namespace sqrtdk::cli
