# LLVM 19 ORC JIT CPU backend (jit/llvm). Included by jit/CMakeLists.txt when KFUSE_WITH_LLVM is ON.
# LLVM's include directories and definitions are on this target only: no other source of the
# library sees them.
# "find_package(LLVM 19 ...)" fails (LLVMConfigVersion wants major.minor): ask for 19.1.
find_package(LLVM 19.1 CONFIG REQUIRED HINTS /usr/lib/llvm-19/lib/cmake/llvm)
separate_arguments(KFUSE_LLVM_DEFS NATIVE_COMMAND ${LLVM_DEFINITIONS})
kfuse_stage(jit/llvm
  ${CMAKE_CURRENT_LIST_DIR}/llvm_backend.cpp
  ${CMAKE_CURRENT_LIST_DIR}/jit_session.cpp
  ${CMAKE_CURRENT_LIST_DIR}/lower_kernel.cpp
  ${CMAKE_CURRENT_LIST_DIR}/lower_tiles.cpp
  ${CMAKE_CURRENT_LIST_DIR}/lower_rows.cpp
  ${CMAKE_CURRENT_LIST_DIR}/column_tiles.cpp
  ${CMAKE_CURRENT_LIST_DIR}/transpose_tiles.cpp
  ${CMAKE_CURRENT_LIST_DIR}/row_pieces.cpp
  ${CMAKE_CURRENT_LIST_DIR}/prefetch_rows.cpp
  ${CMAKE_CURRENT_LIST_DIR}/lower_expr.cpp
  ${CMAKE_CURRENT_LIST_DIR}/lower_random.cpp
  ${CMAKE_CURRENT_LIST_DIR}/vector_math.cpp
  ${CMAKE_CURRENT_LIST_DIR}/optimize.cpp)
target_include_directories(kfuse_jit_llvm SYSTEM PRIVATE ${LLVM_INCLUDE_DIRS})
target_compile_definitions(kfuse_jit_llvm PRIVATE ${KFUSE_LLVM_DEFS}
                           KFUSE_LLVM_VERSION_STRING="${LLVM_PACKAGE_VERSION}")
# The shared libLLVM.so.19.1 (Debian builds LLVM_LINK_LLVM_DYLIB=ON): 0.5 s link instead of 1.5 s.
target_link_libraries(kfuse_jit_llvm PRIVATE LLVM)
kfuse_backend_enabled(LLVM)
