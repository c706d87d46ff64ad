// sqrtdk: the command line. Each subcommand is in tools/cli/cmd_<name>.cpp.
#include "tools/cli/commands.h"
#include "tools/common/usage_error.h"

#include <sqrtdk/error.h>
#include <sqrtdk/isa.h>
#include <sqrtdk/version.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <new>
#include <string>

namespace {

// What a subcommand printed must have reached stdout: a full disk or a closed pipe's EIO otherwise pass as exit 0
// with the output cut short. kOk, or kRuntime with one line saying why.
int stdout_written() {
  errno = 0;
  if (std::fflush(stdout) == 0 && !std::ferror(stdout)) return sqrtdk::cli::kOk;
  std::fprintf(stderr, "sqrtdk: error: writing to standard output failed%s%s\n", errno ? ": " : "",
               errno ? std::strerror(errno) : "");
  return sqrtdk::cli::kRuntime;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace sqrtdk::cli;
  CLI::App app{"sqrtdk: a SIMD CPU inference engine for small transformers.\n"
               "Exit codes: 0 ok, 1 usage error, 2 bad input file, 3 runtime error."};
  app.require_subcommand(1);
  app.set_version_flag("-V,--version", [] {
    std::string isa;
    try {
      isa = sqrtdk::isa_name(sqrtdk::default_isa());
    } catch (const std::exception& e) {
      isa = e.what();
    }
    return std::string("sqrtdk ") + SQRTDK_VERSION_STRING + " (ISA " + isa + "; default model " +
           default_model_path() + ")";
  }, "print the version and exit");
  add_run_command(app);
  add_generate_command(app);
  add_bench_command(app);
  add_profile_command(app);
  add_inspect_command(app);
  add_make_toy_command(app);
  add_explain_scaling_command(app);
  add_attention_map_command(app);
  add_convert_command(app);
  add_tokenize_command(app);
  add_compare_command(app);
  add_calibrate_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    app.exit(e);
    return stdout_written();
  } catch (const CLI::CallForAllHelp& e) {
    app.exit(e);
    return stdout_written();
  } catch (const CLI::CallForVersion& e) {
    std::printf("%s\n", e.what());
    return stdout_written();
  } catch (const CLI::ParseError& e) {
    // One line, like every other error; CLI11's own printer adds a second line.
    std::string where = "sqrtdk";
    for (const CLI::App* sub : app.get_subcommands()) where += " " + sub->get_name();
    if (app.get_subcommands().empty() && argc > 1 && argv[1][0] != '-') {
      std::string names;
      for (const CLI::App* sub : app.get_subcommands({})) names += (names.empty() ? "" : ", ") + sub->get_name();
      std::fprintf(stderr,
                   "sqrtdk: usage error: unknown subcommand '%s' (expected one of: %s; see 'sqrtdk --help')\n",
                   argv[1], names.c_str());
      return kUsage;
    }
    const std::string message = sqrtdk::tools::usage_error_text(e);
    std::fprintf(stderr, "sqrtdk: usage error: %s (see '%s --help')\n", message.c_str(), where.c_str());
    return kUsage;
  } catch (const sqrtdk::Error& e) {
    std::fprintf(stderr, "sqrtdk: error: %s\n", e.what());
    return kBadInput;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "sqrtdk: error: out of memory (an allocation failed: the sizes asked for need more memory "
                         "than this machine or the process's limits allow)\n");
    return kRuntime;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sqrtdk: error: %s\n", e.what());
    return kRuntime;
  }
  return stdout_written();
}
