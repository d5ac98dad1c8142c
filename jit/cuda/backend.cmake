# CUDA backend: the shared GPU renderer, NVRTC (linked) and the driver API through dlopen.
# libcuda is NEVER linked (no CUDA::cuda_driver, no -lcuda): the library must load without a GPU.
find_package(CUDAToolkit REQUIRED)
include(${CMAKE_CURRENT_LIST_DIR}/../gpu/gpu.cmake)
kfuse_stage(jit/cuda ${CMAKE_CURRENT_LIST_DIR}/cuda_backend.cpp ${CMAKE_CURRENT_LIST_DIR}/cuda_driver.cpp
            ${CMAKE_CURRENT_LIST_DIR}/cuda_memory.cpp)
# Driver API types come from cuda.h; only this target sees the toolkit's headers.
target_include_directories(kfuse_jit_cuda SYSTEM PRIVATE ${CUDAToolkit_INCLUDE_DIRS})
target_link_libraries(kfuse_jit_cuda PRIVATE kfuse_jit_gpu)
# Link libnvrtc by file, not through the CUDA::nvrtc target: CMake 3.25's target drags in the
# driver stub (stubs/libcuda.so), which some link modes (e.g. sanitizer builds) then record as
# NEEDED libcuda.so.1, and the library would not start on machines without a driver.
if(CUDA_nvrtc_LIBRARY)
  target_link_libraries(kfuse_jit_cuda PRIVATE ${CUDA_nvrtc_LIBRARY} ${CMAKE_DL_LIBS})
else()
  target_link_libraries(kfuse_jit_cuda PRIVATE CUDA::nvrtc ${CMAKE_DL_LIBS})
endif()
# libnvrtc dlopens libnvrtc-builtins itself and has no RUNPATH (TOOLCHAIN section 4): the backend
# preloads it from libnvrtc's own directory, falling back to this one.
target_compile_definitions(kfuse_jit_cuda PRIVATE "KFUSE_CUDA_LIBDIR=\"${CUDAToolkit_LIBRARY_DIR}\"")
kfuse_backend_enabled(CUDA)
