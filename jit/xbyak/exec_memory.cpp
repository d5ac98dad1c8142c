#include "exec_memory.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <bitset>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "kfuse/error.hpp"

namespace kfuse::detail::xb {

namespace {

constexpr size_t kChunkPages = 64;

size_t page_size() {
  static const size_t p = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return p;
}

// A run of kChunkPages pages; `used` marks the pages that hold a kernel.
struct Chunk {
  uint8_t* base = nullptr;
  std::bitset<kChunkPages> used;
  size_t free = kChunkPages;  ///< pages not used (full chunks are skipped without a bit scan)
};

class Arena {
 public:
  // Returns `pages` read+write pages (contiguous). Kernels larger than a chunk get their own
  // mapping (rare: the emitter's code is a few KiB).
  uint8_t* take(size_t pages) {
    if (pages > kChunkPages) return map(pages);
    std::lock_guard<std::mutex> lk(mu_);
    for (auto c = chunks_.rbegin(); c != chunks_.rend(); ++c)  // newest first: it has the free pages
      if (c->free >= pages)
        if (uint8_t* p = take_from(*c, pages)) return p;
    Chunk c;
    c.base = map(kChunkPages);
    chunks_.push_back(c);
    return take_from(chunks_.back(), pages);
  }

  // `p` (from take) back: made read+write again (never executable while writable).
  void give(uint8_t* p, size_t pages) {
    const size_t len = pages * page_size();
    if (pages > kChunkPages) {
      munmap(p, len);
      return;
    }
    std::lock_guard<std::mutex> lk(mu_);
    for (size_t i = 0; i < chunks_.size(); ++i) {
      Chunk& c = chunks_[i];
      if (p < c.base || p >= c.base + kChunkPages * page_size()) continue;
      size_t first = static_cast<size_t>(p - c.base) / page_size();
      for (size_t j = 0; j < pages; ++j) c.used.reset(first + j);
      c.free += pages;
      if (c.used.none() && chunks_.size() > 1) {  // keep one chunk for the next kernel
        munmap(c.base, kChunkPages * page_size());
        chunks_.erase(chunks_.begin() + static_cast<std::ptrdiff_t>(i));
      } else {
        mprotect(p, len, PROT_READ | PROT_WRITE);
      }
      return;
    }
  }

  size_t mapped_pages() {
    std::lock_guard<std::mutex> lk(mu_);
    return chunks_.size() * kChunkPages;
  }

 private:
  static uint8_t* map(size_t pages) {
    // MAP_POPULATE: the pages are faulted in here, once per chunk, not on the first copy.
    void* m =
        mmap(nullptr, pages * page_size(), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (m == MAP_FAILED) throw BackendError("xbyak: mmap of executable memory failed");
    return static_cast<uint8_t*>(m);
  }

  uint8_t* take_from(Chunk& c, size_t pages) {
    for (size_t s = 0; s + pages <= kChunkPages; ++s) {
      size_t j = 0;
      while (j < pages && !c.used.test(s + j)) ++j;
      if (j == pages) {
        for (j = 0; j < pages; ++j) c.used.set(s + j);
        c.free -= pages;
        return c.base + s * page_size();
      }
      s += j;  // skip past the used page that ended this run
    }
    return nullptr;
  }

  std::mutex mu_;
  std::vector<Chunk> chunks_;
};

// Leaked on purpose: kernels held by static objects may be freed after this TU's statics die.
Arena& arena() {
  static Arena* a = new Arena;
  return *a;
}

}  // namespace

void perf_map_note(const void* start, size_t n, const std::string& name) {
  static const bool on = [] {
    const char* v = std::getenv("KFUSE_PERF_MAP");
    return v && *v && std::strcmp(v, "0") != 0;
  }();
  if (!on) return;
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  const std::string path = "/tmp/perf-" + std::to_string(getpid()) + ".map";
  if (std::FILE* f = std::fopen(path.c_str(), "a")) {
    std::fprintf(f, "%zx %zx %s\n", reinterpret_cast<size_t>(start), n, name.c_str());
    std::fclose(f);
  }
}

ExecMem::ExecMem(const uint8_t* code, size_t n, const std::string& name) {
  pages_ = (n + page_size() - 1) / page_size();
  if (pages_ == 0) pages_ = 1;
  mem_ = arena().take(pages_);
  std::memcpy(mem_, code, n);
  if (mprotect(mem_, pages_ * page_size(), PROT_READ | PROT_EXEC) != 0) {
    arena().give(mem_, pages_);
    throw BackendError("xbyak: mprotect(read+execute) failed");
  }
  if (!name.empty()) perf_map_note(mem_, n, name);
}

ExecMem::~ExecMem() { arena().give(mem_, pages_); }

size_t exec_arena_mapped_pages() { return arena().mapped_pages(); }

}  // namespace kfuse::detail::xb
