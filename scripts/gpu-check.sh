#!/usr/bin/env bash
# One prepared run for a machine with an NVIDIA GPU, whose lent time is short: build what the CUDA
# path needs (-j all cores), run the CUDA and device-memory tests, compute-sanitizer memcheck over
# the CUDA launch tests, the GPU bench (kfuse_compare --device cuda) and, when PyTorch with CUDA
# imports, its side of the same workloads, shown side by side. Everything it prints also goes to
# $OUT (default ./gpu-check) for the record.
#
#   scripts/gpu-check.sh [--quick]      (--quick: the bench's small sizes)
set -uo pipefail
cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.."
OUT=${OUT:-$PWD/gpu-check}
mkdir -p "$OUT"
quick=()
[[ ${1:-} == --quick ]] && quick=(--quick)
exec > >(tee "$OUT/gpu-check.log") 2>&1
step() { printf '\n==> %s (%s)\n' "$*" "$(date +%T)"; }

step "machine"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 | head -3
lscpu | grep -E "Model name|^CPU\(s\)" | head -2

step "configure + build (tests, bench)"
export KFUSE_CACHE_DIR="$OUT/cache"
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DKFUSE_BUILD_BENCH=ON -DKFUSE_BUILD_EXAMPLES=OFF >/dev/null &&
  cmake --build build-gpu -j"$(nproc)" --target kfuse_tests kfuse_compare >/dev/null || { echo "build failed"; exit 1; }

step "CUDA tests"
build-gpu/tests/kfuse_tests --gtest_filter='Cuda*:DeviceMemory.*:GpuRender*:GpuVector*:GpuRowSplit*:GpuGemm*' \
  --gtest_brief=1 2>&1 | tail -25

step "compute-sanitizer memcheck (CUDA launch tests)"
san=/usr/local/cuda/bin/compute-sanitizer
if [[ -x $san ]]; then
  "$san" --tool memcheck --error-exitcode 9 build-gpu/tests/kfuse_tests --gtest_filter='CudaBackend.*:DeviceMemory.Cuda*' \
    --gtest_brief=1 2>&1 | tail -8
else
  echo "no $san"
fi

step "PyTorch side (eager, torch.compile)"
torch_json=()
if python3 -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  timeout 300 python3 bench/torch_gpu.py --device cuda "${quick[@]}" --json "$OUT/torch.json" && torch_json=(--torch-json "$OUT/torch.json")
else
  echo "PyTorch with CUDA is not importable: kfuse only"
fi

step "GPU bench"
timeout 300 build-gpu/bench/kfuse_compare --device cuda "${quick[@]}" --json "$OUT/kfuse.json" "${torch_json[@]}"
step "done"
