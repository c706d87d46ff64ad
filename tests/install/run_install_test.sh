#!/usr/bin/env bash
# Installs sqrtdk into a temporary prefix and checks what a user of the install gets:
#   - the prefix layout (README.md, "Installing"): bin/sqrtdk, bin/sqrtdk-serve, share/sqrtdk/models/default.sqdk,
#     the headers, both libraries, the CMake package and the pkg-config file;
#   - the installed programs run from the prefix with no build tree beside them: `sqrtdk --version`, and
#     `sqrtdk run` with no --model finds the installed default model; `sqrtdk-serve --help` starts;
#   - a C++ consumer (find_package) and a C consumer (pkg-config) build against the prefix and run on the model,
#     the C one without LD_LIBRARY_PATH (the .pc file's rpath hint).
# Usage: run_install_test.sh BUILD_DIR SOURCE_DIR MODEL
set -euo pipefail
build=$1 src=$2 model=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "install test: $*" >&2; exit 1; }

prefix=$tmp/prefix
cmake --install "$build" --prefix "$prefix" >/dev/null
for f in bin/sqrtdk bin/sqrtdk-serve share/sqrtdk/models/default.sqdk include/sqrtdk/sqrtdk.h \
         include/sqrtdk/version.h lib/libsqrtdk.a lib/libsqrtdk.so lib/cmake/sqrtdk/sqrtdkConfig.cmake \
         lib/pkgconfig/sqrtdk.pc; do
  [[ -e "$prefix/$f" ]] || fail "missing $f in the installed prefix"
done

# The programs, run from a copy of the prefix in a folder with no build tree: a moved prefix works too.
moved=$tmp/elsewhere/usr
mkdir -p "$(dirname "$moved")"
cp -a "$prefix" "$moved"
version=$(env -u SQRTDK_MODEL "$moved/bin/sqrtdk" --version) || fail "sqrtdk --version failed"
[[ "$version" == "sqrtdk "* && "$version" == *"$moved/share/sqrtdk/models/default.sqdk"* ]] ||
  fail "sqrtdk --version printed '$version' (expected the version and the installed default model)"
run_out=$(cd "$tmp" && env -u SQRTDK_MODEL "$moved/bin/sqrtdk" run --threads 1) ||
  fail "the installed 'sqrtdk run' (default model) failed"
[[ "$run_out" == *"$moved/share/sqrtdk/models/default.sqdk"* ]] ||
  fail "the installed 'sqrtdk run' did not use the installed model: $run_out"
"$moved/bin/sqrtdk-serve" --help >/dev/null || fail "the installed sqrtdk-serve --help failed"

cmake -S "$src/tests/install/cxx_consumer" -B "$tmp/cxx" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$tmp/cxx" >/dev/null
"$tmp/cxx/consumer" "$model"

export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
# shellcheck disable=SC2046
cc -std=c11 -Wall -Wextra -o "$tmp/c_consumer" "$src/tests/install/c_consumer/main.c" $(pkg-config --cflags --libs sqrtdk)
env -u LD_LIBRARY_PATH "$tmp/c_consumer" "$model" || fail "the C consumer did not run without LD_LIBRARY_PATH"
echo "install test: the programs and both consumers ran from $prefix (no LD_LIBRARY_PATH)"
