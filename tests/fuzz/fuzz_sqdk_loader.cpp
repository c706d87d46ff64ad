// libFuzzer target: the .sqdk loader (header, config, directory and data checks) on arbitrary bytes.
// Contract under test: WeightFile::open either succeeds or throws sqrtdk::Error; never a crash, an ASan/UBSan
// report, or another exception type. Checksums are skipped (else nearly every mutation stops at the header CRC and
// the fuzzer never reaches the directory and config checks); the finite check is on so the data scan runs too.
// A file that opens has every tensor's bytes read (an out-of-range offset would fault here) and, with checksums
// goes through Model::load too (family tensor set, shapes, packing).
#include <sqrtdk/error.h>
#include <sqrtdk/format.h>
#include <sqrtdk/model.h>

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace {

// One memfd for the whole run, rewritten per input: no disk traffic, no temp files left behind.
const std::string& memfd_path() {
  static const std::string path = [] {
    const int fd = memfd_create("sqdk-fuzz", 0);
    if (fd < 0) {
      std::perror("memfd_create");
      std::abort();
    }
    return "/proc/self/fd/" + std::to_string(fd);
  }();
  return path;
}

void write_input(const uint8_t* data, size_t size) {
  FILE* f = std::fopen(memfd_path().c_str(), "wb");  // "w" truncates the memfd
  if (!f || (size && std::fwrite(data, 1, size, f) != size) || std::fclose(f) != 0) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  write_input(data, size);
  sqrtdk::LoadOptions options;
  options.verify_checksums = false;
  options.check_finite = true;
  options.max_bytes = 1 << 24;
  options.n_threads = 1;
  try {
    auto file = sqrtdk::WeightFile::open(memfd_path(), options);
    uint64_t sum = 0;
    for (const auto& t : file->tensors()) {
      const auto* p = static_cast<const uint8_t*>(file->data(t));
      for (uint64_t i = 0; i < t.size; ++i) sum += p[i];
    }
    if (sum == 0x5a5a5a5a5a5a5a5aull) std::puts("");  // keep the reads
    sqrtdk::ModelOptions mo;
    mo.load = options;
    mo.n_threads = 1;
    (void)sqrtdk::Model::load(memfd_path(), mo);
  } catch (const sqrtdk::Error&) {
    // the expected outcome for malformed input
  }
  return 0;
}
