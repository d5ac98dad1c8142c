#!/usr/bin/env bash
# ctest test "plugin.out_of_tree": installs the already-built kfuse from build dir $1 into a
# temporary prefix, builds each examples/plugins/* project against it (find_package(kfuse)), then
# runs kfuse_tests ($2) OutOfTreePlugins.* with KFUSE_PLUGINS naming the freshly built modules.
#   run_plugin_build_test.sh <kfuse build dir> <kfuse_tests> [extra cmake args...]
set -euo pipefail
build_dir=$(readlink -f "$1"); shift
tests_bin=$(readlink -f "$1"); shift
src_root=$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../..
work=$(mktemp -d "$build_dir/plugin-test.XXXXXX")
trap 'rm -rf "$work"' EXIT

cmake --install "$build_dir" --prefix "$work/prefix" >"$work/install.log" || { cat "$work/install.log"; exit 1; }
test -f "$work/prefix/include/kfuse/pattern.hpp"
plugins=()
for dir in "$src_root"/examples/plugins/*/; do
  name=$(basename "$dir")
  cmake -S "$dir" -B "$work/$name" -DCMAKE_PREFIX_PATH="$work/prefix" -DCMAKE_BUILD_TYPE=Release "$@" >"$work/$name.log" ||
    { cat "$work/$name.log"; exit 1; }
  cmake --build "$work/$name" >>"$work/$name.log" || { cat "$work/$name.log"; exit 1; }
  plugins+=("$work/$name/kfuse_$name.so")
done
KFUSE_PLUGINS=$(IFS=:; echo "${plugins[*]}") KFUSE_PLUGIN_OUT_OF_TREE=1 \
  "$tests_bin" --gtest_filter='OutOfTreePlugins.*'
