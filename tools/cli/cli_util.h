// Helpers shared by the CLI subcommands: model/prompt options, token-list parsing, .npy output.
#pragma once

#include <sqrtdk/generate.h>
#include <sqrtdk/model.h>
#include <sqrtdk/session.h>

#include "tools/common/usage_error.h"

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace sqrtdk::cli {

// --model, --threads, --isa, --no-verify: shared by every subcommand that runs a model.
struct ModelArgs {
  std::string model;
  int threads = 0;
  std::string isa;
  bool no_verify = false;
  bool check_finite = false;
  double max_model_mb = 0;
  std::string attention_paths = "cached";  // ModelOptions::attention_paths by name
  // with_threads false: the subcommand defines its own --threads (e.g. a list). with_attention_paths false: the
  // subcommand sets attention_paths itself (sqrtdk calibrate).
  void add_to(CLI::App& cmd, bool with_threads = true, bool with_attention_paths = true);
  std::shared_ptr<const Model> load() const;
};

// --prompt TEXT or --tokens IDS (comma-separated).
struct PromptArgs {
  std::string prompt;
  std::string tokens;
  void add_to(CLI::App& cmd, const std::string& default_prompt);
  // Token ids for the model: --tokens as given (each checked < n_vocab), else the prompt through the model's
  // tokenizer (BOS as the tokenizer adds it); a model without a tokenizer needs --tokens.
  std::vector<uint32_t> resolve(const Model& model) const;
};

// Comma-separated token ids (or counts); errors name `flag`.
std::vector<uint32_t> parse_token_list(const std::string& text, const std::string& flag = "--tokens");

// How a token prints: quoted text with non-printable bytes escaped ('\x0a'; the byte tokenizer's bytes, a BPE
// token's bytes), "<bos>"/"<eos>" or a special token's own name, else "#id" (no tokenizer).
std::string token_text(const Model& model, uint32_t id);
// Bytes as printable text: printable ASCII (and, with keep_utf8, bytes >= 0x80) as they are, others as \xNN.
std::string escaped_bytes(std::string_view bytes, bool keep_utf8 = false);

// Writes a float32 array of the given shape as a NumPy .npy file (version 1.0, little-endian, C order).
void write_npy(const std::string& path, const float* data, const std::vector<size_t>& shape);

}  // namespace sqrtdk::cli

namespace sqrtdk::cli {

// A progress bar on stderr, drawn only when stderr is a terminal and not --quiet.
class Progress {
 public:
  Progress(std::string label, size_t total, bool quiet);
  void update(size_t done);
  ~Progress();

 private:
  std::string label_;
  size_t total_;
  bool enabled_;
  int last_percent_ = -1;
};

// Synthetic prompt of n tokens for benchmarks: the byte-level text repeated, or ids cycling through the vocabulary.
std::vector<uint32_t> synthetic_tokens(const ModelConfig& config, size_t n);

// Option checks with one-line messages that say what was expected ("--reps: expected an integer ≥ 1, got '0'";
// CLI11 2.1's PositiveNumber prints its range to 300 digits). The value must parse as a number and lie in
// [lo, hi] ((lo, hi] with lo_open); `integer` also refuses fractions. NaN and infinities never pass.
CLI::Validator number_in(double lo, double hi, bool integer = true, bool lo_open = false);
inline CLI::Validator at_least(double lo, bool integer = true) { return number_in(lo, 1e18, integer); }
// An option given as "" is a mistake (an unset shell variable), never a silent "not given": tools::non_empty
// (tools/common/usage_error.h) refuses it, saying what to give instead.
using tools::non_empty;

// Room to reserve per forward call in a Profiler (more than the ops of one call: fewer than 24 per layer, plus
// the embedding, lm head and step slices), so recording never allocates inside a timed run.
// --isa: ref, avx2 or avx512, and one this CPU supports; a usage error (exit 1) otherwise.
CLI::Validator isa_name_check();

// Lengths over `limit` in a default list (e.g. bench's prefill 32,128,512 on a 256-token model) are dropped, or
// clamped to `limit` if none fits; returns the kept list.
std::vector<uint32_t> clamp_default_lengths(const std::vector<uint32_t>& lengths, uint32_t limit);

inline size_t profiler_events_per_call(const ModelConfig& c) { return 24 * size_t{c.n_layers} + 16; }

size_t peak_rss_bytes();  // the process's peak resident set since start or the last reset_peak_rss()
bool reset_peak_rss();     // false where the kernel does not allow it

}  // namespace sqrtdk::cli
