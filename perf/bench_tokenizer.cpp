// bench-tokenizer: encode throughput in MB/s of input text on one thread, per tokenizer (the four vocabularies of
// tests/data/tokenizers: GPT-2, Llama 2, Llama 3, Qwen3), median of repeated runs, and decode MB/s of output text.
// The text: every license in Debian's /usr/share/common-licenses (base-files; English legal prose, about 260 KB),
// concatenated in name order and encoded as one string. --text FILE: another text.
#include "perf/common/bench_util.h"

#include <sqrtdk/tokenizer.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

using namespace sqrtdk;
using namespace sqrtdk::perf;

namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string common_licenses() {
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator("/usr/share/common-licenses"))
    if (e.is_regular_file() && !e.is_symlink()) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  std::string text;
  for (const auto& f : files) text += read_text(f.string());
  return text;
}

TokenizerSpec load(const std::string& name) {
  const std::string d = std::string(SQRTDK_SOURCE_DIR) + "/tests/data/tokenizers/" + name + "/";
  if (name == "gpt2") return tokenizer_spec_from_gpt2_files(d + "encoder.json", d + "vocab.bpe");
  return tokenizer_spec_from_json(d + "tokenizer.json", d + "tokenizer_config.json");
}

}  // namespace

int main(int argc, char** argv) {
  BenchArgs args = BenchArgs::parse(argc, argv,
                                    "bench-tokenizer: encode and decode MB/s on one thread per tokenizer\n"
                                    "  --text FILE  the text to encode (default: /usr/share/common-licenses/*)");
  std::string text_name = "/usr/share/common-licenses/* (Debian base-files)";
  std::string text;
  for (size_t i = 0; i + 1 < args.rest.size(); ++i)
    if (args.rest[i] == "--text") text_name = args.rest[i + 1], text = read_text(args.rest[i + 1]);
  if (text.empty()) text = common_licenses();
  if (args.smoke) text.resize(std::min<size_t>(text.size(), 4096));
  const std::vector<std::string> names =
      args.smoke ? std::vector<std::string>{"gpt2"} : std::vector<std::string>{"gpt2", "llama2", "llama3", "qwen3"};

  nlohmann::json out = {{"machine", machine_json({}, "wall-clock median of " + std::to_string(args.reps) +
                                                        " runs, one thread, the whole text encoded in one call",
                                                    {1})},
                        {"text", text_name},
                        {"text_bytes", text.size()},
                        {"results", nlohmann::json::array()}};
  Table table({"tokenizer", "kind", "tokens", "bytes/token", "encode MB/s", "decode MB/s"});
  for (const std::string& name : names) {
    const auto t = Tokenizer::create(load(name), name);
    std::vector<uint32_t> ids;
    const double s_encode = median_seconds([&] { ids = t->encode(text, false); }, args.reps, 0.0);
    std::string decoded;
    const double s_decode = median_seconds([&] { decoded = t->decode(ids); }, args.reps, 0.0);
    const double mb = double(text.size()) / 1e6;
    const double encode_mbs = mb / s_encode, decode_mbs = double(decoded.size()) / 1e6 / s_decode;
    table.add({name, t->kind_name(), std::to_string(ids.size()), fmt(double(text.size()) / ids.size(), 2),
               fmt(encode_mbs, 1), fmt(decode_mbs, 1)});
    out["results"].push_back({{"tokenizer", name},
                              {"kind", t->kind_name()},
                              {"tokens", ids.size()},
                              {"text_bytes", text.size()},
                              {"encode_mb_per_s", encode_mbs},
                              {"decode_mb_per_s", decode_mbs},
                              {"round_trip_equal", decoded == text}});
  }
  if (args.json) {
    std::printf("%s\n", out.dump(2).c_str());
  } else {
    std::printf("text: %s, %zu bytes; 1 thread; MB = 10^6 bytes of input text (decode: of output text)\n%s",
                text_name.c_str(), text.size(), table.str().c_str());
  }
  return 0;
}
