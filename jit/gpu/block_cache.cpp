#include "block_cache.hpp"

#include <bit>

#include "kfuse/error.hpp"

namespace kfuse::detail::gpu {

BlockCache::BlockCache(std::function<void*(size_t)> alloc, std::function<void(void*)> release, size_t limit_bytes)
    : alloc_(std::move(alloc)), release_(std::move(release)), limit_(limit_bytes) {
  st_.allocator = "block cache";
}

// Blocks still cached at exit stay with the driver, which frees them with the context; blocks
// of tensors that outlive the cache (static tensors) must not reach a dead cache, so backends
// keep their caches for the whole process.
BlockCache::~BlockCache() = default;

size_t BlockCache::size_class(size_t bytes) {
  if (bytes <= 256) return 256;
  // 8 steps per power of two: the top 4 bits of the size, rounded up.
  const int top = std::bit_width(bytes - 1) - 1;  // floor(log2(bytes - 1))
  const size_t step = size_t{1} << (top - 3);
  return (bytes + step - 1) / step * step;
}

void* BlockCache::take(size_t bytes) {
  const size_t c = size_class(bytes);
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = free_.find(c);
    if (it != free_.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      st_.bytes_cached -= c;
      st_.bytes_in_use += c;
      ++st_.reuses;
      return p;
    }
  }
  void* p = alloc_(c);
  if (!p) {  // out of memory: hand the cache back to the driver and try once more
    release_cached();
    p = alloc_(c);
    if (!p)
      throw BackendError("device out of memory: allocating " + std::to_string(c) + " bytes failed with " +
                         std::to_string(stats().bytes_in_use) + " bytes in use (free tensors or use a smaller batch)");
  }
  std::lock_guard<std::mutex> lk(mu_);
  ++st_.driver_allocs;
  st_.bytes_in_use += c;
  return p;
}

void BlockCache::give(void* block, size_t bytes) {
  const size_t c = size_class(bytes);
  {
    std::lock_guard<std::mutex> lk(mu_);
    st_.bytes_in_use -= c;
    if (st_.bytes_cached + c <= limit_) {
      free_[c].push_back(block);
      st_.bytes_cached += c;
      return;
    }
    ++st_.driver_frees;
  }
  release_(block);
}

void BlockCache::release_cached() {
  std::unordered_map<size_t, std::vector<void*>> blocks;
  {
    std::lock_guard<std::mutex> lk(mu_);
    blocks.swap(free_);
    for (auto& [c, v] : blocks) st_.driver_frees += v.size();
    st_.bytes_cached = 0;
  }
  for (auto& [c, v] : blocks)
    for (void* p : v) release_(p);
}

DeviceMemoryStats BlockCache::stats() const {
  std::lock_guard<std::mutex> lk(mu_);
  return st_;
}

void BlockCache::count_sync() {
  std::lock_guard<std::mutex> lk(mu_);
  ++st_.host_syncs;
}

}  // namespace kfuse::detail::gpu
