# kfuse_cache_bench: memory-hit overhead, disk-load time and first eval of a new process
# (bench/cache_bench.cpp; README "Kernel cache").
add_executable(kfuse_cache_bench ${CMAKE_CURRENT_LIST_DIR}/cache_bench.cpp)
target_include_directories(kfuse_cache_bench PRIVATE ${PROJECT_SOURCE_DIR}/lib)
target_link_libraries(kfuse_cache_bench PRIVATE kfuse)
target_compile_options(kfuse_cache_bench PRIVATE -O2)
kfuse_warnings(kfuse_cache_bench)
