#include "tools/cli/cli_util.h"

#include <sqrtdk/tokenizer.h>

#include "tools/cli/commands.h"
#include "tools/common/sigbus_report.h"

#include <sqrtdk/error.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

namespace sqrtdk::cli {

void ModelArgs::add_to(CLI::App& cmd, bool with_threads, bool with_attention_paths) {
  cmd.add_option("-m,--model", model, "model file (.sqdk); default: the bundled model")
      ->check(non_empty("give a model file, or leave the option out for the bundled model"))
      ->capture_default_str();
  if (with_threads) cmd.add_option("-t,--threads", threads, "threads (0: all cores)")->check(number_in(0, 1024));
  cmd.add_option("--isa", isa, "force an ISA (any listed; default: the best this CPU has, or SQRTDK_ISA)")
      ->check(isa_name_check());
  cmd.add_flag("--no-verify", no_verify, "skip the per-tensor CRC-32 check at load");
  cmd.add_flag("--check-finite", check_finite, "refuse a model whose weights hold NaN or Inf (names the tensor)");
  cmd.add_option("--max-model-mb", max_model_mb, "refuse model files larger than this (MiB; 0 = no cap)")
      ->check(at_least(0, false));
  if (!with_attention_paths) return;
  cmd.add_option("--attention-paths", attention_paths,
                 "fused vs unfused attention per shape: cached (this machine's measured table if any, else the "
                 "built-in rule), calibrate (measure if not cached), recalibrate, builtin")
      ->check(CLI::IsMember({"cached", "calibrate", "recalibrate", "builtin"}))
      ->capture_default_str();
}

AttentionPaths parse_attention_paths(const std::string& name) {
  if (name == "calibrate") return AttentionPaths::calibrate;
  if (name == "recalibrate") return AttentionPaths::recalibrate;
  if (name == "builtin") return AttentionPaths::builtin;
  return AttentionPaths::cached;
}

std::shared_ptr<const Model> ModelArgs::load() const {
  ModelOptions options;
  options.load.verify_checksums = !no_verify;
  options.load.check_finite = check_finite;
  // Rounded up: a cap under one byte is still a cap (0 alone means none).
  options.load.max_bytes = static_cast<uint64_t>(std::ceil(max_model_mb * 1048576.0));
  options.n_threads = threads;
  if (!isa.empty()) options.isa = static_cast<int>(parse_isa(isa));
  options.attention_paths = parse_attention_paths(attention_paths);
  const std::string path = model.empty() ? default_model_path() : model;
  tools::report_sigbus_for_model(path);
  return Model::load(path, options);
}

void PromptArgs::add_to(CLI::App& cmd, const std::string& default_prompt) {
  prompt = default_prompt;
  auto* p = cmd.add_option("-p,--prompt", prompt, "prompt text (models with a tokenizer)")->capture_default_str();
  cmd.add_option("--tokens", tokens, "prompt as comma-separated token ids, e.g. 5,17,42")
      ->check(non_empty("give comma-separated token ids"))
      ->excludes(p);
}

std::vector<uint32_t> parse_token_list(const std::string& text, const std::string& flag) {
  std::vector<uint32_t> ids;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');) {
    size_t used = 0;
    unsigned long long v = 0;
    try {
      v = std::stoull(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != item.size() || v > 0xFFFFFFFEull)
      throw CLI::ValidationError(flag, "'" + item + "' is not a" +
                                           (flag == "--tokens" || flag == "--stop" ? " token id" : "n integer ≥ 0") +
                                           (flag == "--stop" ? " (stop at a text: --stop-text)" : ""));
    ids.push_back(static_cast<uint32_t>(v));
  }
  if (ids.empty()) throw CLI::ValidationError(flag, "no values given");
  // getline drops an empty last item: "1,2," would pass as "1,2" where "1,,2" is refused.
  if (text.back() == ',') throw CLI::ValidationError(flag, "'" + text + "' ends with a comma");
  return ids;
}

std::vector<uint32_t> PromptArgs::resolve(const Model& model) const {
  if (!tokens.empty()) return parse_token_list(tokens);
  if (!model.tokenizer())
    throw Error(model.path() + ": this model has no tokenizer: pass token ids with --tokens (convert it from a folder "
                "with tokenizer.json, or from a GGUF file, to store one)");
  return model.tokenizer()->encode(prompt, /*add_special=*/true);
}

std::string token_text(const Model& model, uint32_t id) {
  const Tokenizer* t = model.tokenizer();
  const ModelConfig& c = model.config();
  if (id == c.bos_id && (!t || t->kind_name() == std::string_view("bytes"))) return "<bos>";
  if (id == c.eos_id && (!t || t->kind_name() == std::string_view("bytes"))) return "<eos>";
  if (!t || id >= t->vocab_size()) return "#" + std::to_string(id);
  if (t->is_special(id) && !t->piece(id).empty()) return std::string(t->piece(id));
  return "'" + escaped_bytes(t->token_bytes(id)) + "'";
}

std::string escaped_bytes(std::string_view bytes, bool keep_utf8) {
  std::string out;
  for (unsigned char ch : bytes) {
    if ((ch >= 32 && ch < 127 && ch != '\\') || (keep_utf8 && ch >= 0x80)) {
      out.push_back(static_cast<char>(ch));
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", ch);
      out += buf;
    }
  }
  return out;
}

void write_npy(const std::string& path, const float* data, const std::vector<size_t>& shape) {
  std::string dims;
  size_t count = 1;
  for (size_t d : shape) {
    dims += std::to_string(d) + ",";
    count *= d;
  }
  if (shape.size() > 1) dims.pop_back();
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + dims + "), }";
  // Magic (6) + version (2) + header length (2) + header, padded with spaces and ended by \n to a multiple of 64.
  const size_t total = (10 + header.size() + 1 + 63) / 64 * 64;
  header.append(total - 10 - header.size() - 1, ' ');
  header.push_back('\n');
  std::ofstream out(path, std::ios::binary);
  if (!out) throw Error(path + ": cannot open for writing");
  const uint16_t len = static_cast<uint16_t>(header.size());
  out.write("\x93NUMPY\x01\x00", 8);
  out.put(static_cast<char>(len & 0xFF));
  out.put(static_cast<char>(len >> 8));
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(count * sizeof(float)));
  if (!out) throw Error(path + ": write failed");
}

}  // namespace sqrtdk::cli

#include <sys/resource.h>
#include <unistd.h>

namespace sqrtdk::cli {

Progress::Progress(std::string label, size_t total, bool quiet)
    : label_(std::move(label)), total_(total), enabled_(!quiet && isatty(STDERR_FILENO) && total > 0) {}

void Progress::update(size_t done) {
  if (!enabled_) return;
  const int percent = static_cast<int>(100 * std::min(done, total_) / total_);
  if (percent == last_percent_) return;
  last_percent_ = percent;
  const int width = 30, filled = percent * width / 100;
  std::fprintf(stderr, "\r%s [%s%s] %3d%%", label_.c_str(), std::string(filled, '#').c_str(),
               std::string(width - filled, ' ').c_str(), percent);
  std::fflush(stderr);
}

Progress::~Progress() {
  if (enabled_ && last_percent_ >= 0) std::fprintf(stderr, "\r%s\r", std::string(label_.size() + 40, ' ').c_str());
}

std::vector<uint32_t> synthetic_tokens(const ModelConfig& config, size_t n) {
  std::vector<uint32_t> ids(n);
  static const char text[] = "The quick brown fox jumps over the lazy dog. Once upon a time, there was a small engine. ";
  for (size_t i = 0; i < n; ++i)
    ids[i] = config.tokenizer == TokenizerKind::byte_level
                 ? static_cast<unsigned char>(text[i % (sizeof text - 1)])
                 : static_cast<uint32_t>((i * 7919 + 13) % config.n_vocab);
  return ids;
}

CLI::Validator number_in(double lo, double hi, bool integer, bool lo_open) {
  auto fmt = [](double v) {
    if (v == std::floor(v) && std::fabs(v) < 1e15) return std::to_string(static_cast<long long>(v));  // 4294967294
    std::ostringstream o;
    o << v;
    return o.str();
  };
  std::string expected = std::string(integer ? "an integer" : "a number") + (lo_open ? " > " : " ≥ ") + fmt(lo);
  if (hi < 1e18) expected += " and ≤ " + fmt(hi);
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        size_t used = 0;
        double v = 0;
        try {
          v = std::stod(text, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        const bool ok = used == text.size() && used > 0 && std::isfinite(v) && (lo_open ? v > lo : v >= lo) &&
                        v <= hi && (!integer || v == std::floor(v));
        if (ok) return std::string();
        // at_least's ceiling (1e18: what still converts to every integer option's type) is not in `expected`;
        // a value above it is told so, not "expected a number ≥ 0".
        const bool above = used == text.size() && used > 0 && std::isfinite(v) && v > hi && hi >= 1e18;
        return "expected " + expected + (above ? " and ≤ " + fmt(hi) : "") + ", got '" + text + "'";
      },
      expected);
}

CLI::Validator isa_name_check() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        for (Isa isa : all_isas())
          if (text == isa_name(isa))
            return cpu_supports(isa) ? std::string()
                                     : "this CPU does not support " + text + " (best here: " +
                                           isa_name(default_isa()) + ")";
        return "expected ref, avx2, avx512, avx512_vnni or avx512_bf16, got '" + text + "'";
      },
      "ref|avx2|avx512|avx512_vnni|avx512_bf16");
}

std::vector<uint32_t> clamp_default_lengths(const std::vector<uint32_t>& lengths, uint32_t limit) {
  std::vector<uint32_t> kept;
  for (uint32_t n : lengths)
    if (n <= limit) kept.push_back(n);
  if (kept.empty()) kept.push_back(limit);
  return kept;
}

size_t peak_rss_bytes() {
  // VmHWM rather than getrusage's ru_maxrss: VmHWM can be reset (reset_peak_rss), so a benchmark can leave out
  // its own calibration buffers.
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmHWM:", 0) == 0) return static_cast<size_t>(std::stoull(line.substr(6))) * 1024;  // kB
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<size_t>(ru.ru_maxrss) * 1024;  // Linux reports KiB
}

bool reset_peak_rss() {
  std::ofstream clear("/proc/self/clear_refs");  // "5": reset the peak RSS to the current RSS (Linux ≥ 4.0)
  return static_cast<bool>(clear << "5" << std::flush);
}

}  // namespace sqrtdk::cli

#include <linux/perf_event.h>
#include <sys/syscall.h>

namespace sqrtdk::cli {

bool hw_counters_available() {
  perf_event_attr attr{};
  attr.type = PERF_TYPE_HARDWARE;
  attr.size = sizeof attr;
  attr.config = PERF_COUNT_HW_CPU_CYCLES;
  attr.disabled = 1;
  attr.exclude_kernel = 1;
  attr.exclude_hv = 1;
  const long fd = syscall(SYS_perf_event_open, &attr, 0, -1, -1, 0);
  if (fd < 0) return false;
  close(static_cast<int>(fd));
  return true;
}

}  // namespace sqrtdk::cli
