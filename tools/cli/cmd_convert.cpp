// sqrtdk convert INPUT -o FILE.sqdk [--dtype f32|f16|bf16] [--quiet]: a Hugging Face checkpoint folder
// (config.json + model.safetensors or its shards) or a llama.cpp GGUF file -> .sqdk. The work is
// <sqrtdk/convert.h>; this file is the command line around it: which importer (a regular file whose first 4 bytes
// are "GGUF" is a GGUF file, whatever its name; anything else goes to the Hugging Face importer), a progress bar on
// stderr (only on a terminal, not with --quiet) and a one-line summary.
#include "tools/cli/cli_util.h"
#include "tools/cli/commands.h"

#include <sqrtdk/format.h>

#include <sqrtdk/convert.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>

namespace sqrtdk::cli {
namespace {

struct ConvertArgs {
  std::string input, out, dtype;
  bool quiet = false;
  bool no_tokenizer = false;
};

// A regular file that starts with the GGUF magic (the extension alone says nothing).
bool is_gguf_file(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return false;
  char magic[4] = {};
  std::ifstream in(path, std::ios::binary);
  return in.read(magic, 4) && std::memcmp(magic, "GGUF", 4) == 0;
}

void run_convert(const ConvertArgs& a) {
  ConvertOptions options;
  if (!a.dtype.empty()) options.dtype = parse_dtype(a.dtype);
  options.with_tokenizer = !a.no_tokenizer;
  std::unique_ptr<Progress> progress;
  options.progress = [&](uint64_t done, uint64_t total) {
    if (!progress) progress = std::make_unique<Progress>("converting", static_cast<size_t>(total), a.quiet);
    progress->update(static_cast<size_t>(done));
  };
  const auto start = std::chrono::steady_clock::now();
  const ConvertResult r = is_gguf_file(a.input) ? convert_gguf(a.input, a.out, options)
                                                : convert_hf_checkpoint(a.input, a.out, options);
  progress.reset();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("wrote %s: %s, %llu parameters, %s, %zu tensors, %.1f MB in %.2f s (%.0f MB/s read)", a.out.c_str(),
              arch_name(r.config.arch), static_cast<unsigned long long>(r.config.n_params()), dtype_name(r.dtype),
              r.n_tensors, r.file_size / 1e6, seconds, seconds > 0 ? r.bytes_read / 1e6 / seconds : 0.0);
  if (!r.skipped.empty()) std::printf("; skipped %zu unused tensors (e.g. %s)", r.skipped.size(), r.skipped[0].c_str());
  std::printf("\ntokenizer: %s\n", r.tokenizer.empty() ? (a.no_tokenizer ? "not stored (--no-tokenizer)"
                                                                          : "none found (the model takes token ids)")
                                                        : r.tokenizer.c_str());
}

}  // namespace

void add_convert_command(CLI::App& app) {
  auto a = std::make_shared<ConvertArgs>();
  CLI::App* sub =
      app.add_subcommand("convert", "Convert a Hugging Face checkpoint folder or a GGUF file (GPT-2, Llama) to .sqdk");
  sub->footer("Examples:\n  sqrtdk convert ./gpt2 -o gpt2.sqdk\n"
              "  sqrtdk convert ./TinyLlama -o tinyllama-bf16.sqdk --dtype bf16\n"
              "  sqrtdk convert tinyllama-q8_0.gguf -o tinyllama.sqdk\n"
              "GGUF (llama.cpp, version 2 or 3): architectures llama and gpt2, tensor types F32, F16, BF16 and Q8_0\n"
              "(dequantized; default output f32 unless every tensor shares F32, F16 or BF16); other types, other\n"
              "architectures and RoPE scaling are refused with the reason.\n"
              "The file is written to a temporary name in the target folder, fsynced, then renamed: a killed\n"
              "conversion never leaves a partial file under the final name.");
  sub->add_option("input", a->input,
                  "Folder with config.json and model.safetensors (or its shards + index), or a GGUF file")
      ->required();
  sub->add_option("-o,--output", a->out, "Output .sqdk file")->required();
  sub->add_option("--dtype", a->dtype, "Output dtype f32, f16 or bf16 (default: the checkpoint's, if uniform, else f32)")
      ->check(CLI::IsMember({"f32", "f16", "bf16"}));
  sub->add_flag("-q,--quiet", a->quiet, "No progress bar");
  sub->add_flag("--no-tokenizer", a->no_tokenizer,
                "Do not store the tokenizer (by default: tokenizer.json + tokenizer_config.json, vocab.json + "
                "merges.txt, or tokenizer.model from the folder; tokenizer.ggml.* from a GGUF file)");
  sub->callback([a] { run_convert(*a); });
}

}  // namespace sqrtdk::cli
