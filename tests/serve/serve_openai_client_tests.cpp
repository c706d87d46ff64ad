// sqrtdk-serve under the official OpenAI Node SDK: tests/clients/openai_client_test.mjs against the chat model
// (random weights, a real tokenizer and chat template). The SDK is installed with `npm ci` from the committed lock
// into the build directory, never the source tree. Skipped (with a message) only when node or npm is absent; a
// failing `npm ci` (e.g. no registry) fails the test.
#include "tests/serve/serve_test_util.h"

#include <doctest/doctest.h>

#include <cstdio>
#include <filesystem>
#include <string>

namespace {

namespace fs = std::filesystem;
using sqrtdk::serve_test::run_to_exit;

bool on_path(const std::string& command) {
  return run_to_exit("/bin/sh", {"-c", "command -v " + command}).status == 0;
}

}  // namespace

TEST_CASE("serve openai client: the OpenAI Node SDK gets OpenAI's shapes, consistent streams and typed errors") {
  if (!on_path("node") || !on_path("npm")) {
    MESSAGE("SKIPPED: node or npm is not installed (tools/setup.sh installs them)");
    return;
  }
  const fs::path source = SQRTDK_CLIENTS_DIR;
  const fs::path work = SQRTDK_CLIENTS_WORK_DIR;
  fs::create_directories(work);
  for (const char* name : {"package.json", "package-lock.json", "openai_client_test.mjs"})
    fs::copy_file(source / name, work / name, fs::copy_options::overwrite_existing);
  const auto install = run_to_exit("/bin/sh",
                                   {"-c", "npm ci --prefix '" + work.string() +
                                              "' --prefer-offline --no-audit --no-fund --loglevel=error 2>&1"},
                                   0, 600);
  INFO("npm ci output:\n" << install.output);
  REQUIRE(install.status == 0);

  sqrtdk::serve_harness::ChildServer server(SQRTDK_SERVE_BIN, {"--model", SQRTDK_SERVE_CHAT_MODEL});
  const auto run = run_to_exit("/bin/sh",
                               {"-c", "node '" + (work / "openai_client_test.mjs").string() + "' http://127.0.0.1:" +
                                          std::to_string(server.port()) + "/v1 2>&1"},
                               0, 300);
  INFO("node output:\n" << run.output);
  // Also kept beside the installed SDK, so a failure leaves its evidence even where the test's output is lost.
  if (FILE* f = std::fopen((work / "last_run.log").c_str(), "w")) {
    std::fprintf(f, "npm ci:\n%s\nnode (exit %d):\n%s\n", install.output.c_str(), run.status, run.output.c_str());
    std::fclose(f);
  }
  CHECK(run.status == 0);
  CHECK(run.output.find("all OpenAI SDK checks passed") != std::string::npos);
}
