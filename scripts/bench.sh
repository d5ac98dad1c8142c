#!/usr/bin/env bash
# Builds the benchmarks in build-bench (Release) and runs kfuse_compare.
#
#   scripts/bench.sh [--install-peers] [--no-build] [--micro] [--jobs N] [--] [kfuse_compare args]
#
#   --install-peers  install LibTorch, oneDNN and Eigen first (scripts/setup.sh --bench-peers when
#                    present, else apt-get: libtorch-dev libdnnl-dev libeigen3-dev)
#   --no-build       run what is already built
#   --micro          run the Catch2 micro-benchmarks (kfuse_micro) instead of kfuse_compare
#   --jobs N         parallel build jobs (default 2)
# Everything else goes to kfuse_compare, e.g.
#   scripts/bench.sh --json bench.json                 # full run, 1 and 2 threads
#   scripts/bench.sh --quick --filter log_softmax      # smoke run
#   scripts/bench.sh --filter "[4096,10]" --backends xbyak,reference --threads 1
# Run on an otherwise idle machine: every number is compared with a roofline ceiling measured in the
# same run, but other processes on the cores still distort medians (spread column).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${KFUSE_BENCH_BUILD_DIR:-$ROOT/build-bench}"
install_peers=0
build=1
micro=0
jobs=2
args=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --install-peers) install_peers=1 ;;
    --no-build) build=0 ;;
    --micro) micro=1 ;;
    --jobs) jobs="$2"; shift ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    --) shift; args+=("$@"); break ;;
    *) args+=("$1") ;;
  esac
  shift
done

if [[ $install_peers == 1 ]]; then
  if [[ -x "$ROOT/scripts/setup.sh" ]]; then
    "$ROOT/scripts/setup.sh" --bench-peers
  else
    SUDO=""
    [[ $(id -u) != 0 ]] && SUDO="sudo"
    $SUDO apt-get update
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends \
      libtorch-dev libdnnl-dev libeigen3-dev
  fi
fi

if [[ $build == 1 ]]; then
  cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DKFUSE_BUILD_BENCH=ON \
    -DKFUSE_BUILD_TESTS=OFF -DKFUSE_BUILD_EXAMPLES=OFF >/dev/null
  targets=(kfuse_compare)
  [[ $micro == 1 ]] && targets=(kfuse_micro)
  cmake --build "$BUILD" -j"$jobs" --target "${targets[@]}"
fi

if [[ $micro == 1 ]]; then
  exec "$BUILD/bench/kfuse_micro" "[!benchmark]" "${args[@]+"${args[@]}"}"
fi
exec "$BUILD/bench/kfuse_compare" "${args[@]+"${args[@]}"}"
