// sqrtdk convert HF_DIR -o FILE.sqdk [--dtype f32|f16|bf16] [--quiet]: a Hugging Face checkpoint folder
// (config.json + model.safetensors or its shards) -> .sqdk. The work is <sqrtdk/convert.h>; this file is the
// command line around it: a progress bar on stderr (only on a terminal, not with --quiet) and a one-line summary.
#include "tools/cli/cli_util.h"
#include "tools/cli/commands.h"

#include <sqrtdk/format.h>

#include <sqrtdk/convert.h>

#include <chrono>
#include <cstdio>
#include <memory>

namespace sqrtdk::cli {
namespace {

struct ConvertArgs {
  std::string hf_dir, out, dtype;
  bool quiet = false;
};

void run_convert(const ConvertArgs& a) {
  ConvertOptions options;
  if (!a.dtype.empty()) options.dtype = parse_dtype(a.dtype);
  std::unique_ptr<Progress> progress;
  options.progress = [&](uint64_t done, uint64_t total) {
    if (!progress) progress = std::make_unique<Progress>("converting", static_cast<size_t>(total), a.quiet);
    progress->update(static_cast<size_t>(done));
  };
  const auto start = std::chrono::steady_clock::now();
  const ConvertResult r = convert_hf_checkpoint(a.hf_dir, a.out, options);
  progress.reset();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("wrote %s: %s, %llu parameters, %s, %zu tensors, %.1f MB in %.2f s (%.0f MB/s read)", a.out.c_str(),
              arch_name(r.config.arch), static_cast<unsigned long long>(r.config.n_params()), dtype_name(r.dtype),
              r.n_tensors, r.file_size / 1e6, seconds, seconds > 0 ? r.bytes_read / 1e6 / seconds : 0.0);
  if (!r.skipped.empty()) std::printf("; skipped %zu unused tensors (e.g. %s)", r.skipped.size(), r.skipped[0].c_str());
  std::printf("\n");
}

}  // namespace

void add_convert_command(CLI::App& app) {
  auto a = std::make_shared<ConvertArgs>();
  CLI::App* sub = app.add_subcommand("convert", "Convert a Hugging Face checkpoint folder (GPT-2, Llama) to .sqdk");
  sub->footer("Examples:\n  sqrtdk convert ./gpt2 -o gpt2.sqdk\n"
              "  sqrtdk convert ./TinyLlama -o tinyllama-bf16.sqdk --dtype bf16\n"
              "The file is written to a temporary name in the target folder, fsynced, then renamed: a killed\n"
              "conversion never leaves a partial file under the final name.");
  sub->add_option("hf_dir", a->hf_dir, "Folder with config.json and model.safetensors (or its shards + index)")
      ->required();
  sub->add_option("-o,--output", a->out, "Output .sqdk file")->required();
  sub->add_option("--dtype", a->dtype, "Output dtype f32, f16 or bf16 (default: the checkpoint's, if uniform, else f32)")
      ->check(CLI::IsMember({"f32", "f16", "bf16"}));
  sub->add_flag("-q,--quiet", a->quiet, "No progress bar");
  sub->callback([a] { run_convert(*a); });
}

}  // namespace sqrtdk::cli
