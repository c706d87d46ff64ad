// sqrtdk attention-map: heatmaps of one layer's attention probabilities for a prompt (every head, or one), as an
// SVG (and a PNG when rsvg-convert or ImageMagick's convert is on PATH). The capture and the drawing are in
// engine/src/attention_map.*.
#include "tools/cli/cli_util.h"
#include "tools/cli/commands.h"

#include <sqrtdk/error.h>

#include "tools/explain/attention_map.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <spawn.h>
#include <stdexcept>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace sqrtdk::cli {

namespace {

// Bigger maps are unreadable (and the SVG grows as n_heads × n²). The file size is capped separately
// (--max-svg-mb): 8 heads of 225 tokens already make ~30 MB.
constexpr size_t kMaxMapTokens = 256;

struct MapArgs {
  ModelArgs model;
  PromptArgs prompt;
  int layer = 0;
  int head = -1;
  double scale = 0;
  std::string out = "attention_map.svg";
  bool no_png = false, json = false;
  double max_svg_mb = 8;  // 0: no cap
};

// A token as a short label: the character itself for printable bytes, ␣ for a space, \xNN otherwise.
std::string label_of(const Model& model, uint32_t id) {
  std::string t = token_text(model, id);
  if (t.size() >= 3 && t.front() == '\'' && t.back() == '\'') t = t.substr(1, t.size() - 2);
  return t == " " ? "\u2423" : t;
}

// Full path of `name` on PATH, or "".
std::string find_on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  if (!path) return "";
  std::string p = path;
  for (size_t start = 0; start <= p.size();) {
    size_t end = p.find(':', start);
    if (end == std::string::npos) end = p.size();
    const std::filesystem::path cand = std::filesystem::path(p.substr(start, end - start)) / name;
    std::error_code ec;
    if (end > start && std::filesystem::is_regular_file(cand, ec) && access(cand.c_str(), X_OK) == 0)
      return cand.string();
    start = end + 1;
  }
  return "";
}

// Runs argv (no shell, so file names need no quoting); true if it exited 0.
bool run_program(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (const auto& s : args) argv.push_back(const_cast<char*>(s.c_str()));
  argv.push_back(nullptr);
  // The converter's own output goes to /dev/null: our errors stay one line (the caller prints a note).
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return false;
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return false;
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

// Converts svg to png with the first converter found; returns the PNG path, or "" (with a note why).
std::string write_png(const std::string& svg, std::string& note) {
  std::filesystem::path png = svg;
  png.replace_extension(".png");
  if (const std::string rsvg = find_on_path("rsvg-convert"); !rsvg.empty()) {
    if (run_program({rsvg, "-o", png.string(), svg})) return png.string();
    note = "rsvg-convert failed; no PNG";
    return "";
  }
  if (const std::string convert = find_on_path("convert"); !convert.empty()) {
    if (run_program({convert, svg, png.string()})) return png.string();
    note = "convert (ImageMagick) failed; no PNG";
    return "";
  }
  note = "no PNG: neither rsvg-convert nor convert (ImageMagick) is on PATH";
  return "";
}

void run(const MapArgs& a) {
  auto model = a.model.load();
  const ModelConfig& c = model->config();
  if (a.layer < 0 || a.layer >= static_cast<int>(c.n_layers))
    throw CLI::ValidationError("--layer", std::to_string(a.layer) + " outside [0, " + std::to_string(c.n_layers) +
                                              "): the model has " + std::to_string(c.n_layers) + " layers");
  if (a.head < -1 || a.head >= static_cast<int>(c.n_heads))
    throw CLI::ValidationError("--head", std::to_string(a.head) + " outside [0, " + std::to_string(c.n_heads) +
                                             "): the model has " + std::to_string(c.n_heads) + " heads");
  const std::vector<uint32_t> tokens = a.prompt.resolve(*model);
  if (tokens.size() > kMaxMapTokens)
    throw CLI::ValidationError("--prompt", std::to_string(tokens.size()) + " tokens; attention maps take at most " +
                                               std::to_string(kMaxMapTokens));
  SessionOptions so;
  so.n_threads = a.model.threads;
  Session session(model, so);
  const AttentionMap map = capture_attention_map(session, tokens, a.layer, static_cast<float>(a.scale));
  // A NaN weight upstream makes NaN probabilities: a map of "nan" cells and entropy 0 must not pass as a result.
  for (size_t i = 0; i < map.probs.size(); ++i)
    if (!std::isfinite(map.probs[i])) {
      const size_t per_head = map.n_queries * map.n_keys;
      throw Error(model->path() + ": layer " + std::to_string(a.layer) + ", head " + std::to_string(i / per_head) +
                  ": attention probabilities came out non-finite (query " +
                  std::to_string(i % per_head / map.n_keys) +
                  "): the model produced non-finite values (--check-finite names a NaN or Inf weight)");
    }

  std::vector<std::string> labels;
  for (uint32_t id : tokens) labels.push_back(label_of(*model, id));
  std::vector<size_t> heads;
  if (a.head >= 0)
    heads.push_back(static_cast<size_t>(a.head));
  else
    for (size_t h = 0; h < map.n_heads; ++h) heads.push_back(h);
  // The model's own scale: its attention_scale field (a model trained with another scale) or 1/sqrt(head_dim).
  const double default_scale = c.attention_scale_or_default();
  char model_scale[64];
  if (c.attention_scale)
    std::snprintf(model_scale, sizeof model_scale, "the model's attention_scale %.4g", default_scale);
  else
    std::snprintf(model_scale, sizeof model_scale, "1/sqrt(%u) = %.4g", c.head_dim, default_scale);
  char scale_text[128];
  if (a.scale > 0)
    std::snprintf(scale_text, sizeof scale_text, "scale %.4g (overrides %s)", a.scale, model_scale);
  else
    std::snprintf(scale_text, sizeof scale_text, "scale %s", model_scale);
  const std::string model_name = std::filesystem::path(model->path()).filename().string();
  const std::string title = model_name + ", layer " + std::to_string(a.layer) + ", " + scale_text + ", " +
                            std::to_string(tokens.size()) + " tokens (rows: queries, columns: keys)";
  const std::string svg = attention_map_svg(map, labels, heads, title);
  const double svg_mb = svg.size() / 1048576.0;
  if (a.max_svg_mb > 0 && svg_mb > a.max_svg_mb) {
    char why[256];
    std::snprintf(why, sizeof why,
                  "the SVG would be %.1f MB (%zu head(s) x %zu x %zu cells), over the cap of %.4g MB: show one head "
                  "(--head N), use a shorter prompt, or raise the cap (0: none)",
                  svg_mb, heads.size(), map.n_queries, map.n_keys, a.max_svg_mb);
    throw CLI::ValidationError("--max-svg-mb", why);
  }
  {
    std::ofstream out(a.out, std::ios::binary);
    if (!(out << svg) || !out.flush()) throw Error(a.out + ": cannot write");  // exit 2, as every output path
  }
  std::string png_note, png;
  if (!a.no_png) png = write_png(a.out, png_note);

  const double uniform = mean_uniform_entropy(map);
  if (a.json) {
    nlohmann::json j = {{"model", model->path()}, {"layer", a.layer}, {"scale", map.scale},
                        {"default_scale", default_scale}, {"n_tokens", tokens.size()}, {"svg", a.out},
                        {"svg_bytes", svg.size()},
                        {"png", png.empty() ? nlohmann::json(nullptr) : nlohmann::json(png)},
                        {"uniform_entropy", uniform}, {"heads", nlohmann::json::array()}};
    for (size_t h : heads) j["heads"].push_back({{"head", h}, {"mean_entropy", mean_row_entropy(map, h)}});
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  std::printf("model   %s (%u layers, %u heads, head_dim %u)\n", model->path().c_str(), c.n_layers, c.n_heads,
              c.head_dim);
  if (model->tokenizer() && a.prompt.tokens.empty())
    std::printf("prompt  \"%s\" (%zu tokens)\n", a.prompt.prompt.c_str(), tokens.size());
  else
    std::printf("prompt  %zu tokens\n", tokens.size());
  std::printf("layer   %d, %s\n", a.layer, scale_text);
  std::printf("mean row entropy (nats; a uniform causal row averages %.3f):\n", uniform);
  for (size_t h : heads) std::printf("  head %2zu  %.3f\n", h, mean_row_entropy(map, h));
  std::printf("wrote   %s (%.1f MB)%s%s\n", a.out.c_str(), svg_mb, png.empty() ? "" : " and ", png.c_str());
  if (!png_note.empty()) std::fprintf(stderr, "sqrtdk: note: %s\n", png_note.c_str());
}

}  // namespace

void add_attention_map_command(CLI::App& app) {
  auto a = std::make_shared<MapArgs>();
  CLI::App* cmd =
      app.add_subcommand("attention-map", "Heatmaps of one layer's attention probabilities for a prompt (SVG, PNG).");
  cmd->footer("Examples:\n  sqrtdk attention-map\n"
              "  sqrtdk attention-map --prompt \"Once upon a time\" --layer 2 --out layer2.svg\n"
              "  sqrtdk attention-map --head 3 --scale 1 --out head3_unscaled.svg   # without 1/sqrt(d_k)\n"
              "Writes a PNG beside the SVG when rsvg-convert or ImageMagick's convert is on PATH (--no-png: never).");
  a->model.add_to(*cmd);
  a->prompt.add_to(*cmd, "The quick brown fox");
  cmd->add_option("-l,--layer", a->layer, "layer to show")->capture_default_str();
  cmd->add_option("--head", a->head, "one head to show (default: every head of the layer)")
      ->check(number_in(0, 65535));  // -1, "every head", is the default, not a value to pass
  cmd->add_option("--scale", a->scale,
                  "multiply q·k by this instead of the model's scale (1/sqrt(head_dim) unless the file sets "
                  "attention_scale), e.g. 1")
      ->check(number_in(1e-30, 1e30, false));
  cmd->add_option("-o,--out", a->out, "SVG file to write")->check(non_empty("give the file to write"))->capture_default_str();
  cmd->add_option("--max-svg-mb", a->max_svg_mb, "refuse to write an SVG larger than this (MB; 0 = no cap)")
      ->check(at_least(0, false))
      ->capture_default_str();
  cmd->add_flag("--no-png", a->no_png, "do not write a PNG even if a converter exists");
  cmd->add_flag("--json", a->json, "print JSON (per-head mean entropy, files written)");
  cmd->callback([a] { run(*a); });
}

}  // namespace sqrtdk::cli
