# LLVM 19 ORC JIT CPU backend (jit/llvm). Included by jit/CMakeLists.txt when KFUSE_WITH_LLVM is ON.
# "find_package(LLVM 19 ...)" fails (LLVMConfigVersion wants major.minor): ask for 19.1.
find_package(LLVM 19.1 CONFIG REQUIRED HINTS /usr/lib/llvm-19/lib/cmake/llvm)
separate_arguments(KFUSE_LLVM_DEFS NATIVE_COMMAND ${LLVM_DEFINITIONS})
target_sources(kfuse PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/llvm_backend.cpp
  ${CMAKE_CURRENT_LIST_DIR}/jit_session.cpp
  ${CMAKE_CURRENT_LIST_DIR}/lower_kernel.cpp
  ${CMAKE_CURRENT_LIST_DIR}/column_tiles.cpp
  ${CMAKE_CURRENT_LIST_DIR}/lower_expr.cpp
  ${CMAKE_CURRENT_LIST_DIR}/lower_random.cpp
  ${CMAKE_CURRENT_LIST_DIR}/vector_math.cpp
  ${CMAKE_CURRENT_LIST_DIR}/optimize.cpp)
target_include_directories(kfuse SYSTEM PRIVATE ${LLVM_INCLUDE_DIRS})
target_compile_definitions(kfuse PRIVATE ${KFUSE_LLVM_DEFS} KFUSE_HAVE_LLVM
                           KFUSE_LLVM_VERSION_STRING="${LLVM_PACKAGE_VERSION}")
# The shared libLLVM.so.19.1 (Debian builds LLVM_LINK_LLVM_DYLIB=ON): 0.5 s link instead of 1.5 s.
target_link_libraries(kfuse PRIVATE LLVM)
