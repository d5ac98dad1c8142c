#!/usr/bin/env bash
# Install the Debian 12 packages kfuse needs to build and test. Idempotent and quick: it asks
# dpkg first and runs apt-get (update + install) only when something is missing.
#
#   scripts/setup.sh                 build + test dependencies
#   scripts/setup.sh --bench-peers   also the benchmark peers (libtorch, oneDNN, Eigen, OpenBLAS)
#
# Runs as root (CI) or through sudo when not root. Set KFUSE_SKIP_SETUP=1 to skip it entirely.
set -euo pipefail

packages=(
  cmake g++ make
  llvm-19-dev libzstd-dev          # LLVM ORC backend (libzstd-dev: LLVM's CMake config wants it)
  libxbyak-dev libsleef-dev        # x86 backend, vector math
  pocl-opencl-icd ocl-icd-opencl-dev opencl-headers clinfo   # OpenCL backend on the CPU
  libxxhash-dev nlohmann-json3-dev libcli11-dev              # core, cache tool
  libgtest-dev libgmock-dev catch2 libxml2-utils librsvg2-bin   # tests (xmllint, rsvg-convert: the profiler's SVG)
  clang-format-14                                            # the format test (scripts/check-format.sh)
)
bench_peers=(libtorch-dev libdnnl-dev libeigen3-dev libopenblas-dev)

for arg in "$@"; do
  case "$arg" in
    --bench-peers) packages+=("${bench_peers[@]}") ;;
    -h|--help) sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "setup.sh: unknown option '$arg' (try --help)" >&2; exit 2 ;;
  esac
done

if [[ "${KFUSE_SKIP_SETUP:-0}" == 1 ]]; then
  exit 0
fi

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$p")
done

if ((${#missing[@]} == 0)); then
  echo "setup: all ${#packages[@]} packages present"
  exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
  echo "setup: missing packages (${missing[*]}) and no apt-get: install them by hand" >&2
  exit 1
fi

sudo_cmd=()
if [[ "$(id -u)" != 0 ]]; then
  if command -v sudo >/dev/null 2>&1; then
    sudo_cmd=(sudo)
  else
    echo "setup: not root and no sudo; as root run: apt-get install ${missing[*]}" >&2
    exit 1
  fi
fi

echo "setup: installing ${missing[*]}"
"${sudo_cmd[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
"${sudo_cmd[@]}" env DEBIAN_FRONTEND=noninteractive \
  apt-get install -y -q --no-install-recommends "${missing[@]}"
