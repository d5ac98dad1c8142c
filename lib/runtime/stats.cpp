#include "kfuse/stats.hpp"

#include "stats_impl.hpp"

namespace kfuse {

namespace detail {
AtomicCounters& global_counters() {
  static AtomicCounters c;
  return c;
}
}  // namespace detail

Counters counters() {
  auto& c = detail::global_counters();
  Counters out;
  out.evaluations = c.evaluations.load();
  out.kernels_launched = c.kernels_launched.load();
  out.kernels_compiled = c.kernels_compiled.load();
  out.cache_hits = c.cache_hits.load();
  out.cache_misses = c.cache_misses.load();
  out.disk_loads = c.disk_loads.load();
  out.fallbacks = c.fallbacks.load();
  out.outputs_in_place = c.outputs_in_place.load();
  out.compile_ms = static_cast<double>(c.compile_ns.load()) / 1e6;
  return out;
}

void reset_counters() {
  auto& c = detail::global_counters();
  c.evaluations = 0;
  c.kernels_launched = 0;
  c.kernels_compiled = 0;
  c.cache_hits = 0;
  c.cache_misses = 0;
  c.disk_loads = 0;
  c.fallbacks = 0;
  c.outputs_in_place = 0;
  c.compile_ns = 0;
}

}  // namespace kfuse
