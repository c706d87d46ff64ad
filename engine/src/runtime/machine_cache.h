// The per-machine cache folder and key shared by what the engine measures once per machine and keeps: the roofs
// (engine/src/profiler/profiler.cpp) and the attention path tables (attention_paths_cache.cpp).
#pragma once

#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>

namespace sqrtdk::machine_cache {

// ($XDG_CACHE_HOME or $HOME/.cache)/sqrtdk; empty when neither variable is set (nothing is then cached).
std::filesystem::path folder();

// What tells CPUs apart: /proc/cpuinfo's model name, and its family, model and stepping numbers (two different
// Xeons both call themselves "Intel(R) Xeon(R) Processor" in a VM: the numbers differ), e.g.
// "Intel(R) Xeon(R) Processor (family 6 model 207 stepping 2)".
std::string cpu_identity();

// The JSON object in `file`, or an empty object when the file is absent or does not parse (a corrupt cache is
// re-measured and rewritten, never an error).
nlohmann::json read_object(const std::filesystem::path& file);

// Writes `cache` to `file` through a temporary file and a rename (a reader never sees half a file; concurrent
// writers each leave a whole one). Creates the folder. Returns "" or why it could not be written.
std::string write_atomically(const std::filesystem::path& file, const nlohmann::json& cache);

// "2026-12-01T21:38:43Z".
std::string utc_now();

}  // namespace sqrtdk::machine_cache
