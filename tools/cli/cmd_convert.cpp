// sqrtdk convert INPUT -o FILE.sqdk [--dtype f32|f16|bf16|q8] [--head-dtype ...] [--quiet]: a Hugging Face
// checkpoint folder (config.json + model.safetensors or its shards), a llama.cpp GGUF file or a .sqdk file (re-typed)
// -> .sqdk. The work is <sqrtdk/convert.h>; this file is the command line around it: which importer (a regular file
// whose first 4 bytes are "GGUF" is a GGUF file and one starting with "SQDK" a .sqdk file, whatever its name;
// anything else goes to the Hugging Face importer), a progress bar on
// stderr (only on a terminal, not with --quiet) and a one-line summary.
#include "tools/cli/cli_util.h"
#include "tools/cli/commands.h"

#include <sqrtdk/error.h>
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
  std::string input, out, dtype, head_dtype;
  bool quiet = false;
  bool no_tokenizer = false;
};

// A regular file that starts with `magic` (the extension alone says nothing).
bool file_starts_with(const std::string& path, const char (&magic)[5]) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return false;
  char head[4] = {};
  std::ifstream in(path, std::ios::binary);
  return in.read(head, 4) && std::memcmp(head, magic, 4) == 0;
}

void run_convert(const ConvertArgs& a) {
  ConvertOptions options;
  if (!a.dtype.empty()) options.dtype = parse_dtype(a.dtype);
  if (!a.head_dtype.empty()) options.head_dtype = parse_dtype(a.head_dtype);
  options.with_tokenizer = !a.no_tokenizer;
  std::unique_ptr<Progress> progress;
  options.progress = [&](uint64_t done, uint64_t total) {
    if (!progress) progress = std::make_unique<Progress>("converting", static_cast<size_t>(total), a.quiet);
    progress->update(static_cast<size_t>(done));
  };
  const bool gguf = file_starts_with(a.input, "GGUF"), sqdk = !gguf && file_starts_with(a.input, "SQDK");
  // What is neither magic nor a folder: say what was looked for (the folder importer alone said "not a folder").
  std::error_code ec;
  if (!gguf && !sqdk && std::filesystem::exists(a.input, ec) && !std::filesystem::is_directory(a.input, ec))
    throw Error(ErrorKind::bad_file, a.input + ": not a .sqdk file (magic SQDK), a GGUF file (magic GGUF) or a "
                                               "Hugging Face checkpoint folder");
  const auto start = std::chrono::steady_clock::now();
  const ConvertResult r = gguf   ? convert_gguf(a.input, a.out, options)
                          : sqdk ? convert_sqdk(a.input, a.out, options)
                                 : convert_hf_checkpoint(a.input, a.out, options);
  progress.reset();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const std::string types = r.head_dtype == r.dtype ? std::string(dtype_name(r.dtype))
                                                   : std::string(dtype_name(r.dtype)) + " (embeddings and head " +
                                                         dtype_name(r.head_dtype) + ")";
  std::printf("wrote %s: %s, %llu parameters, %s, %zu tensors, %.1f MB in %.2f s (%.0f MB/s read)", a.out.c_str(),
              arch_name(r.config.arch), static_cast<unsigned long long>(r.config.n_params()), types.c_str(),
              r.n_tensors, r.file_size / 1e6, seconds, seconds > 0 ? r.bytes_read / 1e6 / seconds : 0.0);
  if (!r.skipped.empty()) std::printf("; skipped %zu unused tensors (e.g. %s)", r.skipped.size(), r.skipped[0].c_str());
  std::printf("\ntokenizer: %s\n", r.tokenizer.empty() ? (a.no_tokenizer ? "not stored (--no-tokenizer)"
                                                                          : "none found (the model takes token ids)")
                                                        : r.tokenizer.c_str());
}

}  // namespace

void add_convert_command(CLI::App& app) {
  auto a = std::make_shared<ConvertArgs>();
  CLI::App* sub = app.add_subcommand(
      "convert", "Convert a Hugging Face checkpoint folder, a GGUF file (GPT-2, Llama) or a .sqdk file to .sqdk");
  sub->footer("Examples:\n  sqrtdk convert ./gpt2 -o gpt2.sqdk\n"
              "  sqrtdk convert ./TinyLlama -o tinyllama-bf16.sqdk --dtype bf16\n"
              "  sqrtdk convert tinyllama-q8_0.gguf -o tinyllama.sqdk\n"
              "  sqrtdk convert model.sqdk -o model-q8.sqdk --dtype q8 --head-dtype bf16\n"
              "Types: f32, f16, bf16 store every tensor in that type. q8 (int8 blocks of 32 with an f16 scale,\n"
              "GGUF's Q8_0) stores the linear layers' weight matrices as q8 (their last dimension must be a multiple\n"
              "of 32) and keeps norms and biases f32; --head-dtype sets the embeddings' and lm head's type (default:\n"
              "the same as --dtype). bf16 and q8 linear layers run natively (bf16/int8 GEMM kernels).\n"
              "GGUF (llama.cpp, version 2 or 3): architectures llama and gpt2, tensor types F32, F16, BF16 and Q8_0.\n"
              "A tensor kept in its own type is copied (Q8_0 -> q8 block for block, no requantization). Default\n"
              "output: q8 if every linear weight is Q8_0 (embeddings and head q8 if Q8_0, else f32), else the\n"
              "tensors' type if they share F32, F16 or BF16, else f32. Other types, other architectures and RoPE\n"
              "scaling are refused with the reason.\n"
              "A .sqdk input (the SQDK magic) is re-typed: the default keeps each tensor's type.\n"
              "The file is written to a temporary name in the target folder, fsynced, then renamed: a killed\n"
              "conversion never leaves a partial file under the final name.");
  sub->add_option("input", a->input,
                  "Folder with config.json and model.safetensors (or its shards + index), a GGUF file or a .sqdk file")
      ->required();
  sub->add_option("-o,--output", a->out, "Output .sqdk file")->required()->check(non_empty("give the file to write"));
  sub->add_option("--dtype", a->dtype,
                  "Output dtype f32, f16, bf16 or q8 (default: the checkpoint's, if uniform, else f32; see below)")
      ->check(CLI::IsMember({"f32", "f16", "bf16", "q8"}));
  sub->add_option("--head-dtype", a->head_dtype,
                  "dtype of the embeddings and lm head: f32, f16, bf16 or q8 (default: the same as --dtype)")
      ->check(CLI::IsMember({"f32", "f16", "bf16", "q8"}));
  sub->add_flag("-q,--quiet", a->quiet, "No progress bar");
  sub->add_flag("--no-tokenizer", a->no_tokenizer,
                "Do not store the tokenizer (by default: tokenizer.json + tokenizer_config.json, vocab.json + "
                "merges.txt, or tokenizer.model from the folder; tokenizer.ggml.* from a GGUF file)");
  sub->callback([a] { run_convert(*a); });
}

}  // namespace sqrtdk::cli
