// The format's tools: tools/sqdk.py writes byte-identical files to the C++ writer; `sqrtdk make-toy` is
// deterministic and its output loads; `sqrtdk inspect` reports, and fails with one line and exit 2 on a bad file;
// a writer killed mid-write never leaves a partial file under the final name.
#include "tests/common/files.h"
#include "tests/engine/test_format_util.h"
#include "tests/common/close.h"

#include <chrono>
#include <cstdlib>
#include <thread>

#include <signal.h>
#include <sys/wait.h>

using namespace sqrtdk;
using namespace sqrtdk::test;

namespace {

bool have_cli() { return std::filesystem::exists(kCli); }

}  // namespace

TEST_CASE("format tools: tools/sqdk.py writes files byte-identical to the C++ writer") {
  TempDir dir;
  std::string command = kPython + " " SQRTDK_SOURCE_DIR "/tools/sqdk.py from-spec";
  for (const std::string family : {"gpt2", "llama"}) {
    command.append(" ").append(fixture_spec_path(family));
    command.append(" ").append(dir.file(family + "_py.sqdk"));
  }
  if (run_shell(command + " 2>" + dir.file("err.txt")) != 0) {  // one Python start: importing numpy takes ~1 s here
    if (run_shell(kPython + " -c 'import numpy' >/dev/null 2>&1") != 0) {
      MESSAGE("skipped: " << kPython << " cannot import numpy (install python3-numpy to run this check)");
      return;
    }
    FAIL("tools/sqdk.py failed: " << slurp(dir.file("err.txt")));
  }
  for (const char* family : {"gpt2", "llama"}) {
    INFO(family);
    const auto py = read_bytes(dir.file(std::string(family) + "_py.sqdk"));
    const auto& cpp = fixture_bytes(family);
    REQUIRE(py.size() == cpp.size());
    size_t first_diff = py.size();
    for (size_t i = 0; i < py.size(); ++i)
      if (py[i] != cpp[i]) {
        first_diff = i;
        break;
      }
    CHECK_MESSAGE(first_diff == py.size(), "first differing byte at offset " << first_diff);
  }
}

TEST_CASE("format tools: make-toy is deterministic and loads; inspect reports it") {
  if (!have_cli()) {
    MESSAGE("skipped: " << kCli << " is not built");
    return;
  }
  TempDir dir;
  const std::string a = dir.file("a.sqdk"), b = dir.file("b.sqdk"), c = dir.file("c.sqdk");
  const std::string args = " --d-model 32 --n-layers 2 --n-heads 4 --n-kv-heads 2 --n-vocab 260 --max-seq 16";
  REQUIRE(run_shell(kCli + " make-toy -o " + a + " --arch llama --seed 7 --dtype bf16" + args + " >/dev/null") == 0);
  REQUIRE(run_shell(kCli + " make-toy -o " + b + " --arch llama --seed 7 --dtype bf16" + args + " >/dev/null") == 0);
  REQUIRE(run_shell(kCli + " make-toy -o " + c + " --arch llama --seed 8 --dtype bf16" + args + " >/dev/null") == 0);
  CHECK(read_bytes(a) == read_bytes(b));
  CHECK(read_bytes(a) != read_bytes(c));
  LoadOptions opts;
  opts.check_finite = true;
  const auto wf = WeightFile::open(a, opts);
  CHECK(wf->config().arch == Arch::llama);
  CHECK(wf->config().head_dim == 8);
  CHECK(wf->config().bos_id == 256);
  CHECK(wf->config().tokenizer == TokenizerKind::byte_level);
  // Weights like a real init: norms near 1, linear weights with a standard deviation near 0.02.
  std::vector<float> w(wf->require("blk.0.attn_q.weight", {32, 32}).n_elements());
  wf->read_f32(*wf->find("blk.0.attn_q.weight"), w.data());
  double sum2 = 0;
  for (float x : w) sum2 += double(x) * x;
  // 1024 samples of N(0, 0.02^2): the sample RMS has a relative standard error of 1/sqrt(2 * 1024) = 2.2 %; 10 %
  // is 4.5 standard errors (the seed is fixed, so the check is deterministic).
  SQRTDK_CHECK_REL(std::sqrt(sum2 / double(w.size())), 0.02, 0.10, "RMS of 1024 N(0, 0.02^2) draws, 4.5 SE");
  std::vector<float> norm(32);
  wf->read_f32(*wf->find("out_norm.weight"), norm.data());
  for (float x : norm) CHECK(std::abs(x - 1.0f) < 0.15f);

  const std::string json = dir.file("inspect.json");
  REQUIRE(run_shell(kCli + " inspect --json --check " + a + " > " + json) == 0);
  const auto j = nlohmann::json::parse(slurp(json));
  CHECK(j["config"]["arch"] == "llama");
  CHECK(j["checksums"] == "verified");
  CHECK(j["n_params"].get<uint64_t>() == wf->config().n_params());
  CHECK(j["tensors"].size() == wf->tensors().size());
  CHECK(j["tensors"][0]["name"] == "tok_emb");
  CHECK(j["tensors"][0]["nonfinite"] == 0);
  const std::string table = dir.file("inspect.txt");
  REQUIRE(run_shell(kCli + " inspect " + a + " > " + table) == 0);
  const std::string text = slurp(table);
  CHECK(text.find("checksums   verified") != std::string::npos);
  CHECK(text.find("blk.1.ffn_down.weight") != std::string::npos);
  CHECK(run_shell(kCli + " make-toy -o " + c + " --arch llama --seed 1 --n-heads 3 --n-kv-heads 2 >/dev/null 2>&1") == 2);
}

TEST_CASE("format tools: inspect fails with one line and exit 2 on a bad file, --check names NaN tensors") {
  if (!have_cli()) {
    MESSAGE("skipped: " << kCli << " is not built");
    return;
  }
  TempDir dir;
  const std::string bad = dir.file("bad.sqdk"), err = dir.file("err.txt");
  auto b = fixture_bytes("llama");
  b[b.size() - 3] ^= 1;  // corrupt lm_head.weight
  write_bytes(bad, b);
  CHECK(run_shell(kCli + " inspect " + bad + " >/dev/null 2> " + err) == 2);
  std::string text = slurp(err);
  CHECK(text.rfind("sqrtdk: error: " + bad + ": tensor 'lm_head.weight': checksum mismatch", 0) == 0);
  CHECK(std::count(text.begin(), text.end(), '\n') == 1);
  CHECK(run_shell(kCli + " inspect --no-verify " + bad + " >/dev/null 2>&1") == 0);

  Fixture fx = load_fixture("gpt2");
  fx.tensors[4].values[0] = std::numeric_limits<float>::infinity();  // blk.0.attn_qkv.weight
  encode(fx.tensors[4]);
  const std::string nan = dir.file("nan.sqdk");
  write_fixture(fx, nan);
  CHECK(run_shell(kCli + " inspect --check " + nan + " >/dev/null 2> " + err) == 2);
  text = slurp(err);
  CHECK(text.find("1 tensor(s) hold NaN or Inf: 'blk.0.attn_qkv.weight'") != std::string::npos);
  CHECK(run_shell(kCli + " inspect " + nan + " >/dev/null 2>&1") == 0);  // without --check it is a valid file
}

TEST_CASE("format tools: a writer killed mid-write leaves no partial file under the final name") {
  if (!have_cli()) {
    MESSAGE("skipped: " << kCli << " is not built");
    return;
  }
  TempDir dir;
  const std::string out = dir.file("killed.sqdk");
  // ~4.5M parameters (18 MB). Kill once early (during generation), once as soon as the temporary file appears
  // (mid-write), and check the final name each time.
  for (const bool wait_for_temp : {false, true}) {
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      const char* argv[] = {kCli.c_str(), "make-toy", "-o", out.c_str(), "--arch", "gpt2", "--seed", "3",
                            "--d-model", "256", "--n-layers", "3", "--n-vocab", "4000", nullptr};
      ::execv(argv[0], const_cast<char**>(argv));
      ::_exit(127);
    }
    bool saw_temp = false;
    if (wait_for_temp) {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      while (!saw_temp && std::chrono::steady_clock::now() < deadline && !std::filesystem::exists(out)) {
        for (const auto& f : std::filesystem::directory_iterator(dir.path()))
          if (f.path().filename().string().rfind("killed.sqdk.tmp-", 0) == 0) saw_temp = true;
        if (!saw_temp) std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    // Either nothing under the final name, or a complete valid file (the writer finished before the kill).
    const bool exists = std::filesystem::exists(out);
    if (exists) CHECK_NOTHROW(WeightFile::open(out));
    MESSAGE("kill " << std::string(wait_for_temp ? "when the temporary file appeared" : "after 5 ms") << ": "
                    << std::string(exists ? "complete file" : "no file under the final name")
                    << std::string(saw_temp ? " (killed mid-write)" : ""));
  }
}
