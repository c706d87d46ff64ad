#!/usr/bin/env bash
# Sets up, builds and runs every test with CTest:
#   1. release: tools/check_setup_packages.py (every package the configure used is installed by tools/setup.sh),
#      then unit, golden, CLI, C API, install and benchmark smoke tests;
#   2. asan: the same suite under AddressSanitizer + UndefinedBehaviorSanitizer (benchmarks excluded);
#   3. tsan: the whole suite under ThreadSanitizer (clang; the tools and sqrtdk-serve too), bar the two tests that
#      call oneDNN (uninstrumented libgomp: see the stage);
#   4. fuzz: every libFuzzer target in tests/fuzz replays its committed corpus, then fuzzes for
#      SQRTDK_FUZZ_SECONDS (default 60) seconds from it (new inputs go to a scratch folder, not the corpus).
# SQRTDK_TEST_QUICK=1 runs the release suite only. SQRTDK_TEST_STAGES="tsan fuzz" (any subset of
# "release asan tsan fuzz") runs only those stages.
set -euo pipefail
cd "$(dirname "$0")/.."
./tools/setup.sh
start=$(date +%s)
jobs=$(nproc)
stages=${SQRTDK_TEST_STAGES:-release asan tsan fuzz}
[[ "${SQRTDK_TEST_QUICK:-0}" == "1" ]] && stages=release
want() { [[ " $stages " == *" $1 "* ]]; }
stage_start=$start
stage_done() { local now; now=$(date +%s); echo "== $1: done in $(( now - stage_start )) s"; stage_start=$now; }

if want release; then
  echo "== release: build"
  cmake --preset release >/dev/null
  # Every package the configure used must come from setup.sh's list (or a hard dependency of it): a package that
  # happens to be on this machine must not hide a missing install step (it once did: ocl-icd-opencl-dev).
  /usr/bin/python3 tools/check_setup_packages.py build/release
  /usr/bin/python3 tools/check_setup_packages.py build/release --self-test
  cmake --build --preset release -j"$jobs"
  echo "== release: ctest"
  ctest --preset release -j"$jobs" --output-on-failure
  build/release/bin/sqrtdk-tests --covered-isas
  stage_done release
fi

if want asan; then
  echo "== asan: build"
  cmake --preset asan >/dev/null
  cmake --build --preset asan -j"$jobs"
  echo "== asan: ctest"
  # allocator_may_return_null: an allocation too large for ASan's allocator returns null as malloc would, so the
  # engine's out-of-memory errors are tested here too (ASan aborts on it by default).
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:allocator_may_return_null=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --preset asan -j"$jobs" --output-on-failure
  build/asan/bin/sqrtdk-tests --covered-isas
  stage_done asan
fi

if want tsan; then
  echo "== tsan: build"
  cmake --preset tsan >/dev/null
  cmake --build --preset tsan -j"$jobs"
  echo "== tsan: ctest (every test but the two that call oneDNN)"
  # Every test runs under TSan, CLI and sqrtdk-serve child processes included. Left out, by name: the two tests that
  # call oneDNN (the GEMM cross-check and the peer's thread-count test): Debian's libdnnl runs on libgomp, which is
  # not instrumented and whose synchronisation TSan cannot see, so its output buffers would show as false races.
  # The ops' own threading is ours (ops/base/thread_pool.h) and fully visible. The roofs probe is the one OpenMP
  # region left: with Archer (LLVM's OMPT tool, shipped with libomp) TSan sees libomp's barriers, and
  # ignore_noninstrumented_modules skips accesses inside libomp itself. allocator_may_return_null: as in asan.
  archer="$(dirname "$(readlink -f "$(command -v clang)")")/../lib/libarcher.so"
  [[ -f "$archer" ]] || { echo "test.sh: libarcher.so not found at $archer" >&2; exit 1; }
  OMP_TOOL_LIBRARIES="$archer" ARCHER_OPTIONS=verbose=0 \
    TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:ignore_noninstrumented_modules=1:allocator_may_return_null=1" \
    ctest --preset tsan -j"$jobs" --output-on-failure -E "oneDNN|onednn peer"
  build/tsan/bin/sqrtdk-tests --covered-isas
  stage_done tsan
fi

if want fuzz; then
  echo "== fuzz: build"
  cmake --preset fuzz >/dev/null
  mapfile -t fuzzers < build/fuzz/fuzzers.txt
  cmake --build --preset fuzz -j"$jobs" --target "${fuzzers[@]}"
  scratch=$(mktemp -d)
  trap 'rm -rf "$scratch"' EXIT
  for f in "${fuzzers[@]}"; do
    seeds=tests/fuzz/corpus/$f
    echo "== fuzz: $f: replay $(ls "$seeds" | wc -l) seeds"
    build/fuzz/bin/"$f" -runs=0 "$seeds"
  done
  # Each libFuzzer run is one thread: fuzz as many targets at once as there are cores, each for the full time.
  fuzz_one() {
    local f=$1 seeds=tests/fuzz/corpus/$1
    mkdir -p "$scratch/$f"
    build/fuzz/bin/"$f" -max_total_time="${SQRTDK_FUZZ_SECONDS:-60}" -print_final_stats=1 \
      -artifact_prefix="$PWD/build/fuzz/crash-$f-" "$scratch/$f" "$seeds" >"build/fuzz/$f.log" 2>&1
  }
  for ((i = 0; i < ${#fuzzers[@]}; i += jobs)); do
    batch=("${fuzzers[@]:i:jobs}")
    echo "== fuzz: ${batch[*]}: ${SQRTDK_FUZZ_SECONDS:-60} s each, at once"
    pids=()
    for f in "${batch[@]}"; do fuzz_one "$f" & pids+=($!); done
    for k in "${!batch[@]}"; do
      f=${batch[$k]}
      if ! wait "${pids[$k]}"; then
        tail -n 60 "build/fuzz/$f.log"
        echo "test.sh: $f failed (log: build/fuzz/$f.log); the input is in build/fuzz/crash-$f-*" >&2
        exit 1
      fi
      echo "-- $f:"; grep -E '^stat::(number_of_executed_units|average_exec_per_sec|new_units_added)' "build/fuzz/$f.log"
    done
  done
  stage_done fuzz
fi

echo "test.sh: all suites passed in $(( $(date +%s) - start )) s"
