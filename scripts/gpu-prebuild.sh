#!/usr/bin/env bash
# Builds, on this machine, what scripts/gpu-check.sh --prebuilt runs on a lent GPU machine whose
# image has the CUDA toolkit and PyTorch but not kfuse's build dependencies (LLVM 19, xxhash,
# GoogleTest): the CUDA and xbyak backends only (no LLVM, no OpenCL, so no libLLVM to carry), no
# CPU bench peers (LibTorch and the rest are not on that image) and no -march=native (another CPU),
# kfuse_tests and kfuse_compare, stripped, with libkfuse and libxxhash beside them.
#
#   scripts/gpu-prebuild.sh DIR        (then carry DIR and run scripts/gpu-check.sh --prebuilt DIR)
set -euo pipefail
cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.."
dir=${1:?usage: gpu-prebuild.sh DIR}
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DKFUSE_BUILD_BENCH=ON -DKFUSE_BUILD_EXAMPLES=OFF \
  -DKFUSE_WITH_LLVM=OFF -DKFUSE_WITH_OPENCL=OFF -DKFUSE_WITH_CUDA=ON "${launcher[@]}" \
  -DKFUSE_BENCH_NATIVE=OFF -DKFUSE_BENCH_PEERS=OFF >/dev/null
cmake --build build-gpu -j"$(nproc)" --target kfuse_tests kfuse_compare >/dev/null
mkdir -p "$dir"
cp -L build-gpu/tests/kfuse_tests build-gpu/bench/kfuse_compare build-gpu/lib/libkfuse.so.0 "$dir"/
cp -L "$(ldconfig -p | awk '/libxxhash.so.0 /{print $NF; exit}')" "$dir"/
strip "$dir"/kfuse_tests "$dir"/kfuse_compare "$dir"/libkfuse.so.0
du -sh "$dir"
