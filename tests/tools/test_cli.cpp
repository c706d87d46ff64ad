// The sqrtdk CLI's contract with scripts: exit codes (0 ok, 1 usage, 2 bad input), one-line errors on stderr that
// name the option or the file, --help with examples on every subcommand, and every subcommand running with no
// arguments on the bundled model. Runs bin/sqrtdk as a child process (skipped if it is not built).
#include "tests/common/files.h"
#include "tests/common/sanitizer.h"
#include "tests/common/temp_dir.h"
#include "tests/common/toy_model.h"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <sys/wait.h>

#ifdef SQRTDK_BIN_DIR
namespace sqrtdk::test {
namespace {


struct CliResult {
  int exit_code = -1;
  std::string out, err;
};

// env: "NAME=value ..." set for the child only (through env(1)), or "".
CliResult run_cli(const TempDir& dir, const std::string& args, const std::string& env = "") {
  const std::string out = dir.file("stdout.txt"), err = dir.file("stderr.txt");
  const std::string cmd = (env.empty() ? "" : "env " + env + " ") + "'" + kCli + "' " + args + " >'" + out +
                          "' 2>'" + err + "' </dev/null";
  const int status = std::system(cmd.c_str());
  CliResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = slurp(out);
  r.err = slurp(err);
  return r;
}

size_t lines(const std::string& s) { return static_cast<size_t>(std::count(s.begin(), s.end(), '\n')); }

// A .sqdk file cut short: the bundled model's first `bytes` bytes.
std::string truncated_model(const TempDir& dir, size_t bytes) {
  const std::string src = std::string(SQRTDK_BIN_DIR) + "/../models/default.sqdk";
  std::ifstream in(src, std::ios::binary);
  std::string data(bytes, '\0');
  in.read(data.data(), static_cast<std::streamsize>(bytes));
  const std::string path = dir.file("truncated.sqdk");
  std::ofstream(path, std::ios::binary).write(data.data(), static_cast<std::streamsize>(in.gcount()));
  return path;
}

struct ErrorCase {
  std::string args, names;  // the command line, and what its one-line error must name
};

// Each case exits with `code`, printing exactly one line on stderr that starts with `prefix`, names the culprit
// and, if `also` is given, contains it too.
void expect_one_line_errors(const TempDir& dir, const std::vector<ErrorCase>& cases, int code,
                            const std::string& prefix, const std::string& also = "") {
  for (const ErrorCase& c : cases) {
    CAPTURE(c.args);
    const CliResult r = run_cli(dir, c.args);
    CAPTURE(r.err);
    CHECK(r.exit_code == code);
    CHECK(lines(r.err) == 1);
    CHECK(r.err.rfind(prefix, 0) == 0);
    CHECK(r.err.find(c.names) != std::string::npos);
    if (!also.empty()) CHECK(r.err.find(also) != std::string::npos);
  }
}

bool contains(const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; }

// A toy llama whose norm weights are all NaN: every logit comes out NaN.
std::string nan_model(const TempDir& dir) {
  const ModelConfig c = toy_llama_config();
  std::vector<std::vector<float>> storage;
  std::vector<TensorToWrite> tensors;
  for (const TensorSpec& spec : family_tensors(c)) {
    uint64_t n = 1;
    for (uint64_t d : spec.shape) n *= d;
    const bool is_norm = spec.name.find("norm") != std::string::npos;
    storage.emplace_back(n, is_norm ? std::nanf("") : 0.01f);
    tensors.push_back({spec.name, DType::f32, spec.shape, storage.back().data()});
  }
  const std::string path = dir.file("nan.sqdk");
  write_weight_file(path, c, tensors);
  return path;
}

}  // namespace

TEST_CASE("cli: usage errors exit 1 with one line on stderr naming the option") {
  if (!std::filesystem::exists(kCli)) return;
  TempDir dir;
  const std::vector<ErrorCase> cases = {
      {"", "subcommand"},
      {"frobnicate", "frobnicate"},
      {"run --bogus", "--bogus"},
      {"run --threads abc", "--threads"},
      {"run --threads -1", "--threads"},
      {"run --top-k 1.5", "--top-k"},
      {"generate -n -3", "--max-tokens"},
      {"generate --temperature x", "--temperature"},
      {"generate --top-p 1.5", "--top-p"},
      {"bench --reps 0", "--reps"},
      {"bench --decode 0", "--decode"},
      {"bench --prefill 100000", "max_seq"},
      {"profile --prefill 0", "--prefill"},
      {"profile --decode -2", "--decode"},
      {"inspect a.sqdk b.sqdk", "b.sqdk"},
      {"inspect --model", "--model"},
      // CLI11's own range messages ("Value 2 not in range 0.000000 to 1.000000") never leak: ours say what was
      // expected. NaN, infinities and a top-p of 0 are refused here, not later with exit 2.
      {"generate --top-p 2", "--top-p: expected a number > 0 and ≤ 1, got '2'"},
      {"generate --top-p 0", "--top-p"},
      {"generate --top-p nan", "--top-p"},
      {"generate --temperature nan", "--temperature"},
      {"generate --temperature inf", "--temperature"},
      {"explain-scaling --dk 0", "--dk: expected an integer ≥ 1"},
      {"explain-scaling --keys 1", "--keys"},
      {"explain-scaling --samples 1", "--samples"},
      {"generate --stop ''", "--stop"},
      {"bench --threads 1,x", "--threads"},
      // An unknown ISA is a usage error (was exit 2), from every subcommand that takes --isa.
      {"run --isa sse2", "--isa: expected ref, avx2, avx512, avx512_vnni or avx512_bf16, got 'sse2'"},
      {"explain-scaling --isa sse2", "--isa"},
      {"attention-map --max-svg-mb -1", "--max-svg-mb"},
      {"bench --prefill 0 --threads 1 --reps 1", "--prefill"},  // was exit 2 "prefill: no tokens"
      {"generate --seed abc", "--seed: 'abc' is not a value"},
      // An empty value is a mistake (an unset shell variable), never a silent "not given": it used to run the
      // default prompt, load the bundled model, or encode instead of decode.
      {"run --tokens ''", "--tokens: must not be empty; give comma-separated token ids"},
      {"run -m ''", "--model: must not be empty"},
      {"generate --model ''", "--model"},
      {"inspect ''", "must not be empty"},
      {"convert x.sqdk -o ''", "--output: must not be empty"},
      {"tokenize --decode ''", "--decode"},
      {"run --tokens 1,2,", "ends with a comma"},  // "1,,2" was refused, "1,2," passed as "1,2"
      {"generate --stop ,", "--stop-text"},         // comma-only text reads as ids: point at the text option
      {"generate --stop-text ''", "--stop-text: an empty stop string"},
      // Values above at_least's hidden ceiling say it (was "expected a number ≥ 0, got '1e19'").
      {"generate --temperature 1e19", "≤ 1e+18"},
      // Sentinels are defaults, not values: -1 "every head", -2 "the default id", a negative or NaN RoPE base.
      {"attention-map --head -1", "--head"},
      {"make-toy -o x.sqdk --arch llama --seed 1 --bos -2", "--bos: expected an integer ≥ -1 and ≤ 4294967294"},
      {"make-toy -o x.sqdk --arch llama --seed 1 --rope-theta -5", "--rope-theta"},
      {"make-toy -o x.sqdk --arch llama --seed 1 --rope-theta nan", "--rope-theta"},
      // compare scores a position by the next token: a window or a run of one token has nothing to score.
      {"compare a.sqdk b.sqdk --window 1", "--window"},
      {"compare a.sqdk b.sqdk --random-tokens 0", "--random-tokens"},
      {"compare a.sqdk b.sqdk -t -5", "--threads"},
  };
  expect_one_line_errors(dir, cases, 1, "sqrtdk: usage error: ", "--help");  // and says where to look
}

TEST_CASE("cli: errors name their real cause, and output that did not reach stdout is an error") {
  if (!std::filesystem::exists(kCli)) return;
  TempDir dir;
  // A bad SQRTDK_GEMM_BLOCKING is the environment's: it was reported as the first tensor's "packing failed".
  const CliResult blocking = run_cli(dir, "run -t 1 --tokens 1,2", "SQRTDK_GEMM_BLOCKING=garbage");
  CAPTURE(blocking.err);
  CHECK(blocking.exit_code == 2);
  CHECK(lines(blocking.err) == 1);
  CHECK(blocking.err.rfind("sqrtdk: error: SQRTDK_GEMM_BLOCKING='garbage'", 0) == 0);
  CHECK_FALSE(contains(blocking.err, "tensor"));
  // A prompt longer than the context is refused before it is echoed (it was printed, then the error came).
  const CliResult longer = run_cli(dir, "generate -t 1 -n 2 --prompt '" + std::string(300, 'a') + "'");
  CAPTURE(longer.err);
  CHECK(longer.exit_code == 2);
  CHECK(longer.out.empty());
  CHECK(contains(longer.err, "more than the model's context of 256"));
  // A model that cannot fit in memory is refused with its size before any allocation (was a bare bad_alloc).
  const CliResult huge = run_cli(dir, "make-toy -o '" + dir.file("huge.sqdk") +
                                          "' --arch llama --seed 1 --d-model 4096 --n-layers 4096");
  CAPTURE(huge.err);
  CHECK(huge.exit_code == 2);
  CHECK(contains(huge.err, "GB of f32 weights"));
  CHECK_FALSE(std::filesystem::exists(dir.file("huge.sqdk")));
  const CliResult keys = run_cli(dir, "explain-scaling --dk 65536 --keys 65536 --samples 2 -t 1");
  CHECK(keys.exit_code == 2);
  CHECK(contains(keys.err, "MiB of keys per block"));
  const CliResult text_dir = run_cli(dir, "compare a.sqdk b.sqdk --text '" + dir.path().string() + "'");
  CHECK(text_dir.exit_code == 2);
  // (the models load first: a missing a.sqdk is named before the text; either names the real culprit)
  CHECK((contains(text_dir.err, "a.sqdk") || contains(text_dir.err, "is a directory")));
  // A file that is neither .sqdk nor GGUF was "not a folder" (the folder importer's words).
  const std::string odd = dir.file("odd.bin");
  std::ofstream(odd) << "GGUXnot a model";
  const CliResult convert = run_cli(dir, "convert '" + odd + "' -o '" + dir.file("o.sqdk") + "'");
  CHECK(convert.exit_code == 2);
  CHECK(contains(convert.err, "not a .sqdk file (magic SQDK), a GGUF file (magic GGUF) or a Hugging Face"));
  // An output path that cannot be written is exit 2 from every subcommand (attention-map and explain-scaling said 3).
  for (const std::string args : {"attention-map --no-png -t 1 -o /nonexistent-dir/x.svg",
                                 "explain-scaling --dk 2 --keys 4 --samples 8 --svg /nonexistent-dir/x.svg",
                                 "make-toy --arch llama --seed 1 -o /nonexistent-dir/x.sqdk"}) {
    CAPTURE(args);
    const CliResult r = run_cli(dir, args);
    CHECK(r.exit_code == 2);
    CHECK(contains(r.err, "/nonexistent-dir/x."));
  }
  // Output lost to a full disk is exit 3, not 0 with the results cut short.
  if (std::filesystem::exists("/dev/full")) {
    for (const std::string args : {"run -t 1 --json", "inspect --json", "--help", "generate -t 1 -n 3"}) {
      CAPTURE(args);
      const std::string err = dir.file("full_err.txt");
      const int status = std::system(("'" + kCli + "' " + args + " >/dev/full 2>'" + err + "' </dev/null").c_str());
      CHECK(WIFEXITED(status));
      CHECK(WEXITSTATUS(status) == 3);
      CHECK(contains(slurp(err), "writing to standard output failed"));
    }
  }
}

TEST_CASE("cli: explain-scaling's memory stays bounded at the largest key count it takes") {
  if (!std::filesystem::exists(kCli)) return;
  TempDir dir;
  // 65 536 keys used to mean 65 536 × 65 536 scores and probabilities (32 GiB) per block; blocks now hold at most
  // 64 MiB of each. Under a 2 GiB address-space limit (the sanitizers' shadow memory needs more: skipped there).
  if (kUnderSanitizer) return;
  const std::string out = dir.file("es_out.txt"), err = dir.file("es_err.txt");
  const std::string cmd = "ulimit -v 2097152; '" + kCli + "' explain-scaling --dk 2 --keys 65536 --samples 300 -t 1 >'" +
                          out + "' 2>'" + err + "' </dev/null";
  const int status = std::system(cmd.c_str());
  CAPTURE(slurp(err));
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(contains(slurp(out), "65536"));
}

TEST_CASE("cli: bad input exits 2 with one line naming the file or the token") {
  if (!std::filesystem::exists(kCli)) return;
  TempDir dir;
  const std::string missing = dir.file("missing.sqdk");
  const std::string garbage = dir.file("garbage.sqdk");
  std::ofstream(garbage) << "this is not a model file, but it is longer than the 64-byte header of one........";
  const std::string truncated = truncated_model(dir, 4096);
  const std::vector<ErrorCase> cases = {
      {"run --model '" + missing + "'", missing},
      {"generate --model '" + garbage + "' -n 3", garbage},
      {"bench --model '" + truncated + "' --threads 1 --reps 1", truncated},
      {"profile --model '" + garbage + "'", garbage},
      {"inspect '" + truncated + "'", truncated},
      {"attention-map --model '" + missing + "' --out '" + dir.file("x.svg") + "'", missing},
      {"run --tokens 1,99999", "99999"},
      {"generate --tokens 5,70000 -n 2", "70000"},
  };
  expect_one_line_errors(dir, cases, 2, "sqrtdk: error: ");
}

TEST_CASE("cli: no CLI11 range message leaks from any usage error") {
  if (!std::filesystem::exists(kCli)) return;
  TempDir dir;
  for (const std::string args : {"generate --top-p 2", "explain-scaling --dk 0", "explain-scaling --samples 1"}) {
    CAPTURE(args);
    const CliResult r = run_cli(dir, args);
    CHECK(r.exit_code == 1);
    CHECK_FALSE(contains(r.err, "not in range"));
    CHECK_FALSE(contains(r.err, "0.000000"));
  }
}

TEST_CASE("cli: --version prints the version and exits 0") {
  if (!std::filesystem::exists(kCli)) return;
  TempDir dir;
  for (const std::string args : {"--version", "-V"}) {
    const CliResult r = run_cli(dir, args);
    CHECK(r.exit_code == 0);
    CHECK(r.out.rfind("sqrtdk 0.", 0) == 0);
    CHECK(contains(r.out, "default.sqdk"));
    CHECK(r.err.empty());
  }
}

TEST_CASE("cli: bench clamps its default lengths to the model's context (so it runs with no arguments)") {
  if (!std::filesystem::exists(kCli)) return;
  TempDir dir;
  // The bundled model's context is 256 tokens: the default prefill 32,128,512 used to fail outright. (One thread,
  // one rep and a short decode keep this quick on a busy machine; the prefill lengths are the defaults.)
  const CliResult r = run_cli(dir, "bench --threads 1 --reps 1 --decode 8 --quiet");
  CAPTURE(r.err);
  CHECK(r.exit_code == 0);
  CHECK(contains(r.err, "defaults were clamped: prefill 32,128,512 -> 32,128"));
  CHECK(contains(r.out, "prefill 128 tok/s"));
  CHECK_FALSE(contains(r.out, "prefill 512"));
  // Lengths the user asked for are not clamped: they are an error.
  const CliResult given = run_cli(dir, "bench --prefill 512 --reps 1");
  CHECK(given.exit_code == 1);
  CHECK(contains(given.err, "max_seq"));
}

TEST_CASE("cli: profile clamps its default lengths to a small model's context") {
  if (!std::filesystem::exists(kCli)) return;
  TempDir dir;
  const std::string toy = dir.file("toy.sqdk");
  REQUIRE(run_cli(dir, "make-toy --arch llama --seed 1 --max-seq 40 -o '" + toy + "'").exit_code == 0);
  const CliResult r = run_cli(dir, "profile --quiet -t 1 --peak-gflops 100 --bandwidth-gbs 10 --model '" + toy + "'");
  CAPTURE(r.err);
  CHECK(r.exit_code == 0);
  CHECK(contains(r.err, "the model's context is 40 tokens, so the defaults were clamped: prefill 30, decode 10"));
  CHECK(run_cli(dir, "profile --prefill 100 --model '" + toy + "'").exit_code == 1);  // given: an error
}

TEST_CASE("cli: --threads reaches the loader") {
  if (!std::filesystem::exists(kCli)) return;
  TempDir dir;
  // The bundled model (8 MB) is big enough for the load's threaded CRC scan; -t bounds it like the forward pass.
  for (int t : {1, 2}) {
    const CliResult r = run_cli(dir, "run --threads " + std::to_string(t), "SQRTDK_VERBOSE=1");
    CAPTURE(r.err);
    CHECK(r.exit_code == 0);
    CHECK(contains(r.err, "scans on up to " + std::to_string(t) + " thread"));
  }
}

TEST_CASE("cli: generate --stop takes text as well as token ids") {
  if (!std::filesystem::exists(kCli)) return;
  TempDir dir;
  // Text: greedy decoding of the bundled model goes "Once upon a time that the son of the LORD of the LORD ...";
  // --stop LORD stops at the first "LORD", cut from the text (as OpenAI's stop); the token that completed it is the
  // last of `tokens`.
  const std::string base = "generate -t 1 --prompt 'Once upon a time' --temperature 0 -n 60 --json ";
  const CliResult text = run_cli(dir, base + "--stop LORD");
  CAPTURE(text.err);
  REQUIRE(text.exit_code == 0);
  const auto j = nlohmann::json::parse(text.out);
  CHECK(j["stop_reason"] == "stop_string");
  const std::string generated = j["text"];
  CAPTURE(generated);
  CHECK(generated.find("LORD") == std::string::npos);
  CHECK(generated.find("LOR") == std::string::npos);  // the held-back start of the stop string is dropped too
  const CliResult full = run_cli(dir, base);
  REQUIRE(full.exit_code == 0);
  const std::string full_text = nlohmann::json::parse(full.out)["text"];
  CHECK(full_text.rfind(generated + "LORD", 0) == 0);
  // Token ids (digits and commas): 68 is 'D', first generated at the end of that "LORD": the same stop point.
  const CliResult ids = run_cli(dir, base + "--stop 68");
  REQUIRE(ids.exit_code == 0);
  const auto k = nlohmann::json::parse(ids.out);
  CHECK(k["stop_reason"] == "stop_token");
  CHECK(k["tokens"] == j["tokens"]);
  // "." is text (it used to be parsed as a token id and rejected under the name --tokens).
  const CliResult dot = run_cli(dir, "generate -t 1 -n 4 --stop .");
  CHECK(dot.exit_code == 0);
  CHECK_FALSE(contains(dot.err, "--tokens"));
  // --stop-text forces text even when it is all digits; an id outside the vocabulary names --stop.
  CHECK(run_cli(dir, "generate -t 1 --temperature 0 -n 8 --stop-text 10 --json").exit_code == 0);
  const CliResult bad = run_cli(dir, "generate -n 2 --stop 99999");
  CHECK(bad.exit_code == 2);
  CHECK(contains(bad.err, "--stop: token id 99999"));
  CHECK(lines(bad.err) == 1);
}

TEST_CASE("cli: attention-map caps the SVG size and says so") {
  if (!std::filesystem::exists(kCli)) return;
  TempDir dir;
  const std::string prompt(224, 'a');  // + BOS = 225 tokens: 8 heads made a 30 MB SVG
  const std::string out = dir.file("map.svg");
  const CliResult big = run_cli(dir, "attention-map --no-png --prompt '" + prompt + "' --out '" + out + "'");
  CAPTURE(big.err);
  CHECK(big.exit_code == 1);
  CHECK(lines(big.err) == 1);
  CHECK(contains(big.err, "--max-svg-mb"));
  CHECK(contains(big.err, "--head"));
  CHECK_FALSE(std::filesystem::exists(out));
  // One head fits, and the size is printed.
  const CliResult one = run_cli(dir, "attention-map --no-png --head 0 --prompt '" + prompt + "' --out '" + out + "'");
  CAPTURE(one.err);
  CHECK(one.exit_code == 0);
  CHECK(contains(one.out, " MB)"));
  CHECK(std::filesystem::file_size(out) < 8u * 1048576);
}

TEST_CASE("cli: profile says 'calibrating' only when it measures, and where the roofs came from") {
  if (!std::filesystem::exists(kCli)) return;
  TempDir dir;
  const std::string env = "XDG_CACHE_HOME='" + dir.file("cache") + "'";
  const CliResult first = run_cli(dir, "profile --quiet --prefill 8 --decode 2", env);
  CAPTURE(first.err);
  REQUIRE(first.exit_code == 0);
  CHECK(contains(first.out, "roofs (measured ("));  // "measured (cached in ...)" or "measured (not cached: why)"
  const bool cached = contains(first.out, "cached in ");
  CHECK(cached == std::filesystem::exists(dir.file("cache/sqrtdk/roofs.json")));
  const CliResult second = run_cli(dir, "profile --prefill 8 --decode 2", env);
  CAPTURE(second.err);
  REQUIRE(second.exit_code == 0);
  if (cached) {  // a quiet machine: the second run reads the cache and does not claim to calibrate
    CHECK(contains(second.out, "roofs (cache "));
    CHECK(contains(second.out, "load average"));
    CHECK_FALSE(contains(second.err, "calibrating"));
  } else {  // a busy machine: measured again, and says it
    CHECK(contains(second.out, "not cached: "));
    CHECK(contains(second.err, "calibrating"));
  }
}

TEST_CASE("cli: NaN logits are a clear error, never a silent 'p = nan'") {
  if (!std::filesystem::exists(kCli)) return;
  TempDir dir;
  const std::string model = nan_model(dir);
  const CliResult run = run_cli(dir, "run --tokens 1,2,3 --model '" + model + "'");
  CAPTURE(run.out);
  // (If loading ever refuses NaN weights by default, that error names NaN too: either way, no silent table.)
  CHECK(run.exit_code == 2);
  CHECK(lines(run.err) == 1);
  CHECK(contains(run.err, "NaN"));
  CHECK(contains(run.err, model));
  CHECK_FALSE(contains(run.out, "nan"));
  for (const std::string sampling : {"--temperature 0", "--temperature 1 --top-k 5 --top-p 0.9"}) {
    const CliResult gen = run_cli(dir, "generate --tokens 1,2,3 -n 3 " + sampling + " --model '" + model + "'");
    CHECK(gen.exit_code == 2);
    CHECK(lines(gen.err) == 1);
    CHECK(contains(gen.err, "NaN"));
    CHECK(contains(gen.err, model));  // which model made them
  }
  // compare and attention-map reported NaN logits as results: KL 0 ("a perfect match") and maps of "nan" cells.
  const std::string ok = dir.file("ok.sqdk");
  write_toy_model(ok, toy_llama_config(), 5);
  const CliResult cmp = run_cli(dir, "compare '" + ok + "' '" + model + "' -t 1 --random-tokens 16");
  CAPTURE(cmp.err);
  CHECK(cmp.exit_code == 2);
  CHECK(lines(cmp.err) == 1);
  CHECK(contains(cmp.err, model));
  CHECK(contains(cmp.err, "non-finite"));
  CHECK_FALSE(contains(cmp.out, "nan"));
  const CliResult map = run_cli(dir, "attention-map --no-png --tokens 1,2,3 -t 1 --model '" + model + "' --out '" +
                                         dir.file("nan.svg") + "'");
  CAPTURE(map.err);
  CHECK(map.exit_code == 2);
  CHECK(contains(map.err, model));
  CHECK(contains(map.err, "non-finite"));
}

TEST_CASE("cli: --help on every subcommand exits 0 and shows examples") {
  if (!std::filesystem::exists(kCli)) return;
  TempDir dir;
  const CliResult top = run_cli(dir, "--help");
  CHECK(top.exit_code == 0);
  CHECK(top.out.find("Exit codes") != std::string::npos);
  for (const std::string sub : {"run", "generate", "bench", "profile", "inspect", "convert", "make-toy",
                                "explain-scaling", "attention-map"}) {
    CAPTURE(sub);
    const CliResult r = run_cli(dir, sub + " --help");
    CHECK(r.exit_code == 0);
    CHECK(top.out.find(sub) != std::string::npos);  // listed at the top level
    CHECK(r.out.find("Examples:") != std::string::npos);
    CHECK(r.out.find("sqrtdk " + sub) != std::string::npos);  // an example of this subcommand
  }
}

TEST_CASE("cli: run, generate, profile and inspect work with no arguments (the bundled model)") {
  if (!std::filesystem::exists(kCli)) return;
  TempDir dir;
  for (const std::string args : {"run", "generate -n 4", "profile --quiet --decode 2", "inspect"}) {
    CAPTURE(args);
    const CliResult r = run_cli(dir, args);
    CAPTURE(r.err);
    CHECK(r.exit_code == 0);
    CHECK_FALSE(r.out.empty());
  }
  // generate --json reports why it stopped.
  const CliResult g = run_cli(dir, "generate --tokens 65,66 --temperature 0 -n 3 --json");
  CHECK(g.exit_code == 0);
  CHECK(g.out.find("\"stop_reason\": \"max_tokens\"") != std::string::npos);
}

TEST_CASE("cli: calibrate measures the model's heads once, then loads read the table from the cache") {
  if (!std::filesystem::exists(kCli)) return;
  TempDir dir;
  const std::string toy = dir.file("toy.sqdk");
  // A 40-token context: the calibration measures only the ladder's first point (64 keys), in a second or two.
  REQUIRE(run_cli(dir, "make-toy --arch llama --seed 1 --max-seq 40 -o '" + toy + "'").exit_code == 0);
  const std::string env = "XDG_CACHE_HOME='" + dir.file("cache") + "'";
  const CliResult first = run_cli(dir, "calibrate --json --model '" + toy + "'", env);
  CAPTURE(first.err);
  REQUIRE(first.exit_code == 0);
  const nlohmann::json j = nlohmann::json::parse(first.out);
  CHECK(j.at("source").get<std::string>().rfind("measured now (cached in ", 0) == 0);
  const std::string table = j.at("table").get<std::string>();
  CAPTURE(table);
  for (const char* mode : {"decode: 64 ", "causal_prefill: 64 ", "full_prefill: 64 "})
    CHECK(table.find(mode) != std::string::npos);
  CHECK(table.find(" 128 ") == std::string::npos);  // past the context: not measured
  CHECK(std::filesystem::exists(dir.file("cache/sqrtdk/attention_paths.json")));
  const CliResult again = run_cli(dir, "calibrate --model '" + toy + "'", env);
  CHECK(again.exit_code == 0);
  CHECK(contains(again.out, "source  cache "));
  // Every command that loads a model reads it (the default --attention-paths cached), or ignores it when asked.
  const CliResult verbose = run_cli(dir, "run --model '" + toy + "' --tokens 1,2,3", env + " SQRTDK_VERBOSE=1");
  CHECK(verbose.exit_code == 0);
  CHECK(contains(verbose.err, "attention paths: cache "));
  const CliResult builtin =
      run_cli(dir, "run --attention-paths builtin --model '" + toy + "' --tokens 1,2,3", env + " SQRTDK_VERBOSE=1");
  CHECK(contains(builtin.err, "attention paths: built-in rule"));
  CHECK(run_cli(dir, "run --attention-paths sometimes --model '" + toy + "'", env).exit_code == 1);
  // calibrate sets the policy itself (--recalibrate), so it does not offer the option it would ignore.
  const CliResult calibrate_builtin = run_cli(dir, "calibrate --attention-paths builtin --model '" + toy + "'", env);
  CHECK(calibrate_builtin.exit_code == 1);
  CHECK(contains(calibrate_builtin.err, "--attention-paths"));
}

}  // namespace sqrtdk::test
#endif
