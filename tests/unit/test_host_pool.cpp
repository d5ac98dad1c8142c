// The host buffer pool (lib/graph/host_pool.cpp): alignment of the blocks it hands out, and
// reuse of freed blocks by size class.
#include <gtest/gtest.h>

#include <cstdint>

#include "../../lib/graph/host_pool.hpp"

namespace {

uintptr_t addr(const void* p) { return reinterpret_cast<uintptr_t>(p); }

// Small blocks are 64-byte aligned (one cache line, a zmm vector); blocks of 64 KiB and more start
// on a page, so that an output sits at the same offset modulo 4 KiB as kfuse's other large
// buffers, never a few vectors after one (4K aliasing: README "xbyak backend").
TEST(HostPool, AlignmentBySize) {
  using namespace kfuse::detail;
  for (size_t bytes : {size_t{1}, size_t{100}, size_t{4096}, size_t{65535}}) {
    void* p = pool_alloc(bytes);
    EXPECT_EQ(addr(p) % 64, 0u) << bytes;
    pool_free(p, bytes);
  }
  for (size_t bytes : {size_t{65536}, size_t{100000}, size_t{1} << 20, (size_t{16} << 20) + 4}) {
    void* p = pool_alloc(bytes);
    EXPECT_EQ(addr(p) % 4096, 0u) << bytes;
    pool_free(p, bytes);
  }
}

#if !defined(__SANITIZE_ADDRESS__)  // (the pool is off under AddressSanitizer)
TEST(HostPool, FreedBlockIsReusedBySizeClass) {
  using namespace kfuse::detail;
  void* a = pool_alloc(size_t{3} << 20);
  pool_free(a, size_t{3} << 20);
  void* b = pool_alloc((size_t{3} << 20) - 100);  // same class
  EXPECT_EQ(a, b);
  pool_free(b, (size_t{3} << 20) - 100);
}
#endif

}  // namespace
