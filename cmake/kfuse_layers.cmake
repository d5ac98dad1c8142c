# The pipeline stages of libkfuse and which stages each may use: ONE table, read by
# lib/CMakeLists.txt (one OBJECT library per stage, linked to the stages it may use) and by
# cmake/check_layering.cmake (the `layering` test: every #include "..." in lib/ and jit/ must go
# to the file's own stage, to a stage listed here, or to include/kfuse).
#
# KFUSE_STAGE_<dir>: the stages (directories) that files of <dir> may include, lower stages only.
# Backends (jit/*) see only the kernel IR and the backend contract (lib/backend: the Backend
# interface, the CPU thread pool); the LLVM flags live on the LLVM backend's target alone.
set(KFUSE_STAGES
  lib/core lib/ir lib/graph lib/eval lib/passes lib/plugin lib/fusion lib/backend lib/cache
  lib/prof lib/runtime lib/api
  jit/gpu jit/xbyak jit/llvm jit/opencl jit/cuda)
set(KFUSE_STAGE_lib/core)                      # dtype, shape, device, options, log
set(KFUSE_STAGE_lib/ir lib/core)               # kernel IR and its analyses
set(KFUSE_STAGE_lib/graph lib/core)            # hash-consed nodes
set(KFUSE_STAGE_lib/eval lib/core lib/graph lib/ir)  # fp64 reference evaluation
set(KFUSE_STAGE_lib/passes lib/core lib/graph lib/eval)
set(KFUSE_STAGE_lib/plugin lib/core)           # the plugin loader (dlopen, ABI handshake)
set(KFUSE_STAGE_lib/fusion lib/core lib/graph lib/ir lib/eval lib/plugin)  # patterns + partition + lowering
set(KFUSE_STAGE_lib/backend lib/core lib/ir lib/eval)  # the contract, registry, reference backend, thread pool
set(KFUSE_STAGE_lib/cache lib/core lib/ir lib/backend)
set(KFUSE_STAGE_lib/prof lib/core)                 # machine model, profiler records and writers
set(KFUSE_STAGE_lib/runtime lib/core lib/graph lib/ir lib/eval lib/passes lib/plugin lib/fusion lib/backend lib/cache lib/prof)
set(KFUSE_STAGE_lib/api lib/core lib/graph lib/ir lib/eval lib/passes lib/fusion lib/backend lib/runtime)
set(KFUSE_STAGE_jit/gpu lib/core lib/ir)
set(KFUSE_STAGE_jit/xbyak lib/core lib/ir lib/backend)
set(KFUSE_STAGE_jit/llvm lib/core lib/ir lib/backend)
set(KFUSE_STAGE_jit/opencl lib/core lib/ir lib/backend jit/gpu)
set(KFUSE_STAGE_jit/cuda lib/core lib/ir lib/backend jit/gpu)

# Wrong-way includes that remain, each with why; the layering test accepts exactly these
# (file -> included stage). Remove an entry when its edge is gone; never add one for new code.
set(KFUSE_LAYERING_ALLOWED
  # storage_values() copies device memory to the host through the device's backend
  # (memory_backend); the copy should be done by the runtime before the reference evaluator runs.
  "lib/eval/reference_eval.cpp -> lib/backend"
)
