// A command-line parse error in the tools' words: sqrtdk and sqrtdk-serve print it as one line,
// "TOOL: usage error: WHAT (see 'TOOL --help')", and exit 1. CLI11_PARSE would print two lines and exit with CLI11's
// own codes (105 for a value out of range, 109 for an unknown option), which no tool documents.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

namespace sqrtdk::tools {

// What failed, naming the option.
inline std::string usage_error_text(const CLI::ParseError& e) {
  // CLI11's "Could not convert: --seed = abc" says what failed but not what was expected: say it our way.
  std::string message = e.what();
  if (const std::string prefix = "Could not convert: "; message.rfind(prefix, 0) == 0) {
    const size_t eq = message.find(" = ", prefix.size());
    if (eq != std::string::npos)
      message = message.substr(prefix.size(), eq - prefix.size()) + ": '" + message.substr(eq + 3) +
                "' is not a value of the expected type (see the type in --help)";
  }
  return message;
}

// A validator refusing an empty value (CLI11 passes `--host ""` through as ""): `why` says what "" would have meant.
inline CLI::Validator non_empty(const std::string& why) {
  return CLI::Validator([why](std::string& value) { return value.empty() ? "must not be empty; " + why : ""; },
                        "", "NON_EMPTY");
}

}  // namespace sqrtdk::tools
