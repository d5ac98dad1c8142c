// The atomic counters behind kfuse::counters(); relaxed increments on hot paths.
#pragma once
#include <atomic>
#include <cstdint>

namespace kfuse::detail {

struct AtomicCounters {
  std::atomic<uint64_t> evaluations{0}, kernels_launched{0}, kernels_compiled{0}, cache_hits{0}, cache_misses{0},
      disk_loads{0}, fallbacks{0}, outputs_in_place{0}, compile_ns{0};
};
AtomicCounters& global_counters();

inline void bump(std::atomic<uint64_t>& c, uint64_t n = 1) { c.fetch_add(n, std::memory_order_relaxed); }

}  // namespace kfuse::detail
