// Placeholder: the concurrency suite replaces this file. Records and evaluates graphs from several
// threads at once so that ThreadSanitizer sees the interning context and the evaluator shared.
#include <gtest/gtest.h>

#include <kfuse/kfuse.hpp>
#include <thread>
#include <vector>

TEST(Concurrent, RecordAndEvalFromThreads) {
  std::vector<std::thread> threads;
  std::vector<int> ok(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([t, &ok] {
      kfuse::Tensor x = kfuse::Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
      kfuse::Tensor y = kfuse::log_softmax(x, -1);
      auto v = y.to_vector<float>();
      ok[t] = v.size() == 6 && v[2] > v[1] && v[1] > v[0];
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) EXPECT_TRUE(ok[t]) << "thread " << t;
}
