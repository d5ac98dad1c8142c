#include "host_pool.hpp"

#include "kfuse/options.hpp"
#include "spin_lock.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
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
constexpr size_t kMinCachedBytes = size_t{512} << 20;
constexpr size_t kPageAlignedBytes = size_t{64} << 10;  // (a multiple of 4096 from here on)
constexpr size_t kHugePage = size_t{2} << 20;           // x86-64 transparent huge pages
constexpr size_t kHugeBytes = size_t{4} << 20;

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

// Options::pool_max_bytes, or an eighth of the physical memory (at least kMinCachedBytes): a
// repeated evaluation with a 1 GiB output then reuses its buffer instead of faulting in a fresh
// one (0.6 s per GiB on the 2-vCPU VMs, against 0.1 s for the kernel).
size_t max_cached_bytes() {
  if (uint64_t b = options().pool_max_bytes) return static_cast<size_t>(b);
  static const size_t dflt = [] {
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    size_t phys = pages > 0 && page > 0 ? static_cast<size_t>(pages) * static_cast<size_t>(page) : 0;
    return std::max(kMinCachedBytes, phys / 8);
  }();
  return dflt;
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
  //
  // Big blocks start on a huge page and ask for transparent huge pages (Options::huge_pages):
  // scattered reads of a big table (embedding bags) then walk the page tables once per 2 MiB,
  // not per 4 KiB; a random line of a 512 MiB buffer took 11 ns instead of 16 on the 2-vCPU
  // EPYC (docs/performance.md). The advice is a hint: where THP is off, plain pages serve.
  const bool huge = cls >= kHugeBytes && options().huge_pages;
  const size_t align = huge ? kHugePage : cls >= kPageAlignedBytes ? 4096 : 64;
  void* b = std::aligned_alloc(align, (cls + align - 1) / align * align);  // (a multiple of align)
  if (!b) throw std::bad_alloc();
  if (huge) madvise(b, cls, MADV_HUGEPAGE);
  return b;
}

// A freed block that does not fit under the bound displaces cached blocks of other large
// classes: the block just freed is the one the next evaluation of the same graph asks for.
void pool_free(void* b, size_t bytes) {
  size_t cls = size_class(bytes);
  if (kPoolEnabled) {
    const size_t bound = max_cached_bytes();
    std::vector<void*> victims;  // freed after the lock: returning big blocks takes a while
    {
      Pool& p = pool();
      std::lock_guard<SpinLock> lk(p.mu);
      if (cls <= bound) {
        for (auto it = p.free_blocks.begin(); p.cached + cls > bound && it != p.free_blocks.end(); ++it)
          while (it->first != cls && !it->second.empty() && p.cached + cls > bound) {
            victims.push_back(it->second.back());
            it->second.pop_back();
            p.cached -= it->first;
          }
      }
      if (p.cached + cls <= bound) {
        p.list(cls).push_back(b);
        p.cached += cls;
        b = nullptr;
      }
    }
    for (void* v : victims) std::free(v);
  }
  std::free(b);
}

size_t pool_cached_bytes() {
  Pool& p = pool();
  std::lock_guard<SpinLock> lk(p.mu);
  return p.cached;
}

}  // namespace kfuse::detail
