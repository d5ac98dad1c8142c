# xbyak x86-64 machine-code backend (header-only toolchain). Included by jit/CMakeLists.txt when
# KFUSE_WITH_XBYAK is on.
find_package(xbyak CONFIG REQUIRED)
kfuse_stage(jit/xbyak
  ${CMAKE_CURRENT_LIST_DIR}/accumulators.cpp
  ${CMAKE_CURRENT_LIST_DIR}/loop_invariants.cpp
  ${CMAKE_CURRENT_LIST_DIR}/analyze.cpp
  ${CMAKE_CURRENT_LIST_DIR}/emitter.cpp
  ${CMAKE_CURRENT_LIST_DIR}/rows.cpp
  ${CMAKE_CURRENT_LIST_DIR}/eval.cpp
  ${CMAKE_CURRENT_LIST_DIR}/interleave.cpp
  ${CMAKE_CURRENT_LIST_DIR}/index_eval.cpp
  ${CMAKE_CURRENT_LIST_DIR}/index_masks.cpp
  ${CMAKE_CURRENT_LIST_DIR}/exec_memory.cpp
  ${CMAKE_CURRENT_LIST_DIR}/lanes.cpp
  ${CMAKE_CURRENT_LIST_DIR}/narrow.cpp
  ${CMAKE_CURRENT_LIST_DIR}/online.cpp
  ${CMAKE_CURRENT_LIST_DIR}/random.cpp
  ${CMAKE_CURRENT_LIST_DIR}/segment_plan.cpp
  ${CMAKE_CURRENT_LIST_DIR}/segment.cpp
  ${CMAKE_CURRENT_LIST_DIR}/segment_leaves.cpp
  ${CMAKE_CURRENT_LIST_DIR}/gemm_plan.cpp
  ${CMAKE_CURRENT_LIST_DIR}/gemm_kernel.cpp
  ${CMAKE_CURRENT_LIST_DIR}/gemm_policy.cpp
  ${CMAKE_CURRENT_LIST_DIR}/gemm_run.cpp
  ${CMAKE_CURRENT_LIST_DIR}/gemm_swapped.cpp
  ${CMAKE_CURRENT_LIST_DIR}/gemm_dot_rows.cpp
  ${CMAKE_CURRENT_LIST_DIR}/gemm_dot_cols.cpp
  ${CMAKE_CURRENT_LIST_DIR}/gemv.cpp
  ${CMAKE_CURRENT_LIST_DIR}/backend.cpp)
target_link_libraries(kfuse_jit_xbyak PRIVATE xbyak::xbyak)
kfuse_backend_enabled(XBYAK)
