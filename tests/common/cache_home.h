// CacheHome: points XDG_CACHE_HOME at a fresh folder for one test case and puts the old value back when it dies
// (also when a REQUIRE ends the case early). Tests of the per-machine caches (roofs, attention paths) use it so
// they never read or write the user's ~/.cache/sqrtdk.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>

#include "tests/common/temp_dir.h"

namespace sqrtdk::test {

class CacheHome {
 public:
  CacheHome() {
    if (const char* old = std::getenv("XDG_CACHE_HOME")) had_ = true, saved_ = old;
    setenv("XDG_CACHE_HOME", dir_.path().c_str(), 1);
  }
  ~CacheHome() {
    if (had_)
      setenv("XDG_CACHE_HOME", saved_.c_str(), 1);
    else
      unsetenv("XDG_CACHE_HOME");
  }
  CacheHome(const CacheHome&) = delete;
  CacheHome& operator=(const CacheHome&) = delete;
  const std::filesystem::path& path() const { return dir_.path(); }
  // Where the engine keeps a cache file named `name` under this home.
  std::filesystem::path file(const std::string& name) const { return dir_.path() / "sqrtdk" / name; }

 private:
  TempDir dir_;
  std::string saved_;
  bool had_ = false;
};

}  // namespace sqrtdk::test
