// Helpers for the sqrtdk-serve tests: the real executable as a child process on an ephemeral loopback port
// (tools/serve/child_server.h, shared with perf/bench_serve.cpp), serving the tests' toy model.
#pragma once

#include "tools/serve/child_server.h"

#include <string>
#include <vector>

namespace sqrtdk::serve_test {

// bin/sqrtdk-serve on the random-weight toy model (tests/serve/CMakeLists.txt): unlike the trained default model it
// rarely emits EOS, so streams run as long as a test needs.
class ServerProcess : public serve_harness::ChildServer {
 public:
  explicit ServerProcess(const std::vector<std::string>& args, size_t address_space_bytes = 0)
      : ChildServer(SQRTDK_SERVE_BIN, with_model(args), address_space_bytes) {}

  static std::vector<std::string> with_model(std::vector<std::string> args) {
    args.insert(args.begin(), {"--model", SQRTDK_SERVE_TEST_MODEL});
    return args;
  }
};

using serve_harness::connect_loopback;
using serve_harness::run_to_exit;
using serve_harness::metric_value;

}  // namespace sqrtdk::serve_test
