# OpenCL backend: the shared GPU renderer plus the OpenCL 1.2 host code, through the ICD loader.
find_package(OpenCL REQUIRED)
include(${CMAKE_CURRENT_LIST_DIR}/../gpu/gpu.cmake)
kfuse_stage(jit/opencl ${CMAKE_CURRENT_LIST_DIR}/opencl_backend.cpp)
target_link_libraries(kfuse_jit_opencl PRIVATE OpenCL::OpenCL kfuse_jit_gpu)
target_compile_definitions(kfuse_jit_opencl PRIVATE CL_TARGET_OPENCL_VERSION=120)
kfuse_backend_enabled(OPENCL)
