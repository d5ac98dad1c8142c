// The intern table and the plan cache under concurrency: equal nodes created and dropped by
// several threads at once (a lookup must never hand out a node whose last reference is gone),
// nodes created on one thread and released on another after the first has exited (per-thread
// recycling caches), and one cached program run by many threads on their own data. Built into
// kfuse_tsan_tests and, through tests/unit/test_concurrent_intern.cpp, into kfuse_tests.
#include <barrier>
#include <cmath>
#include <thread>

#include "test_util.hpp"

namespace kfuse::test {
namespace {

constexpr int kThreads = 4;

TEST(ConcurrentIntern, DyingNodesAreNeverRevived) {
  const size_t base = interned_node_count();
  {
    auto xv = stored_values(random_values(5, 171), DType::F32);
    Tensor x = make_tensor(xv, {5});
    std::vector<std::thread> threads;
    std::vector<int> bad(kThreads, 0);
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        for (int it = 0; it < 300; ++it) {
          // Two structures only: every thread creates and drops the same nodes, so lookups
          // race with the destruction of equal nodes on other threads.
          double c = (it + t) % 2 ? 0.5 : 1.5;
          Tensor a = kfuse::exp(x) * c + 1.0;
          Tensor b = kfuse::exp(x) * c + 1.0;
          if (a.node() != b.node()) ++bad[t];  // `a` holds it: the second lookup must find it
          if (it % 50 == 0) {
            auto v = values(a);
            for (size_t i = 0; i < xv.size(); ++i)
              if (std::fabs(v[i] - (std::exp(xv[i]) * c + 1.0)) > 1e-4 * std::fabs(v[i]) + 1e-5) ++bad[t];
          }
        }
      });
    }
    for (auto& th : threads) th.join();
    for (int t = 0; t < kThreads; ++t) EXPECT_EQ(bad[t], 0) << "thread " << t;
  }
  EXPECT_EQ(interned_node_count(), base);
}

TEST(ConcurrentIntern, NodesOutliveTheThreadThatMadeThem) {
  const size_t base = interned_node_count();
  std::vector<Tensor> made;
  {
    std::thread maker([&] {
      Tensor x = make_tensor(random_values(4, 172), {4});
      for (int i = 0; i < 200; ++i) made.push_back(kfuse::tanh(x * static_cast<double>(i) + 0.25));
    });
    maker.join();  // its thread-local caches are gone; its nodes are not
  }
  EXPECT_GT(interned_node_count(), base + 200);
  std::thread releaser([&] {
    // released here, on a thread that never created a node
    for (size_t i = 0; i < made.size(); i += 2) made[i] = Tensor();
  });
  releaser.join();
  EXPECT_EQ(values(made[1]).size(), 4u);
  made.clear();
  EXPECT_EQ(interned_node_count(), base);
}

TEST(ConcurrentIntern, OneCachedProgramManyThreads) {
  std::barrier sync(kThreads);
  std::vector<int> bad(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      auto pv = stored_values(random_values(8, 180 + static_cast<uint64_t>(t)), DType::F32);
      for (int it = 0; it < 40; ++it) {
        Tensor p = make_tensor(pv, {8});  // a fresh buffer: the same structure every time
        Tensor y = kfuse::sqrt(kfuse::sigmoid(kfuse::tanh(p * 1.5 + 0.5)));
        if (it % 10 == 0) sync.arrive_and_wait();  // start together now and then
        auto v = values(y);
        for (size_t i = 0; i < pv.size(); ++i) {
          double want = std::sqrt(1.0 / (1.0 + std::exp(-std::tanh(pv[i] * 1.5 + 0.5))));
          if (std::fabs(v[i] - want) > 1e-5) ++bad[t];
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(bad[t], 0) << "thread " << t;
}

}  // namespace
}  // namespace kfuse::test
