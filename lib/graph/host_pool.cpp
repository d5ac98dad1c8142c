#include "host_pool.hpp"

#include "spin_lock.hpp"

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
constexpr size_t kPageAlignedBytes = size_t{64} << 10;  // (a multiple of 4096 from here on)

// Size classes: 64-byte steps below 4 KiB, then 8 classes per power of two (waste <= 12.5%).
size_t size_class(size_t bytes) {
  if (bytes <= 4096) return ((bytes + 63) / 64) * 64 + (bytes == 0 ? 64 : 0);
  size_t top = size_t{1} << (63 - __builtin_clzll(bytes));
  size_t step = top / 8;
  return ((bytes + step - 1) / step) * step;
}

// The 64 classes up to 4 KiB (every tiny tensor of every evaluation) are an array indexed by
// class; larger ones a map. One spin lock: the critical sections are a push or a pop.
constexpr size_t kSmallClasses = 4096 / 64;
struct Pool {
  SpinLock mu;
  std::vector<void*> small[kSmallClasses + 1];
  std::unordered_map<size_t, std::vector<void*>> free_blocks;
  size_t cached = 0;
  std::vector<void*>& list(size_t cls) { return cls <= 4096 ? small[cls / 64] : free_blocks[cls]; }
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
    std::lock_guard<SpinLock> lk(p.mu);
    std::vector<void*>* l = nullptr;
    if (cls <= 4096) {
      l = &p.small[cls / 64];
    } else if (auto it = p.free_blocks.find(cls); it != p.free_blocks.end()) {
      l = &it->second;
    }
    if (l && !l->empty()) {
      void* b = l->back();
      l->pop_back();
      p.cached -= cls;
      return b;
    }
  }
  // Large blocks start on a page: a kernel's output then sits at the same offset modulo 4 KiB as
  // kfuse's other buffers and just past malloc'ed user data (16 mod 4096), never a few vectors
  // after an input, where 4K aliasing makes the xbyak backend give up streaming stores
  // (jit/xbyak/emitter.cpp, streaming_check; README "xbyak backend").
  void* b = std::aligned_alloc(cls >= kPageAlignedBytes ? 4096 : 64, cls);
  if (!b) throw std::bad_alloc();
  return b;
}

void pool_free(void* b, size_t bytes) {
  size_t cls = size_class(bytes);
  if (kPoolEnabled) {
    Pool& p = pool();
    std::lock_guard<SpinLock> lk(p.mu);
    if (p.cached + cls <= kMaxCachedBytes) {
      p.list(cls).push_back(b);
      p.cached += cls;
      return;
    }
  }
  std::free(b);
}

size_t pool_cached_bytes() {
  Pool& p = pool();
  std::lock_guard<SpinLock> lk(p.mu);
  return p.cached;
}

}  // namespace kfuse::detail
