// Reading the files tests write or ship (outputs, fixtures) and the path of the command line built beside them.
// One copy for every test file: the sanitizer builds compile test files together (a unity build), where two
// file-local copies of a helper would clash.
#pragma once

#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>

#include <sys/wait.h>

namespace sqrtdk::test {

// The whole file, byte for byte; "" if it cannot be opened (the tests then check what they expected in it).
inline std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// The file parsed as JSON; a file that cannot be opened fails the test, naming it.
inline nlohmann::json read_json(const std::string& path) {
  std::ifstream f(path);
  REQUIRE_MESSAGE(f.good(), "cannot open " << path);
  return nlohmann::json::parse(f);
}

// Runs a shell command; returns its exit status (or -1 if it did not exit normally).
inline int run_shell(const std::string& command) {
  const int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// The python the tools that make fixtures run with (Debian's: another python3 may be first on PATH).
inline const std::string kPython = "/usr/bin/python3";

#ifdef SQRTDK_BIN_DIR
// The sqrtdk command line of this build (tests/CMakeLists.txt sets SQRTDK_BIN_DIR).
inline const std::string kCli = std::string(SQRTDK_BIN_DIR) + "/sqrtdk";
#endif

}  // namespace sqrtdk::test
