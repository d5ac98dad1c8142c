# The `options-boundary` test: cmake -DROOT=<source dir> -P cmake/check_options_reads.cmake
# The process-wide options (kfuse::options()) are read where an evaluation, plan, compile or tool
# starts, and passed down from there (docs/runtime-state.md). This fails when a file of lib/
# or jit/ outside the list below calls options(), and when a listed file no longer does (so the
# list only shrinks).
cmake_minimum_required(VERSION 3.25)

set(_allowed
    lib/core/options.cpp          # the definition; log() and log_enabled(): log channels are process-wide
    lib/runtime/execute.cpp       # evaluation entry (Tensor::eval, transfers)
    lib/runtime/explain.cpp       # explain() / to_dot() entry
    lib/runtime/cache_api.cpp     # public cache inspection API (kfuse/cache.hpp)
    lib/cache/cache_tool.cpp      # the kfuse-cache tool
    lib/prof/machine.cpp          # profiler entry points (kfuse/profile.hpp): machine model file
    lib/prof/recorder.cpp         # profiler entry points: Profiler start
    lib/backend/thread_pool.cpp   # process-wide: the CPU pool's thread count
    lib/graph/host_pool.cpp       # process-wide: the freed host buffers' bound
    lib/plugin/plugin_loader.cpp  # process-wide: KFUSE_PLUGINS, loaded once per process
)

file(GLOB_RECURSE _files RELATIVE ${ROOT} ${ROOT}/lib/*.cpp ${ROOT}/lib/*.hpp ${ROOT}/lib/*.h ${ROOT}/jit/*.cpp
     ${ROOT}/jit/*.hpp ${ROOT}/jit/*.h)
set(_errors "")
set(_seen "")
foreach(_f IN LISTS _files)
  # A call of options() itself (not set_options(), default_options() or a member named so).
  file(STRINGS ${ROOT}/${_f} _hits REGEX "(^|[^A-Za-z0-9_.>])options[ \t]*\\([ \t]*\\)")
  if(NOT _hits)
    continue()
  endif()
  if(_f IN_LIST _allowed)
    list(APPEND _seen ${_f})
    continue()
  endif()
  list(GET _hits 0 _first)
  string(STRIP "${_first}" _first)
  string(APPEND _errors "  ${_f}: reads options() below the API boundary (${_first}); take the options "
         "as a parameter from the caller, or add the file to cmake/check_options_reads.cmake with why\n")
endforeach()
foreach(_a IN LISTS _allowed)
  if(NOT _a IN_LIST _seen)
    string(APPEND _errors "  ${_a}: listed as allowed but reads no options(); drop it from the list\n")
  endif()
endforeach()
if(_errors)
  message(FATAL_ERROR "options() read below the API boundary:\n${_errors}")
endif()
list(LENGTH _files _n)
message(STATUS "options-boundary: ${_n} files checked")
