// The public cache inspection API (kfuse/cache.hpp) that depends on the options: an API boundary,
// so it reads the process-wide options and passes them to the kernel cache.
#include "kfuse/cache.hpp"
#include "kfuse/options.hpp"
#include "runtime/kernel_cache.hpp"

namespace kfuse {

CacheStats cache_stats() { return detail::cache_stats_of(options()); }

std::vector<CacheEntry> cache_entries() { return detail::cache_entries_of(options()); }

void clear_cache() { detail::clear_cache_of(options()); }

}  // namespace kfuse
