# CUDA backend: the shared GPU renderer, NVRTC (linked) and the driver API through dlopen.
# libcuda is NEVER linked (no CUDA::cuda_driver, no -lcuda): the library must load without a GPU.
find_package(CUDAToolkit REQUIRED)
include(${CMAKE_CURRENT_LIST_DIR}/../gpu/gpu.cmake)
set(_kfuse_cuda_sources ${CMAKE_CURRENT_LIST_DIR}/cuda_backend.cpp ${CMAKE_CURRENT_LIST_DIR}/cuda_driver.cpp)
target_sources(kfuse PRIVATE ${_kfuse_cuda_sources})
# Driver API types come from cuda.h; only these files see the toolkit's headers.
set_source_files_properties(${_kfuse_cuda_sources} TARGET_DIRECTORY kfuse
                            PROPERTIES INCLUDE_DIRECTORIES "${CUDAToolkit_INCLUDE_DIRS}")
target_link_libraries(kfuse PRIVATE CUDA::nvrtc ${CMAKE_DL_LIBS})
# libnvrtc dlopens libnvrtc-builtins itself and has no RUNPATH (TOOLCHAIN section 4): the backend
# preloads it from libnvrtc's own directory, falling back to this one.
target_compile_definitions(kfuse PRIVATE KFUSE_HAVE_CUDA "KFUSE_CUDA_LIBDIR=\"${CUDAToolkit_LIBRARY_DIR}\""
                           INTERFACE $<BUILD_INTERFACE:KFUSE_HAVE_CUDA>)
