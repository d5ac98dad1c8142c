// The host buffer pool (lib/graph/host_pool.cpp): alignment of the blocks it hands out (huge
// pages for big ones), and reuse of freed blocks by size class.
#include <gtest/gtest.h>

#include <cstdint>

#include "../../lib/graph/host_pool.hpp"
#include "kfuse/options.hpp"

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

// Blocks of 4 MiB and more start on a 2 MiB boundary (a transparent huge page, asked for with
// madvise) unless Options::huge_pages is off; writing all of such a block works either way.
TEST(HostPool, BigBlocksStartOnAHugePage) {
  using namespace kfuse::detail;
  const kfuse::Options saved = kfuse::options();
  for (size_t bytes : {size_t{4} << 20, (size_t{5} << 20) + 12345, size_t{40} << 20}) {
    void* p = pool_alloc(bytes);
    EXPECT_EQ(addr(p) % (size_t{2} << 20), 0u) << bytes;
    static_cast<unsigned char*>(p)[0] = 1;
    static_cast<unsigned char*>(p)[bytes - 1] = 2;
    pool_free(p, bytes);
  }
  kfuse::Options o = saved;
  o.huge_pages = false;
  o.pool_max_bytes = 1;  // (nothing cached: the next block is a fresh one)
  kfuse::set_options(o);
  void* p = pool_alloc(size_t{6} << 20);
  EXPECT_EQ(addr(p) % 4096, 0u);
  pool_free(p, size_t{6} << 20);
  kfuse::set_options(saved);
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

// Past Options::pool_max_bytes a freed block displaces cached blocks of other classes (the one
// just freed is what the next evaluation of the same graph asks for); a block bigger than the
// bound goes back to the system.
TEST(HostPool, BoundDisplacesOtherClassesForTheNewestBlock) {
  using namespace kfuse::detail;
  const kfuse::Options saved = kfuse::options();
  kfuse::Options o = saved;
  o.pool_max_bytes = size_t{10} << 20;
  kfuse::set_options(o);
  const size_t mib = size_t{1} << 20;
  void* six = pool_alloc(6 * mib);
  void* five = pool_alloc(5 * mib);
  void* big = pool_alloc(12 * mib);
  pool_free(six, 6 * mib);
  const size_t with_six = pool_cached_bytes();
  EXPECT_GE(with_six, 6 * mib);
  pool_free(five, 5 * mib);  // 6 + 5 > 10: the 6 MiB block goes
  EXPECT_LE(pool_cached_bytes(), o.pool_max_bytes);
  EXPECT_EQ(pool_alloc(5 * mib), five);
  pool_free(big, 12 * mib);  // over the bound itself: not kept, nothing displaced for it
  EXPECT_LE(pool_cached_bytes(), o.pool_max_bytes);
  void* again = pool_alloc(12 * mib);
  pool_free(again, 12 * mib);
  pool_free(five, 5 * mib);
  kfuse::set_options(saved);
}
#endif

}  // namespace
