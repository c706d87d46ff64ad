// sqrtdk inspect FILE [--json] [--check] [--no-verify]: loads a .sqdk file with every check of the loader and prints
// its config, the tensor table (name, dtype, shape, bytes), the parameter count, the bytes stored per dtype
// (f32, f16, bf16, q8) and the checksum status.
// --check also counts NaN/Inf values per tensor and fails (exit 2) if any tensor holds one.
// A bad file: one line "sqrtdk: error: <path>: ..." on stderr, exit 2 (sqrtdk::Error propagates to main).
#include "tools/cli/cli_util.h"
#include "tools/cli/commands.h"
#include "tools/common/sigbus_report.h"

#include "models/family.h"

#include <sqrtdk/error.h>
#include <sqrtdk/format.h>
#include <sqrtdk/tokenizer.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <iterator>
#include <cstdio>
#include <memory>

namespace sqrtdk::cli {
namespace {

const char* tokenizer_kind_label(TokenizerKind kind) {
  switch (kind) {
    case TokenizerKind::none: return "none";
    case TokenizerKind::byte_level: return "byte_level";
    case TokenizerKind::bpe: return "bpe (tokenizer section)";
  }
  return "unknown";
}
const char* style_label(TokenizerStyle style) {
  return style == TokenizerStyle::byte_level_bpe ? "byte-level BPE" : "SentencePiece-style BPE";
}


struct InspectOptions {
  std::string path;
  bool json = false;
  bool check = false;
  bool no_verify = false;
};

std::string token_string(uint32_t id) { return id == kNoToken ? "none" : std::to_string(id); }

std::string with_commas(uint64_t v) {
  const std::string digits = std::to_string(v);
  std::string s;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) s.push_back(',');
    s.push_back(digits[i]);
  }
  return s;
}

void run_inspect(const InspectOptions& o) {
  LoadOptions load;
  load.verify_checksums = !o.no_verify;
  const auto t0 = std::chrono::steady_clock::now();
  tools::report_sigbus_for_model(o.path);
  const auto wf = WeightFile::open(o.path, load);
  const double load_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  const ModelConfig& c = wf->config();
  const auto& tensors = wf->tensors();

  std::vector<uint64_t> nonfinite(tensors.size(), 0);
  size_t n_bad = 0;
  if (o.check)
    for (size_t i = 0; i < tensors.size(); ++i) n_bad += (nonfinite[i] = wf->count_nonfinite(tensors[i])) != 0;
  uint64_t n_params = 0;
  for (const auto& t : tensors) n_params += t.n_elements();
  // Stored tensors and bytes by dtype, in dtype order (a q8 model: q8 linears, f32 norms, the head's type).
  struct TypeTotal {
    size_t n_tensors = 0;
    uint64_t bytes = 0;
  };
  constexpr DType kDTypes[] = {DType::f32, DType::f16, DType::bf16, DType::q8};
  TypeTotal by_dtype[std::size(kDTypes)];
  for (const auto& t : tensors) {
    by_dtype[static_cast<size_t>(t.dtype)].n_tensors += 1;
    by_dtype[static_cast<size_t>(t.dtype)].bytes += t.size;
  }

  if (o.json) {
    nlohmann::json j;
    j["path"] = wf->path();
    j["file_size"] = wf->file_size();
    j["format_version"] = wf->tokenizer() ? 2 : 1;
    j["config"] = {{"arch", arch_name(c.arch)},
                   {"d_model", c.d_model},
                   {"n_layers", c.n_layers},
                   {"n_heads", c.n_heads},
                   {"n_kv_heads", c.n_kv_heads},
                   {"head_dim", c.head_dim},
                   {"d_ff", c.d_ff},
                   {"n_vocab", c.n_vocab},
                   {"max_seq", c.max_seq},
                   {"norm_eps", c.norm_eps},
                   {"rope_theta", c.rope_theta},
                   {"tied_embeddings", c.tied_embeddings},
                   {"rope_interleaved", c.rope_interleaved},
                   {"tokenizer", tokenizer_kind_label(c.tokenizer)},
                   {"bos_id", c.bos_id == kNoToken ? nlohmann::json() : nlohmann::json(c.bos_id)},
                   {"eos_id", c.eos_id == kNoToken ? nlohmann::json() : nlohmann::json(c.eos_id)},
                   {"attention_scale",  // null: the default 1/sqrt(head_dim)
                    c.attention_scale ? nlohmann::json(*c.attention_scale) : nlohmann::json()}};
    if (const TokenizerSpec* t = wf->tokenizer()) {
      auto id = [](uint32_t v) { return v == kNoToken ? nlohmann::json() : nlohmann::json(v); };
      j["tokenizer"] = {{"style", style_label(t->style)},
                        {"pieces", t->vocab.size()},
                        {"merges", t->merges.size()},
                        {"added_tokens", t->added.size()},
                        {"split_regex", t->split_regex},
                        {"nfc", t->nfc},
                        {"add_prefix_space", t->add_prefix_space},
                        {"ignore_merges", t->ignore_merges},
                        {"byte_fallback", t->byte_fallback},
                        {"unk_id", id(t->unk_id)},
                        {"bos_id", id(t->bos_id)},
                        {"eos_id", id(t->eos_id)},
                        {"pad_id", id(t->pad_id)},
                        {"add_bos", t->add_bos},
                        {"add_eos", t->add_eos},
                        {"chat_template", chat_template_name(t->chat_template)},
                        {"end_of_turn_ids", t->end_of_turn_ids}};
    }
    j["n_params"] = n_params;
    nlohmann::json types = nlohmann::json::object();
    for (DType d : kDTypes)
      if (const TypeTotal& tt = by_dtype[static_cast<size_t>(d)]; tt.n_tensors)
        types[dtype_name(d)] = {{"tensors", tt.n_tensors}, {"bytes", tt.bytes}};
    j["bytes_by_dtype"] = std::move(types);
    j["checksums"] = wf->checksums_verified() ? "verified" : "not verified";
    j["load_ms"] = load_ms;
    nlohmann::json list = nlohmann::json::array();
    for (size_t i = 0; i < tensors.size(); ++i) {
      const auto& t = tensors[i];
      nlohmann::json e = {{"name", t.name}, {"dtype", dtype_name(t.dtype)}, {"shape", t.shape},
                          {"offset", t.offset}, {"bytes", t.size},     {"crc32", t.crc32}};
      if (o.check) e["nonfinite"] = nonfinite[i];
      list.push_back(std::move(e));
    }
    j["tensors"] = std::move(list);
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("file        %s (%s bytes, format version %d)\n", wf->path().c_str(), with_commas(wf->file_size()).c_str(),
                wf->tokenizer() ? 2 : 1);
    std::printf("arch        %s\n", arch_name(c.arch));
    std::printf("sizes       d_model %u, n_layers %u, n_heads %u, n_kv_heads %u, head_dim %u, d_ff %u, n_vocab %u, "
                "max_seq %u\n",
                c.d_model, c.n_layers, c.n_heads, c.n_kv_heads, c.head_dim, c.d_ff, c.n_vocab, c.max_seq);
    std::printf("norm_eps    %g\nrope_theta  %g%s\n", static_cast<double>(c.norm_eps), static_cast<double>(c.rope_theta),
                c.rope_interleaved ? " (interleaved pairs)" : find_family(c.arch) && find_family(c.arch)->uses_rope ? " (rotate-half)" : "");
    if (c.attention_scale)
      std::printf("attention   scale %g (the file's attention_scale; the default would be 1/sqrt(%u))\n",
                  static_cast<double>(*c.attention_scale), c.head_dim);
    else
      std::printf("attention   scale 1/sqrt(%u) = %g (default)\n", c.head_dim,
                  static_cast<double>(c.attention_scale_or_default()));
    std::printf("embeddings  %s\n", c.tied_embeddings ? "tied (output head = tok_emb)" : "separate lm_head");
    std::printf("tokenizer   %s, bos %s, eos %s\n", tokenizer_kind_label(c.tokenizer), token_string(c.bos_id).c_str(),
                token_string(c.eos_id).c_str());
    if (const TokenizerSpec* t = wf->tokenizer()) {
      auto piece = [&](uint32_t id) {
        if (id == kNoToken) return std::string("none");
        for (const AddedToken& a : t->added)
          if (a.id == id) return std::to_string(id) + " " + a.content;
        return std::to_string(id) + (id < t->vocab.size() ? " " + t->vocab[id] : std::string());
      };
      std::printf("            %s: %s pieces, %s merges, %zu added tokens%s%s%s%s\n", style_label(t->style),
                  with_commas(t->vocab.size()).c_str(), with_commas(t->merges.size()).c_str(), t->added.size(),
                  t->nfc ? ", NFC" : "", t->add_prefix_space ? ", prefix space" : "",
                  t->ignore_merges ? ", ignore_merges" : "", t->byte_fallback ? ", byte fallback" : "");
      std::printf("            bos %s, eos %s, add BOS %s, add EOS %s, chat template %s\n", piece(t->bos_id).c_str(),
                  piece(t->eos_id).c_str(), t->add_bos ? "yes" : "no", t->add_eos ? "yes" : "no",
                  chat_template_name(t->chat_template));
      if (!t->split_regex.empty()) std::printf("            split regex %s\n", t->split_regex.c_str());
    }
    std::printf("parameters  %s in %zu tensors\n", with_commas(n_params).c_str(), tensors.size());
    std::string types;
    for (DType d : kDTypes)
      if (const TypeTotal& tt = by_dtype[static_cast<size_t>(d)]; tt.n_tensors)
        types += (types.empty() ? "" : ", ") + std::string(dtype_name(d)) + " " + with_commas(tt.bytes) +
                 " bytes in " + std::to_string(tt.n_tensors) + " tensor" + (tt.n_tensors == 1 ? "" : "s");
    std::printf("dtypes      %s\n", types.c_str());
    if (wf->checksums_verified())
      std::printf("checksums   verified (CRC-32 of the header and every tensor; load took %.1f ms)\n", load_ms);
    else
      std::printf("checksums   not verified (--no-verify)\n");
    size_t w = 4;
    for (const auto& t : tensors) w = std::max(w, t.name.size());
    std::printf("\n%-*s  %-5s  %-20s  %12s%s\n", static_cast<int>(w), "name", "dtype", "shape", "bytes",
                o.check ? "  nan/inf" : "");
    for (size_t i = 0; i < tensors.size(); ++i) {
      const auto& t = tensors[i];
      std::printf("%-*s  %-5s  %-20s  %12s", static_cast<int>(w), t.name.c_str(), dtype_name(t.dtype),
                  t.shape_string().c_str(), with_commas(t.size).c_str());
      if (o.check) std::printf("  %llu", static_cast<unsigned long long>(nonfinite[i]));
      std::printf("\n");
    }
    if (o.check) std::printf("\nfinite check: %zu tensor(s) hold NaN or Inf\n", n_bad);
  }
  std::fflush(stdout);
  if (n_bad != 0) {
    std::string names;
    for (size_t i = 0; i < tensors.size(); ++i)
      if (nonfinite[i]) names += (names.empty() ? "'" : ", '") + tensors[i].name + "'";
    throw Error(wf->path() + ": " + std::to_string(n_bad) + " tensor(s) hold NaN or Inf: " + names);
  }
}

}  // namespace

void add_inspect_command(CLI::App& app) {
  auto o = std::make_shared<InspectOptions>();
  CLI::App* sub = app.add_subcommand("inspect", "Validate a .sqdk file and print its config and tensor table");
  sub->footer("Examples:\n  sqrtdk inspect                       # the bundled model\n"
              "  sqrtdk inspect model.sqdk --check    # also count NaN/Inf per tensor\n"
              "  sqrtdk inspect --model model.sqdk --json");
  // FILE or --model FILE (the flag every other subcommand takes); neither: the bundled model.
  auto* file = sub->add_option("file", o->path, "The .sqdk file (default: the bundled model)")
                   ->check(non_empty("give a model file, or leave the option out for the bundled model"));
  sub->add_option("-m,--model", o->path, "same as FILE")->check(non_empty("give a model file, or leave the option out for the bundled model"))->excludes(file);
  o->path = default_model_path();
  sub->add_flag("--json", o->json, "Print JSON instead of a table");
  sub->add_flag("--check", o->check, "Count NaN/Inf values per tensor; exit 2 if any tensor holds one");
  sub->add_flag("--no-verify", o->no_verify, "Skip CRC-32 verification (structure is still checked)");
  sub->callback([o] { run_inspect(*o); });
}

}  // namespace sqrtdk::cli
