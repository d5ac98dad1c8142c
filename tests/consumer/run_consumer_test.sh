#!/usr/bin/env bash
# ctest test "consumer.find_package": installs the already-built kfuse from build dir $1 into a
# temporary prefix (no rebuild), then configures, builds and runs tests/consumer against it.
#   run_consumer_test.sh <kfuse build dir> [extra cmake args for the consumer...]
set -euo pipefail
build_dir=$(readlink -f "$1"); shift
src_dir=$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")
work=$(mktemp -d "$build_dir/consumer-test.XXXXXX")
trap 'rm -rf "$work"' EXIT

cmake --install "$build_dir" --prefix "$work/prefix" >"$work/install.log" || { cat "$work/install.log"; exit 1; }
test -f "$work/prefix/include/kfuse/kfuse.hpp"
config=$(find "$work/prefix" -name kfuseConfig.cmake | head -1)
test -n "$config" || { echo "no kfuseConfig.cmake installed"; exit 1; }

# Nothing from the source or build tree may leak into the consumer: only the prefix is searched.
cmake -S "$src_dir" -B "$work/build" -DCMAKE_PREFIX_PATH="$work/prefix" -DCMAKE_BUILD_TYPE=Release "$@"
cmake --build "$work/build"
"$work/build/kfuse_consumer"
