# xbyak x86-64 machine-code backend (header-only toolchain). Included by jit/CMakeLists.txt when
# KFUSE_WITH_XBYAK is on.
find_package(xbyak CONFIG REQUIRED)
target_sources(kfuse PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/accumulators.cpp
  ${CMAKE_CURRENT_LIST_DIR}/loop_invariants.cpp
  ${CMAKE_CURRENT_LIST_DIR}/analyze.cpp
  ${CMAKE_CURRENT_LIST_DIR}/emitter.cpp
  ${CMAKE_CURRENT_LIST_DIR}/eval.cpp
  ${CMAKE_CURRENT_LIST_DIR}/exec_memory.cpp
  ${CMAKE_CURRENT_LIST_DIR}/lanes.cpp
  ${CMAKE_CURRENT_LIST_DIR}/online.cpp
  ${CMAKE_CURRENT_LIST_DIR}/gemm_plan.cpp
  ${CMAKE_CURRENT_LIST_DIR}/gemm_kernel.cpp
  ${CMAKE_CURRENT_LIST_DIR}/gemm_run.cpp
  ${CMAKE_CURRENT_LIST_DIR}/backend.cpp)
target_link_libraries(kfuse PRIVATE xbyak::xbyak)
# KFUSE_HAVE_XBYAK: for the library (registry) and, in the build tree only, for the tests.
target_compile_definitions(kfuse PRIVATE KFUSE_HAVE_XBYAK INTERFACE $<BUILD_INTERFACE:KFUSE_HAVE_XBYAK>)
