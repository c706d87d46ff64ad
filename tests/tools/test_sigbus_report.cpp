// A model file truncated while a program has it mapped (tools/common/sigbus_report.h): the process ends with a
// message naming the file and status 2, not a silent SIGBUS death.
#include <doctest/doctest.h>

#include <sqrtdk/model.h>
#include <sqrtdk/session.h>

#include "tests/common/toy_model.h"
#include "tools/common/sigbus_report.h"

#include <string>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

using namespace sqrtdk;

TEST_CASE("sigbus report: a model truncated while loaded ends the program with a message naming it") {
  test::TempDir dir;
  const std::string path = dir.file("model.sqdk");
  test::write_toy_model(path, test::toy_llama_config(), 4);  // f32: embedding rows are read from the mapping

  int err[2];
  REQUIRE(pipe(err) == 0);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {  // no doctest macros in the child; the exit code says what happened
    dup2(err[1], STDERR_FILENO);
    close(err[0]);
    try {
      tools::report_sigbus_for_model(path);
      ModelOptions mo;
      mo.n_threads = 1;
      auto model = Model::load(path, mo);
      SessionOptions so;
      so.n_threads = 1;  // no OpenMP team in a forked child
      Session session(model, so);
      if (truncate(path.c_str(), 0) != 0) _exit(10);
      const std::vector<uint32_t> prompt = {7, 8, 9};
      session.prefill(prompt);  // reads embedding rows from the truncated mapping: SIGBUS
    } catch (...) {
      _exit(11);
    }
    _exit(12);  // no SIGBUS came: the test's premise (rows read from the mapping) no longer holds
  }
  close(err[1]);
  std::string output;
  char buf[512];
  for (ssize_t n; (n = read(err[0], buf, sizeof buf)) > 0;) output.append(buf, static_cast<size_t>(n));
  close(err[0]);
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  CAPTURE(output);
  REQUIRE(WIFEXITED(status));  // not killed by the signal
  CHECK(WEXITSTATUS(status) == 2);
  CHECK(output.find("SIGBUS") != std::string::npos);
  CHECK(output.find(path) != std::string::npos);
  CHECK(output.find("truncated or rewritten") != std::string::npos);
}
