// The sqrtdk CLI's contract with scripts: exit codes (0 ok, 1 usage, 2 bad input), one-line errors on stderr that
// name the option or the file, --help with examples on every subcommand, and every subcommand running with no
// arguments on the bundled model. Runs bin/sqrtdk as a child process (skipped if it is not built).
#include "tests/common/temp_dir.h"

#include <doctest/doctest.h>

#include <algorithm>
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

const std::string kCli = std::string(SQRTDK_BIN_DIR) + "/sqrtdk";

struct CliResult {
  int exit_code = -1;
  std::string out, err;
};

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

CliResult run_cli(const TempDir& dir, const std::string& args) {
  const std::string out = dir.file("stdout.txt"), err = dir.file("stderr.txt");
  const std::string cmd = "'" + kCli + "' " + args + " >'" + out + "' 2>'" + err + "' </dev/null";
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
  };
  expect_one_line_errors(dir, cases, 1, "sqrtdk: usage error: ", "--help");  // and says where to look
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

}  // namespace sqrtdk::test
#endif
