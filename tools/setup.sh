#!/usr/bin/env bash
# Installs the Debian 12 packages sqrtdk needs to build, test and benchmark: only the missing ones.
# Idempotent: when everything is present it prints one line and changes nothing.
#   ./tools/setup.sh           # build + test + benchmark dependencies
#   SQRTDK_SETUP_EXTRA="python3-torch" ./tools/setup.sh   # plus anything else (e.g. for tools/make_golden.py)
set -euo pipefail

packages=(
  cmake ninja-build g++ pkg-config      # toolchain
  libdnnl-dev                           # oneDNN 2.6: GEMM/softmax peer and cross-check
  ocl-icd-opencl-dev                    # OpenCL headers+lib: dnnl-config.cmake calls find_package(OpenCL); libdnnl-dev only recommends it
  libxsimd-dev                          # xsimd 8.1: SIMD kernels written once per Arch
  doctest-dev                           # tests
  libopenblas-dev                       # OpenBLAS: benchmark peer
  libcli11-dev nlohmann-json3-dev       # command line, JSON (benchmarks --json, safetensors headers)
  libboost-dev                          # Boost.Beast/Asio 1.74 (header-only): sqrtdk-serve's HTTP server
  libcpp-httplib-dev                    # the sqrtdk-serve tests' HTTP client
  haproxy                               # HAProxy 2.6: the balancer of tools/serve/replicas/ (and its test)
  clang libomp-14-dev libclang-rt-14-dev  # clang builds, sanitizers and libFuzzer
  python3-numpy                         # tools/sqdk.py (the Python writer; its byte-identity test)
  libpcre2-dev                          # PCRE2 10.42: the tokenizers' pre-tokenizer regexes (\p{L}, JIT)
  libicu-dev                            # ICU 72: NFC (Qwen) and the Unicode classes of added-token matching
  libsentencepiece-dev                  # libsentencepiece: reading SentencePiece tokenizer.model files
  nodejs                                # the sqrtdk-serve test that drives it with the OpenAI Node SDK (tests/clients)
)
# shellcheck disable=SC2206
packages+=(${SQRTDK_SETUP_EXTRA:-})
# npm (for the same test): Debian's only when there is no npm command. Nodesource's nodejs bundles its own npm and
# conflicts with Debian's npm package, so installing Debian's beside it would fail.
command -v npm >/dev/null 2>&1 || packages+=(npm)

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$p")
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "setup: all ${#packages[@]} packages present"
  exit 0
fi

echo "setup: installing ${missing[*]}"
if [[ $(id -u) -ne 0 ]]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    SUDO=sudo
  else
    echo "setup: not root. Run as root (or with sudo):" >&2
    echo "  apt-get update && apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
else
  SUDO=
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "setup: done"
