#!/usr/bin/env bash
# Sets up, builds and runs every test with CTest:
#   1. release: unit, golden, CLI, C API and benchmark smoke tests;
#   2. asan: the same suite under AddressSanitizer + UndefinedBehaviorSanitizer (benchmarks excluded).
# SQRTDK_TEST_QUICK=1 runs the release suite only.
set -euo pipefail
cd "$(dirname "$0")/.."
./tools/setup.sh
start=$(date +%s)
jobs=$(nproc)

echo "== release: build"
cmake --preset release >/dev/null
cmake --build --preset release -j"$jobs"
echo "== release: ctest"
ctest --preset release -j"$jobs"

if [[ "${SQRTDK_TEST_QUICK:-0}" != "1" ]]; then
  echo "== asan: build"
  cmake --preset asan >/dev/null
  cmake --build --preset asan -j"$jobs"
  echo "== asan: ctest"
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --preset asan -j"$jobs"
fi

echo "test.sh: all suites passed in $(( $(date +%s) - start )) s"
