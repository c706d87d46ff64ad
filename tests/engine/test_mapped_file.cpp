// MappedFile (engine/src/import/mapped_file.h), what the GGUF and safetensors readers open files with: the bytes
// mapped and read back, and every way a path can be wrong (missing, a folder, a FIFO, an empty file, a range past
// the end, a file truncated after it was opened) a clear error naming the path.
#include <doctest/doctest.h>

#include <sqrtdk/error.h>

#include "engine/src/import/mapped_file.h"
#include "tests/common/temp_dir.h"
#include "tests/engine/test_format_util.h"

#include <cstring>
#include <string>
#include <vector>

#include <sys/stat.h>
#include <unistd.h>

using sqrtdk::Error;
using sqrtdk::MappedFile;
using sqrtdk::test::TempDir;

namespace {
std::vector<unsigned char> mapped_file_pattern(size_t n) {
  std::vector<unsigned char> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<unsigned char>((i * 7 + 3) & 0xFF);
  return v;
}
}  // namespace

TEST_CASE("MappedFile: maps a file and reads any range of it back") {
  TempDir dir;
  const auto bytes = mapped_file_pattern(10'000);
  sqrtdk::test::write_bytes(dir.file("f.bin"), bytes);
  const MappedFile f(dir.file("f.bin"));
  CHECK(f.path() == dir.file("f.bin"));
  REQUIRE(f.size() == bytes.size());
  REQUIRE(f.bytes() != nullptr);
  CHECK(std::memcmp(f.bytes(), bytes.data(), bytes.size()) == 0);
  // Ranges at the start, the middle, the very end, and an empty one at the end.
  struct Range {
    uint64_t offset, size;
  };
  for (const Range r : {Range{0, 1}, Range{0, 10'000}, Range{4'097, 3'000}, Range{9'999, 1}, Range{10'000, 0}}) {
    const uint64_t offset = r.offset, size = r.size;  // plain variables: clang's CAPTURE cannot take a binding
    CAPTURE(offset);
    CAPTURE(size);
    std::vector<unsigned char> got(size + 1, 0xEE);
    f.read(offset, size, got.data());
    CHECK(std::memcmp(got.data(), bytes.data() + offset, size) == 0);
    CHECK(got[size] == 0xEE);  // nothing written past the range
  }
}

TEST_CASE("MappedFile: a range past the end, a missing file, a folder, a FIFO and a truncated file are errors") {
  TempDir dir;
  const auto bytes = mapped_file_pattern(4'096);
  sqrtdk::test::write_bytes(dir.file("f.bin"), bytes);
  std::vector<unsigned char> out(8'192);
  {
    const MappedFile f(dir.file("f.bin"));
    CHECK_THROWS_WITH_AS(f.read(4'000, 97, out.data()), (dir.file("f.bin") + ": read past the end of the file").c_str(),
                         Error);
    CHECK_THROWS_WITH_AS(f.read(4'097, 0, out.data()), doctest::Contains("read past the end"), Error);
    CHECK_THROWS_WITH_AS(f.read(1, UINT64_MAX, out.data()), doctest::Contains("read past the end"), Error);  // no wrap
  }
  const std::string missing = dir.file("none.bin") + ": cannot open: No such file or directory";
  CHECK_THROWS_WITH_AS(MappedFile(dir.file("none.bin")), missing.c_str(), Error);
  CHECK_THROWS_WITH_AS(MappedFile(dir.path().string()), (dir.path().string() + ": not a regular file").c_str(), Error);
  REQUIRE(::mkfifo(dir.file("fifo").c_str(), 0600) == 0);  // must not block waiting for a writer
  CHECK_THROWS_WITH_AS(MappedFile(dir.file("fifo")), (dir.file("fifo") + ": not a regular file").c_str(), Error);

  // Truncated after it was opened: the copy by pread comes up short and says so (the mapping is not touched).
  const MappedFile f(dir.file("f.bin"));
  REQUIRE(::truncate(dir.file("f.bin").c_str(), 1'000) == 0);
  f.read(0, 1'000, out.data());
  CHECK(std::memcmp(out.data(), bytes.data(), 1'000) == 0);
  CHECK_THROWS_WITH_AS(f.read(500, 1'000, out.data()),
                       doctest::Contains("read failed at offset 1000: the file is shorter than when it was opened"),
                       Error);
}

TEST_CASE("MappedFile: an empty file maps to no bytes; caller-held bytes read the same way") {
  TempDir dir;
  sqrtdk::test::write_bytes(dir.file("empty.bin"), {});
  const MappedFile empty(dir.file("empty.bin"));
  CHECK(empty.size() == 0);
  CHECK(empty.bytes() == nullptr);
  empty.read(0, 0, nullptr);
  CHECK_THROWS_AS(empty.read(0, 1, nullptr), Error);

  const auto bytes = mapped_file_pattern(300);
  const MappedFile held(bytes.data(), bytes.size(), "fuzz input");
  CHECK(held.bytes() == bytes.data());
  std::vector<unsigned char> got(100);
  held.read(200, 100, got.data());
  CHECK(std::memcmp(got.data(), bytes.data() + 200, 100) == 0);
  CHECK_THROWS_WITH_AS(held.read(250, 51, got.data()), "fuzz input: read past the end of the file", Error);
}
