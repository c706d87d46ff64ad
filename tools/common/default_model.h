// Where the programs find the bundled model when no --model is given (sqrtdk and sqrtdk-serve share this).
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>

namespace sqrtdk::tools {

// SQRTDK_MODEL if set; else, from the program's own path: installed, <prefix>/bin/<program> and
// <prefix>/share/sqrtdk/models/default.sqdk (cmake --install); in the build tree, <build>/bin/<program> and
// <build>/models/default.sqdk. The first that exists; else the build-tree path (so the error names where it looked).
inline std::string default_model_path() {
  if (const char* env = std::getenv("SQRTDK_MODEL"); env && env[0]) return env;
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return "models/default.sqdk";
  const auto prefix = exe.parent_path().parent_path();
  const auto installed = prefix / "share" / "sqrtdk" / "models" / "default.sqdk";
  const auto build_tree = prefix / "models" / "default.sqdk";
  if (!std::filesystem::exists(build_tree, ec) && std::filesystem::exists(installed, ec)) return installed.string();
  return build_tree.string();
}

}  // namespace sqrtdk::tools
