// The CPU thread pool (lib/backend/thread_pool.cpp): every index runs exactly once in contiguous
// chunks; the calling thread claims work dynamically, so a worker that is late (its vCPU
// descheduled, simulated with set_pool_worker_delay) costs at most its current chunk and an
// evaluation with 2 threads finishes in about the 1-thread time.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include "backend/thread_pool.hpp"
#include "kfuse/kfuse.hpp"

namespace {

using namespace std::chrono;
using kfuse::detail::parallel_for;

// Threads of this process (the entries of /proc/self/task).
int process_threads() {
  int n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/task")) ++n;
  return n;
}

struct Threads {  // sets Options::num_threads for one test
  explicit Threads(int n) : saved(kfuse::options()) {
    kfuse::Options o = saved;
    o.num_threads = n;
    kfuse::set_options(o);
  }
  ~Threads() { kfuse::set_options(saved); }
  kfuse::Options saved;
};

struct WorkerDelay {
  explicit WorkerDelay(microseconds d) { kfuse::detail::set_pool_worker_delay(d); }
  ~WorkerDelay() { kfuse::detail::set_pool_worker_delay(microseconds(0)); }
};

TEST(ThreadPool, EveryIndexOnceInContiguousChunks) {
  for (int threads : {1, 2, 3}) {
    Threads t(threads);
    for (int64_t n : {1, 2, 7, 100, 1001, 65536})
      for (int64_t grain : {1, 3, 64, 100000}) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        std::atomic<int64_t> calls{0};
        parallel_for(n, grain, [&](int64_t b, int64_t e) {
          ASSERT_LT(b, e);
          ASSERT_LE(e, n);
          // a chunk has at least `grain` items unless it is the last one or the whole range
          if (e != n) { EXPECT_GE(e - b, std::min(grain, n)) << n << " " << grain; }
          for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)].fetch_add(1);
          calls.fetch_add(1);
        });
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(1, hits[static_cast<size_t>(i)].load()) << "n=" << n << " i=" << i;
        if (n <= grain || threads == 1) { EXPECT_EQ(1, calls.load()) << "small ranges run as one call"; }
      }
  }
}

// A chunk throws (on whichever thread runs it): the exception reaches the caller after every
// other chunk has run and the region is closed, and the pool stays usable.
TEST(ThreadPool, ExceptionFromAChunkPropagates) {
  Threads t(2);
  for (int64_t bad : {0, 500, 999}) {
    std::atomic<int64_t> ran{0};
    EXPECT_THROW(parallel_for(1000, 1,
                              [&](int64_t b, int64_t e) {
                                ran.fetch_add(e - b);
                                if (b <= bad && bad < e) throw std::runtime_error("boom");
                              }),
                 std::runtime_error);
    EXPECT_EQ(1000, ran.load());
  }
  std::atomic<int64_t> sum{0};
  parallel_for(1000, 1, [&](int64_t b, int64_t e) { sum.fetch_add(e - b); });
  EXPECT_EQ(1000, sum.load());
}

// A worker that wakes 300 ms late: the region (about 20 ms of work) finishes on the calling
// thread without waiting for it. With fixed shares per thread it took >= 300 ms.
TEST(ThreadPool, LateWorkerDoesNotHoldTheRegion) {
  if (kfuse::detail::num_threads() < 2 && std::thread::hardware_concurrency() < 2)
    GTEST_SKIP() << "one hardware thread";
  Threads t(2);
  WorkerDelay d(milliseconds(300));
  std::atomic<int64_t> done{0};
  auto t0 = steady_clock::now();
  parallel_for(40, 1, [&](int64_t b, int64_t e) {
    std::this_thread::sleep_for(microseconds(500 * (e - b)));
    done.fetch_add(e - b);
  });
  const double ms = duration<double, std::milli>(steady_clock::now() - t0).count();
  EXPECT_EQ(40, done.load());
  EXPECT_LT(ms, 200) << "the region waited for the late worker";
}

// The same through a whole evaluation: relu(a * b + c) over 1M floats with 2 threads and late
// workers takes about the 1-thread time, not the workers' delay.
TEST(ThreadPool, EvaluationWithLateWorkersTakesAboutOneThreadTime) {
  if (std::thread::hardware_concurrency() < 2) GTEST_SKIP() << "one hardware thread";
  using namespace kfuse;
  const int64_t n = 1 << 20;
  Tensor a = rand({n}, 1), b = rand({n}, 2), c = rand({n}, 3);
  eval({a, b, c});
  auto run = [&] {
    Tensor y = relu(a * b + c);
    auto t0 = steady_clock::now();
    y.eval();
    return duration<double, std::milli>(steady_clock::now() - t0).count();
  };
  Threads t(2);
  run();  // plan and compile outside the timed runs
  double best = 1e9;
  {
    WorkerDelay d(milliseconds(400));
    for (int i = 0; i < 3; ++i) best = std::min(best, run());
  }
  EXPECT_LT(best, 250) << "2 threads with a late worker waited for it";
}

// With one thread asked for, evaluating starts no thread: a program of its own stays single
// threaded, so its shared_ptr counts (every node's) stay plain increments (chain of 10 ops on 8
// floats, record + eval: 1.52 -> 1.45 us on the Intel host). ctest runs each test in a process of
// its own; in a run of the whole binary other tests have started the pool already.
TEST(ThreadPool, OneThreadStartsNoThread) {
  if (process_threads() != 1) GTEST_SKIP() << "this process has threads already (ctest runs each test alone)";
  Threads one(1);
  std::vector<float> a(64 * 64, 0.5f), b(64 * 64, 0.25f);
  auto x = kfuse::Tensor::borrow(a.data(), kfuse::Shape{64, 64});
  auto w = kfuse::Tensor::borrow(b.data(), kfuse::Shape{64, 64});
  auto y = kfuse::softmax(kfuse::matmul(x, w), -1) + kfuse::sum(kfuse::tanh(x * 1.5 + 0.5), int64_t{1}).unsqueeze(1);
  y.eval();
  parallel_for(1 << 20, 1, [](int64_t, int64_t) {});
  EXPECT_EQ(process_threads(), 1);
}

}  // namespace
