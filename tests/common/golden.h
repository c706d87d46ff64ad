// The PyTorch golden fixtures (tools/make_golden.py): every folder tests/data/golden/<name>/ with a fixture.json,
// in name order. Tests iterate this list, so a new family's fixture is picked up without editing them.
#pragma once

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

namespace sqrtdk::test {

inline std::string golden_dir(const std::string& name) {
  return std::string(SQRTDK_TEST_DATA_DIR) + "/golden/" + name;
}

inline std::vector<std::string> golden_names() {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(std::string(SQRTDK_TEST_DATA_DIR) + "/golden"))
    if (std::filesystem::exists(entry.path() / "fixture.json")) names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace sqrtdk::test
