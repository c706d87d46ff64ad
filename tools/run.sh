#!/usr/bin/env bash
# The main job: set up, build the release preset, run one forward pass of the bundled default model and print the
# next-token top-5 with probabilities and the time it took. Extra arguments go to `sqrtdk run`.
set -euo pipefail
cd "$(dirname "$0")/.."
./tools/setup.sh
cmake --preset release >/dev/null
cmake --build --preset release
exec ./build/release/bin/sqrtdk run "$@"
