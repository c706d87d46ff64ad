#!/usr/bin/env bash
# Installs sqrtdk into a temporary prefix, builds a C++ consumer (find_package) and a C consumer (pkg-config)
# against it, and runs both on a model. Usage: run_install_test.sh BUILD_DIR SOURCE_DIR MODEL
set -euo pipefail
build=$1 src=$2 model=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
cmake -S "$src/tests/install/cxx_consumer" -B "$tmp/cxx" -G Ninja -DCMAKE_PREFIX_PATH="$tmp/prefix" \
  -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$tmp/cxx" >/dev/null
"$tmp/cxx/consumer" "$model"
export PKG_CONFIG_PATH="$tmp/prefix/lib/pkgconfig"
# shellcheck disable=SC2046
cc -std=c11 -Wall -Wextra -o "$tmp/c_consumer" "$src/tests/install/c_consumer/main.c" $(pkg-config --cflags --libs sqrtdk)
LD_LIBRARY_PATH="$tmp/prefix/lib" "$tmp/c_consumer" "$model"
echo "install test: both consumers built against $tmp/prefix and ran"
