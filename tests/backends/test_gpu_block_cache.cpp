// The block cache GPU backends keep their device memory in (jit/gpu/block_cache.hpp), with a
// fake driver: size classes, reuse, the cached-bytes limit and the out-of-memory retry.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "../../jit/gpu/block_cache.hpp"
#include "kfuse/error.hpp"

using kfuse::detail::gpu::BlockCache;

namespace {

// A driver with `capacity` bytes that hands out distinct fake addresses.
struct FakeDriver {
  size_t capacity = size_t{1} << 30, used = 0;
  uintptr_t next = 0x1000;
  std::set<void*> live;
  BlockCache make(size_t limit) {
    return BlockCache(
        [this](size_t bytes) -> void* {
          if (used + bytes > capacity) return nullptr;
          used += bytes;
          void* p = reinterpret_cast<void*>(next);
          next += bytes;
          live.insert(p);
          sizes[p] = bytes;
          return p;
        },
        [this](void* p) {
          EXPECT_EQ(live.erase(p), 1u) << "freed twice or never allocated";
          used -= sizes[p];
        },
        limit);
  }
  std::map<void*, size_t> sizes;
};

}  // namespace

TEST(BlockCache, SizeClassesWasteAtMostAnEighth) {
  size_t prev = 0;
  for (size_t b = 1; b < (size_t{1} << 22); b = b * 9 / 8 + 1) {
    const size_t c = BlockCache::size_class(b);
    EXPECT_GE(c, b);
    EXPECT_GE(c, prev);
    if (b > 256) { EXPECT_LE(static_cast<double>(c), b * 1.125) << b; }
    EXPECT_EQ(BlockCache::size_class(c), c) << "a class is its own class";
    prev = c;
  }
  EXPECT_EQ(BlockCache::size_class(1), 256u);
  EXPECT_EQ(BlockCache::size_class(1025), 1152u);
}

TEST(BlockCache, ReusesFreedBlocksOfTheSameClass) {
  FakeDriver drv;
  BlockCache c = drv.make(size_t{1} << 20);
  void* a = c.take(1000);
  EXPECT_EQ(c.stats().driver_allocs, 1u);
  EXPECT_EQ(c.stats().bytes_in_use, 1024u);
  c.give(a, 1000);
  EXPECT_EQ(c.stats().bytes_cached, 1024u);
  void* b = c.take(1010);  // same class (1024)
  EXPECT_EQ(b, a);
  EXPECT_EQ(c.stats().driver_allocs, 1u);
  EXPECT_EQ(c.stats().reuses, 1u);
  void* d = c.take(2000);  // another class: a new block
  EXPECT_NE(d, a);
  EXPECT_EQ(c.stats().driver_allocs, 2u);
  c.give(b, 1010);
  c.give(d, 2000);
  EXPECT_EQ(c.stats().bytes_in_use, 0u);
  EXPECT_EQ(c.stats().driver_frees, 0u);
  c.release_cached();
  EXPECT_EQ(c.stats().driver_frees, 2u);
  EXPECT_EQ(c.stats().bytes_cached, 0u);
  EXPECT_TRUE(drv.live.empty());
}

TEST(BlockCache, CachedBytesAreBounded) {
  FakeDriver drv;
  BlockCache c = drv.make(1024);
  void* a = c.take(1024);
  void* b = c.take(1024);
  c.give(a, 1024);  // cached: 1024 of 1024
  c.give(b, 1024);  // over the limit: back to the driver
  EXPECT_EQ(c.stats().bytes_cached, 1024u);
  EXPECT_EQ(c.stats().driver_frees, 1u);
  EXPECT_EQ(drv.live.size(), 1u);
  c.release_cached();
  EXPECT_TRUE(drv.live.empty());
}

TEST(BlockCache, OutOfMemoryEmptiesTheCacheAndRetriesOnce) {
  FakeDriver drv;
  drv.capacity = 4096;
  BlockCache c = drv.make(size_t{1} << 20);
  void* a = c.take(2048);
  c.give(a, 2048);         // cached, still held from the driver
  void* b = c.take(3000);  // 3072: does not fit beside the cached 2048 -> cache emptied, retried
  EXPECT_NE(b, nullptr);
  EXPECT_EQ(c.stats().driver_frees, 1u);
  EXPECT_EQ(c.stats().bytes_cached, 0u);
  try {
    (void)c.take(2048);  // 3072 + 2048 > 4096 even with an empty cache
    FAIL() << "expected BackendError";
  } catch (const kfuse::BackendError& e) {
    EXPECT_NE(std::string(e.what()).find("out of memory"), std::string::npos) << e.what();
  }
  c.give(b, 3000);
  c.release_cached();
  EXPECT_TRUE(drv.live.empty());
}
