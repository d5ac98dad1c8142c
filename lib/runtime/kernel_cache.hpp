// The kernel cache used by the planner: memory (single flight, LRU) -> disk (atomic,
// checksummed, shared between processes) -> compile, per backend of the device's chain.
// Keys, layout, shape policy and trust model: lib/cache/*.hpp and README "Kernel cache".
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "kfuse/cache.hpp"
#include "kfuse/device.hpp"
#include "kfuse/options.hpp"

namespace kfuse::detail {

struct FusionGroup;
struct LoweredKernel;

struct CompiledRef {
  std::shared_ptr<CompiledKernel> kernel;
  std::string backend;
};

/// Where a kernel came from, recorded in its cache entry (the cache tool shows it).
struct KernelProvenance {
  std::vector<std::string> ops;          ///< fused ops in topological order
  std::string pattern;                   ///< what formed the group ("lattice", a pattern name)
  std::vector<std::string> specialised;  ///< specialised (compile-time) dims and why
  std::vector<int64_t> buffer_numel;     ///< elements of each kernel buffer (for KFUSE_TUNE's runs)
};
KernelProvenance provenance_of(const FusionGroup& g, const LoweredKernel& lk);

/// Compiles `k` with the first backend of the chain for `device` (under `opts`: the backend list,
/// cache mode and directory, the backends' knobs) that accepts it, through the cache. Declines
/// and compiler failures are logged (channel `backend`) and counted as fallbacks.
CompiledRef compile_kernel(const ir::Kernel& k, Device device, const Options& opts,
                           const KernelProvenance* prov = nullptr);

/// The public cache inspection API (kfuse/cache.hpp) for the cache of `o` (cache_api.cpp passes
/// the process-wide options).
CacheStats cache_stats_of(const Options& o);
std::vector<CacheEntry> cache_entries_of(const Options& o);
void clear_cache_of(const Options& o);

}  // namespace kfuse::detail
