#!/usr/bin/env bash
# Sets up, builds and runs every test with CTest: the release build (unit, golden, CLI and benchmark smoke tests).
set -euo pipefail
cd "$(dirname "$0")/.."
./tools/setup.sh
start=$(date +%s)

echo "== release: build"
cmake --preset release >/dev/null
cmake --build --preset release
echo "== release: ctest"
ctest --preset release -j2

echo "test.sh: all suites passed in $(( $(date +%s) - start )) s"
