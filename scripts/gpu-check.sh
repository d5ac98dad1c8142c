#!/usr/bin/env bash
# One prepared run for a machine with an NVIDIA GPU, whose lent time is short: build what the CUDA
# path needs (-j all cores), run the CUDA and device-memory tests, compute-sanitizer memcheck over
# the CUDA launch tests, the GPU bench (kfuse_compare --device cuda) and, when PyTorch with CUDA
# imports, its side of the same workloads, shown side by side. Everything it prints also goes to
# $OUT (default ./gpu-check) for the record.
#
#   scripts/gpu-check.sh [--quick] [--no-compile] [--prebuilt DIR]
#     --quick        the bench's small sizes
#     --no-compile   PyTorch eager only (torch.compile takes minutes of the lent time)
#     --prebuilt DIR kfuse_tests, kfuse_compare and the libraries they need (libkfuse.so.0, and
#                    any the GPU machine lacks) built elsewhere, as scripts/gpu-prebuild.sh makes
#                    them: no build on the GPU machine, whose image need not carry kfuse's
#                    build dependencies
set -uo pipefail
cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.."
OUT=${OUT:-$PWD/gpu-check}
mkdir -p "$OUT"
quick=() torch_flags=() prebuilt=""
while (($#)); do
  case $1 in
    --quick) quick=(--quick) ;;
    --no-compile) torch_flags+=(--no-compile) ;;
    --prebuilt) prebuilt=$(readlink -f "$2"); shift ;;
    *) echo "gpu-check.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
exec > >(tee "$OUT/gpu-check.log") 2>&1
step() { printf '\n==> %s (%s)\n' "$*" "$(date +%T)"; }

step "machine"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 | head -3
lscpu | grep -E "Model name|^CPU\(s\)" | head -2

export KFUSE_CACHE_DIR="$OUT/cache"
if [[ -n $prebuilt ]]; then
  tests=$prebuilt/kfuse_tests compare=$prebuilt/kfuse_compare
  export LD_LIBRARY_PATH=$prebuilt${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  # NVRTC from the GPU machine's toolkit.
  for d in /usr/local/cuda/lib64 /usr/local/cuda/lib; do
    [[ -e $d/libnvrtc.so.13 ]] && { export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$d; break; }
  done
  ldd "$tests" | grep "not found"
else
  step "configure + build (tests, bench)"
  cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DKFUSE_BUILD_BENCH=ON -DKFUSE_BUILD_EXAMPLES=OFF >/dev/null &&
    cmake --build build-gpu -j"$(nproc)" --target kfuse_tests kfuse_compare >/dev/null || { echo "build failed"; exit 1; }
  tests=build-gpu/tests/kfuse_tests compare=build-gpu/bench/kfuse_compare
fi

step "CUDA tests"
timeout 240 "$tests" --gtest_filter='Cuda*:DeviceMemory.*:Gpu*:*/GpuDevice*' \
  --gtest_brief=1 2>&1 | tail -40

step "PyTorch side"
torch_json=()
if python3 -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  PYTHONUNBUFFERED=1 timeout 300 python3 bench/torch_gpu.py --device cuda "${quick[@]}" "${torch_flags[@]}" \
    --json "$OUT/torch.json" && torch_json=(--torch-json "$OUT/torch.json")
else
  echo "PyTorch with CUDA is not importable: kfuse only"
fi

step "GPU bench"
timeout 300 "$compare" --device cuda "${quick[@]}" --json "$OUT/kfuse.json" "${torch_json[@]}"
# The previous 4-byte GEMM tiling (64 x 64 tiles on 64 lanes), timed against the default on the
# same GPU: the default stays only while it is the faster (docs/gpu-backends.md, "Tiled GEMM").
step "GPU bench: GEMM rows under KFUSE_GPU_GEMM_TILE=64"
KFUSE_GPU_GEMM_TILE=64 timeout 120 "$compare" --device cuda "${quick[@]}" --filter 'matmul|x@W' \
  --json "$OUT/kfuse-tile64.json" "${torch_json[@]}"

# Last, since it is the slowest and times nothing.
step "compute-sanitizer memcheck (CUDA launch tests)"
san=/usr/local/cuda/bin/compute-sanitizer
if [[ -x $san ]]; then
  timeout "${SANITIZER_TIMEOUT:-180}" "$san" --tool memcheck --error-exitcode 9 "$tests" \
    --gtest_filter='CudaBackend.*:DeviceMemory.Cuda*' --gtest_brief=1 2>&1 | tail -8
else
  echo "no $san"
fi
step "done"
