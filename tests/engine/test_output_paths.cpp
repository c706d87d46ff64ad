// Where a .sqdk may be written (engine/src/format/format_writer.cpp, `sqrtdk convert -o`): only to a plain file
// path. Special files, symbolic links, directories and the checkpoint's own files are refused before any data is
// produced; temporary files left by a killed writer are removed by the next writer of the same path.
#include <doctest/doctest.h>

#include <sqrtdk/convert.h>
#include <sqrtdk/error.h>

#include "tests/common/toy_model.h"

#include <filesystem>
#include <fstream>
#include <string>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace sqrtdk;
namespace fs = std::filesystem;

namespace {

bool is_fifo(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0 && S_ISFIFO(st.st_mode);
}

}  // namespace

TEST_CASE("output paths: a FIFO, a directory and a symbolic link are refused and left as they were") {
  test::TempDir dir;
  const ModelConfig c = test::toy_llama_config();

  const std::string fifo = dir.file("fifo.sqdk");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);  // stands in for /dev/null: any non-regular file
  CHECK_THROWS_WITH_AS(test::write_toy_model(fifo, c, 1), doctest::Contains("not a regular file"), Error);
  CHECK(is_fifo(fifo));  // not replaced by a regular file

  const std::string folder = dir.file("folder.sqdk");
  fs::create_directory(folder);
  CHECK_THROWS_WITH_AS(test::write_toy_model(folder, c, 1), doctest::Contains("is a directory"), Error);
  CHECK(fs::is_directory(folder));

  const std::string target = dir.file("target.sqdk"), link = dir.file("link.sqdk");
  test::write_toy_model(target, c, 1);
  const auto target_size = fs::file_size(target);
  fs::create_symlink(target, link);
  CHECK_THROWS_WITH_AS(test::write_toy_model(link, c, 2), doctest::Contains("is a symbolic link"), Error);
  CHECK(fs::is_symlink(link));
  CHECK(fs::file_size(target) == target_size);

  // No temporary file is left behind by any refusal.
  for (const auto& entry : fs::directory_iterator(dir.path()))
    CHECK(entry.path().filename().string().find(".tmp-") == std::string::npos);
}

TEST_CASE("output paths: convert refuses to write over the checkpoint's own files") {
  test::TempDir dir;
  const std::string src = std::string(SQRTDK_TEST_DATA_DIR) + "/golden/llama_mha/hf";
  for (const char* f : {"config.json", "model.safetensors"}) fs::copy_file(src + "/" + f, dir.file(f));
  const auto size = fs::file_size(dir.file("model.safetensors"));
  CHECK_THROWS_WITH_AS(convert_hf_checkpoint(dir.path().string(), dir.file("model.safetensors")),
                       doctest::Contains("is the checkpoint's own file"), Error);
  CHECK_THROWS_WITH_AS(convert_hf_checkpoint(dir.path().string(), dir.file("config.json")),
                       doctest::Contains("is the checkpoint's own file"), Error);
  CHECK(fs::file_size(dir.file("model.safetensors")) == size);
  CHECK_NOTHROW(convert_hf_checkpoint(dir.path().string(), dir.file("out.sqdk")));
}

TEST_CASE("output paths: a killed writer's temporary file is removed by the next writer of that path") {
  test::TempDir dir;
  const std::string out = dir.file("m.sqdk");
  // A pid that no longer runs: a child that has exited and been reaped.
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) _exit(0);
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  const std::string stale = out + ".tmp-" + std::to_string(child) + "-Ab12Cd";
  const std::string live = out + ".tmp-" + std::to_string(::getpid()) + "-Ef34Gh";  // a writer still running
  const std::string other = dir.file("other.sqdk.tmp-" + std::to_string(child) + "-Ij56Kl");  // another output's
  for (const auto& p : {stale, live, other}) std::ofstream(p) << "partial";
  test::write_toy_model(out, test::toy_llama_config(), 1);
  CHECK_FALSE(fs::exists(stale));
  CHECK(fs::exists(live));
  CHECK(fs::exists(other));
  CHECK(fs::is_regular_file(out));
}
