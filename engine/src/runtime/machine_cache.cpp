#include "engine/src/runtime/machine_cache.h"

#include <cstdlib>
#include <ctime>
#include <fstream>

#include <unistd.h>

namespace sqrtdk::machine_cache {

namespace fs = std::filesystem;

fs::path folder() {
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && x[0]) return fs::path(x) / "sqrtdk";
  if (const char* h = std::getenv("HOME"); h && h[0]) return fs::path(h) / ".cache" / "sqrtdk";
  return {};
}

std::string cpu_identity() {
  std::ifstream in("/proc/cpuinfo");
  std::string name = "unknown", family, model, stepping;
  auto value = [](const std::string& line) { return line.substr(line.find(':') + 2); };
  for (std::string line; std::getline(in, line) && !line.empty();) {  // the first processor's block
    if (line.rfind("model name", 0) == 0) name = value(line);
    else if (line.rfind("cpu family", 0) == 0) family = value(line);
    else if (line.rfind("model\t", 0) == 0) model = value(line);
    else if (line.rfind("stepping", 0) == 0) stepping = value(line);
  }
  if (family.empty() && model.empty()) return name;
  return name + " (family " + family + " model " + model + " stepping " + stepping + ")";
}

nlohmann::json read_object(const fs::path& file) {
  std::ifstream in(file);
  if (!in) return nlohmann::json::object();
  try {
    nlohmann::json j = nlohmann::json::parse(in);
    if (j.is_object()) return j;
  } catch (const std::exception&) {
  }
  return nlohmann::json::object();
}

std::string write_atomically(const fs::path& file, const nlohmann::json& cache) {
  std::error_code ec;
  fs::create_directories(file.parent_path(), ec);
  const fs::path tmp = file.string() + ".tmp" + std::to_string(::getpid());
  {
    std::ofstream out(tmp);
    if (!(out << cache.dump(2) && out.flush())) {
      fs::remove(tmp, ec);
      return "cannot write " + tmp.string();
    }
  }
  fs::rename(tmp, file, ec);
  if (ec) {
    fs::remove(tmp, ec);
    return "cannot write " + file.string();
  }
  return "";
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace sqrtdk::machine_cache
