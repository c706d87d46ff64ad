// The doctest runner for sqrtdk-tests. Each TEST_CASE is also registered with CTest (doctest_discover_tests).
//
// `sqrtdk-tests --covered-isas` prints which kernel ISAs the tests run on this machine (they loop over
// supported_isas(), which leaves out what the CPU lacks) and which they cannot, with the CPU model, then exits.
// tools/test.sh prints it after each stage, so a CI log says what a green run covered.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <sqrtdk/isa.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

namespace {

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown CPU";
}

int print_covered_isas() {
  std::string covered, missing;
  for (int i = 0; i <= static_cast<int>(sqrtdk::kHighestIsa); ++i) {
    const auto isa = static_cast<sqrtdk::Isa>(i);
    (sqrtdk::cpu_supports(isa) ? covered : missing) += std::string(" ") + sqrtdk::isa_name(isa);
  }
  std::printf("ISAs covered on this machine (%s):%s\n", cpu_model().c_str(), covered.c_str());
  if (!missing.empty()) std::printf("ISAs NOT covered (this CPU lacks them):%s\n", missing.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--covered-isas") == 0) return print_covered_isas();
  doctest::Context context(argc, argv);
  return context.run();
}
