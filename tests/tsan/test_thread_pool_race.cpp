// The CPU pool under ThreadSanitizer: regions back to back (workers joining late, or not at all,
// while the next region opens), results written by any thread and read by the caller after the
// region, several user threads entering parallel_for at once (one gets the pool, the others run
// inline), and an exception thrown from a chunk.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include "backend/thread_pool.hpp"
#include "kfuse/options.hpp"

namespace {

using kfuse::detail::parallel_for;

struct TwoThreads {
  TwoThreads() : saved(kfuse::options()) {
    kfuse::Options o = saved;
    o.num_threads = 2;
    kfuse::set_options(o);
  }
  ~TwoThreads() { kfuse::set_options(saved); }
  kfuse::Options saved;
};

// Plain (non-atomic) writes in the chunks, plain reads after the region: the region's end must
// order them.
void regions(int count, int64_t n) {
  std::vector<int64_t> out(static_cast<size_t>(n));
  for (int r = 0; r < count; ++r) {
    parallel_for(n, 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) out[static_cast<size_t>(i)] = i * r;
    });
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(i * r, out[static_cast<size_t>(i)]);
  }
}

TEST(ThreadPoolRace, RegionsBackToBackWithLateWorkers) {
  TwoThreads t;
  regions(200, 64);
  kfuse::detail::set_pool_worker_delay(std::chrono::microseconds(200));
  regions(200, 64);
  kfuse::detail::set_pool_worker_delay(std::chrono::microseconds(0));
  regions(50, 4096);
}

TEST(ThreadPoolRace, SeveralUserThreadsAtOnce) {
  TwoThreads t;
  std::vector<std::thread> users;
  for (int u = 0; u < 3; ++u) users.emplace_back([] { regions(50, 256); });
  for (auto& u : users) u.join();
}

TEST(ThreadPoolRace, ExceptionFromAnyChunk) {
  TwoThreads t;
  for (int r = 0; r < 50; ++r) {
    std::atomic<int64_t> ran{0};
    EXPECT_THROW(parallel_for(64, 1,
                              [&](int64_t b, int64_t e) {
                                ran.fetch_add(e - b);
                                if (b <= r % 64 && r % 64 < e) throw std::runtime_error("chunk");
                              }),
                 std::runtime_error);
    EXPECT_EQ(64, ran.load());
  }
}

}  // namespace
