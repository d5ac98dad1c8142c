/** \file cache.hpp
 * Inspection of the kernel cache (README "Kernel cache"): statistics, entries, clearing.
 * The cache itself is configured by KFUSE_CACHE (off | memory | disk), KFUSE_CACHE_DIR and
 * KFUSE_CACHE_MAX_BYTES (options.hpp). The `kfuse-cache` tool is built on the same functions.
 */
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace kfuse {

struct CacheStats {
  std::string mode;  ///< off | memory | disk
  std::string dir;   ///< the disk cache directory (also when not in use)
  bool disk_readable = false, disk_writable = false;
  std::string disk_note;  ///< why the disk cache is not (fully) in use, "" when it is
  uint64_t memory_entries = 0, memory_bytes = 0, memory_evictions = 0;
  uint64_t disk_entries = 0, disk_bytes = 0;  ///< scanned now (disk mode only)
  // this process
  uint64_t hits = 0, misses = 0, compiles = 0, disk_loads = 0;
  uint64_t disk_stores = 0, disk_corrupt = 0, disk_refused = 0, disk_evictions = 0;
  double compile_ms = 0;
};

/// One disk-cache entry (what `kfuse-cache list --json` prints).
struct CacheEntry {
  std::string key;   ///< 32 hex digits
  std::string stem;  ///< the kernel's readable name, e.g. k_log_softmax_f32
  std::string backend, target, dtypes, kind, pattern;
  std::vector<std::string> ops, specialised, params;
  std::string shape;  ///< "[$0] x [10]": outer extents ($n: run-time param n) x specialised reduce extents
  std::string source_kind, binary_kind;
  int format_version = 0, codegen_version = 0;
  int backend_version = 0;  ///< the backend's own code generator version
  uint64_t size_bytes = 0, binary_bytes = 0, hits = 0;
  double compile_ms = 0;
  int64_t created = 0, last_used = 0;  ///< unix seconds
  std::string path;
};

CacheStats cache_stats();
/// Entries of the disk cache of the current options (empty unless KFUSE_CACHE=disk).
std::vector<CacheEntry> cache_entries();
/// Drops every kernel from the memory cache (kernels still held by running plans stay alive).
void clear_memory_cache();
/// clear_memory_cache() and removes every disk entry of the current cache directory.
void clear_cache();
/// Bounds of the memory cache (default 4096 kernels, 256 MiB of code and source).
void set_memory_cache_limits(uint64_t max_entries, uint64_t max_bytes);

}  // namespace kfuse
