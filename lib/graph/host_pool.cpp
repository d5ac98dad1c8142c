#include "host_pool.hpp"

#include <cstdlib>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

namespace kfuse::detail {

namespace {

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kPoolEnabled = false;
#else
constexpr bool kPoolEnabled = true;
#endif
constexpr size_t kMaxCachedBytes = size_t{512} << 20;

// Size classes: 64-byte steps below 4 KiB, then 8 classes per power of two (waste <= 12.5%).
size_t size_class(size_t bytes) {
  if (bytes <= 4096) return ((bytes + 63) / 64) * 64 + (bytes == 0 ? 64 : 0);
  size_t top = size_t{1} << (63 - __builtin_clzll(bytes));
  size_t step = top / 8;
  return ((bytes + step - 1) / step) * step;
}

struct Pool {
  std::mutex mu;
  std::unordered_map<size_t, std::vector<void*>> free_blocks;
  size_t cached = 0;
};
Pool& pool() {
  static Pool* p = new Pool();  // leaked: blocks may be freed during static destruction
  return *p;
}

}  // namespace

void* pool_alloc(size_t bytes) {
  size_t cls = size_class(bytes);
  if (kPoolEnabled) {
    Pool& p = pool();
    std::lock_guard<std::mutex> lk(p.mu);
    auto it = p.free_blocks.find(cls);
    if (it != p.free_blocks.end() && !it->second.empty()) {
      void* b = it->second.back();
      it->second.pop_back();
      p.cached -= cls;
      return b;
    }
  }
  void* b = std::aligned_alloc(64, cls);
  if (!b) throw std::bad_alloc();
  return b;
}

void pool_free(void* b, size_t bytes) {
  size_t cls = size_class(bytes);
  if (kPoolEnabled) {
    Pool& p = pool();
    std::lock_guard<std::mutex> lk(p.mu);
    if (p.cached + cls <= kMaxCachedBytes) {
      p.free_blocks[cls].push_back(b);
      p.cached += cls;
      return;
    }
  }
  std::free(b);
}

size_t pool_cached_bytes() {
  Pool& p = pool();
  std::lock_guard<std::mutex> lk(p.mu);
  return p.cached;
}

}  // namespace kfuse::detail
