# The shared C-like GPU renderer (jit/gpu) and the kernel skeletons (templates/), embedded into
# the library at build time. Included by jit/opencl/backend.cmake and jit/cuda/backend.cmake.
include_guard(GLOBAL)
file(GLOB KFUSE_GPU_TEMPLATES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/templates/*/*.tmpl)
set(KFUSE_GPU_TEMPLATES_CPP ${CMAKE_CURRENT_BINARY_DIR}/gpu_templates_gen.cpp)
string(REPLACE ";" "|" _kfuse_tmpl_arg "${KFUSE_GPU_TEMPLATES}")
add_custom_command(
  OUTPUT ${KFUSE_GPU_TEMPLATES_CPP}
  COMMAND ${CMAKE_COMMAND} -DOUT=${KFUSE_GPU_TEMPLATES_CPP} -DROOT=${PROJECT_SOURCE_DIR}/templates
          -DFILES=${_kfuse_tmpl_arg} -P ${CMAKE_CURRENT_LIST_DIR}/embed_templates.cmake
  DEPENDS ${KFUSE_GPU_TEMPLATES} ${CMAKE_CURRENT_LIST_DIR}/embed_templates.cmake
  COMMENT "Embedding GPU kernel templates"
  VERBATIM)
add_custom_target(kfuse_gpu_templates DEPENDS ${KFUSE_GPU_TEMPLATES_CPP})
kfuse_stage(jit/gpu ${CMAKE_CURRENT_LIST_DIR}/gpu_render.cpp ${CMAKE_CURRENT_LIST_DIR}/gemm_render.cpp
            ${CMAKE_CURRENT_LIST_DIR}/gpu_plan.cpp
            ${CMAKE_CURRENT_LIST_DIR}/dialects.cpp
            ${CMAKE_CURRENT_LIST_DIR}/block_cache.cpp
            ${CMAKE_CURRENT_LIST_DIR}/staging.cpp
            ${KFUSE_GPU_TEMPLATES_CPP})
add_dependencies(kfuse_jit_gpu kfuse_gpu_templates)
