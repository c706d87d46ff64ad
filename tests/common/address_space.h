// Caps this process's address space (RLIMIT_AS) at what is already mapped plus `extra_bytes`: for tests that check
// an allocation fails cleanly (or that memory stays bounded) in a forked child. Async-signal-safe enough for a child
// of a multi-threaded parent: stdio on /proc and setrlimit only. Returns false if the cap could not be set.
#pragma once

#include <cstddef>
#include <cstdio>

#include <sys/resource.h>

#include "tests/common/sanitizer.h"

namespace sqrtdk::test {

// Sanitizer runtimes reserve terabytes of address space for shadow memory, so a cap cannot be set under them: tests
// that need one are skipped there (test::kUnderSanitizer, tests/common/sanitizer.h; the release build runs them).

inline bool cap_address_space(size_t extra_bytes) {
  size_t mapped_kib = 0;  // libraries, thread stacks, malloc arenas
  if (FILE* status = std::fopen("/proc/self/status", "r")) {
    char line[256];
    while (std::fgets(line, sizeof line, status))
      if (std::sscanf(line, "VmSize: %zu kB", &mapped_kib) == 1) break;
    std::fclose(status);
  }
  if (mapped_kib == 0) return false;
  rlimit cap{};
  cap.rlim_cur = cap.rlim_max = (rlim_t{mapped_kib} << 10) + rlim_t{extra_bytes};
  return setrlimit(RLIMIT_AS, &cap) == 0;
}

}  // namespace sqrtdk::test
