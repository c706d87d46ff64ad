// TempDir: a fresh folder under the system temp folder, removed with everything in it when the object dies.
// The one definition for every test (two same-named classes in sqrtdk::test would break the ODR).
#pragma once

#include <atomic>
#include <filesystem>
#include <string>

#include <unistd.h>

namespace sqrtdk::test {

class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::temp_directory_path() /
            ("sqrtdk-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace sqrtdk::test
