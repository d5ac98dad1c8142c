/** \file stats.hpp
 * Process-wide counters of the runtime and the kernel cache (readable from the API, reset for
 * tests and benchmarks).
 */
#pragma once
#include <cstdint>

namespace kfuse {

struct Counters {
  uint64_t evaluations = 0;       ///< eval() calls that computed something
  uint64_t kernels_launched = 0;  ///< kernel runs (one per fused group per evaluation)
  uint64_t kernels_compiled = 0;  ///< code-generator invocations that succeeded
  uint64_t cache_hits = 0;        ///< memory-cache hits
  uint64_t cache_misses = 0;
  uint64_t disk_loads = 0;  ///< kernels loaded from the disk cache
  uint64_t fallbacks = 0;   ///< kernels a backend declined or failed, taken by the next one
  uint64_t outputs_in_place =
      0;                  ///< kernel outputs written over the memory of an intermediate read last by that kernel
  double compile_ms = 0;  ///< total time spent compiling
};

Counters counters();
void reset_counters();

}  // namespace kfuse
