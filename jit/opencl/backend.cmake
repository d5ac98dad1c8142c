# OpenCL backend: the shared GPU renderer plus the OpenCL 1.2 host code, through the ICD loader.
find_package(OpenCL REQUIRED)
include(${CMAKE_CURRENT_LIST_DIR}/../gpu/gpu.cmake)
target_sources(kfuse PRIVATE ${CMAKE_CURRENT_LIST_DIR}/opencl_backend.cpp)
target_link_libraries(kfuse PRIVATE OpenCL::OpenCL)
target_compile_definitions(kfuse PRIVATE KFUSE_HAVE_OPENCL CL_TARGET_OPENCL_VERSION=120
                           INTERFACE $<BUILD_INTERFACE:KFUSE_HAVE_OPENCL>)
