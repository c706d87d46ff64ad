// Subcommands of the sqrtdk command line. Each lives in tools/cli/cmd_<name>.cpp and registers itself on the app
// with add_<name>_command(); main.cpp lists them in order.
//
// Exit codes (documented in README and `sqrtdk --help`):
//   0 ok, 1 usage error (bad flags), 2 bad input file (unreadable, corrupt or invalid model), 3 runtime error.
#pragma once

#include "tools/common/default_model.h"

#include <CLI/CLI.hpp>

#include <string>

namespace sqrtdk::cli {

enum ExitCode { kOk = 0, kUsage = 1, kBadInput = 2, kRuntime = 3 };

// The bundled default model (built by the build from a fixed seed until a trained model ships).
using tools::default_model_path;  // tools/common/default_model.h

void add_run_command(CLI::App& app);
void add_generate_command(CLI::App& app);
void add_profile_command(CLI::App& app);
void add_bench_command(CLI::App& app);

// Whether perf_event_open gives hardware cycle counts here; prints one line saying so.
bool hw_counters_available();
void hw_counters_note();
void add_inspect_command(CLI::App& app);   // tools/cli/cmd_inspect.cpp
void add_make_toy_command(CLI::App& app);  // tools/cli/cmd_make_toy.cpp
void add_explain_scaling_command(CLI::App& app);  // tools/cli/cmd_explain_scaling.cpp
void add_attention_map_command(CLI::App& app);    // tools/cli/cmd_attention_map.cpp
void add_convert_command(CLI::App& app);   // tools/cli/cmd_convert.cpp
void add_tokenize_command(CLI::App& app);  // tools/cli/cmd_tokenize.cpp
void add_compare_command(CLI::App& app);   // tools/cli/cmd_compare.cpp
void add_calibrate_command(CLI::App& app); // tools/cli/cmd_calibrate.cpp


}  // namespace sqrtdk::cli
