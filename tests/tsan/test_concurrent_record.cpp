// Recording and evaluating from 4 threads at once. Identical expressions must intern to the
// identical node whichever thread records them first, unrelated expressions must not contend
// incorrectly, nodes created and released concurrently must not corrupt the intern table, and
// every thread must get correct values. Built into kfuse_tsan_tests (under ThreadSanitizer in
// `./dev.sh test`) and, through tests/unit/test_concurrent_record.cpp, into kfuse_tests.
#include <barrier>
#include <cmath>
#include <thread>

#include "test_util.hpp"

namespace kfuse::test {
namespace {

constexpr int kThreads = 4;
constexpr int kIters = 60;

std::vector<double> softmax_rows(const std::vector<double>& v, int64_t n) {
  std::vector<double> out(v.size());
  for (size_t r = 0; r * n < v.size(); ++r) {
    double m = -kInf, s = 0;
    for (int64_t k = 0; k < n; ++k) m = std::max(m, v[r * n + k]);
    for (int64_t k = 0; k < n; ++k) s += std::exp(v[r * n + k] - m);
    for (int64_t k = 0; k < n; ++k) out[r * n + k] = std::exp(v[r * n + k] - m) / s;
  }
  return out;
}

TEST(ConcurrentRecord, IdenticalExpressionsInternToOneNodeAcrossThreads) {
  auto xv = stored_values(random_values(15, 141), DType::F32);
  Tensor x = make_tensor(xv, {3, 5});
  auto shared_expr = [&] { return softmax(exp(x) * 0.5 + 1.0, -1); };
  Tensor held = shared_expr();  // kept alive by the main thread: every thread must find it
  std::vector<double> z(xv.size());
  for (size_t i = 0; i < z.size(); ++i) z[i] = std::exp(xv[i]) * 0.5 + 1.0;
  const auto expected_shared = softmax_rows(z, 5);

  std::barrier sync(kThreads);
  std::vector<std::vector<const Node*>> shared_nodes(kThreads), fresh_nodes(kThreads);
  std::vector<std::vector<double>> shared_vals(kThreads), own_vals(kThreads), own_expected(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      // a private input and expression per thread
      auto pv = stored_values(random_values(7, 150 + static_cast<uint64_t>(t)), DType::F32);
      Tensor p = make_tensor(pv, {7});
      for (int it = 0; it < kIters; ++it) {
        // threads build the shared expression's parts in different orders
        if ((it + t) % 3 == 0) (void)exp(x);
        if ((it + t) % 3 == 1) (void)(exp(x) * 0.5);
        Tensor s = shared_expr();
        shared_nodes[t].push_back(s.node().get());
        // an expression nobody holds yet: all threads record it, then compare after a barrier
        Tensor fresh = kfuse::cos(x) * static_cast<double>(it + 2);
        fresh_nodes[t].push_back(fresh.node().get());
        // churn: temporaries created and released while other threads look nodes up
        for (int k = 0; k < 4; ++k) (void)kfuse::tanh(x + static_cast<double>(k * kThreads + t) + 0.5);
        Tensor own = sum(kfuse::abs(p) * static_cast<double>(t + 1), 0);
        if (it % 20 == 0) {
          shared_vals[t] = values(s);
          own_vals[t] = values(own);
        }
        sync.arrive_and_wait();  // every thread still holds `fresh` here
      }
      double e = 0;
      for (double v : pv) e += std::fabs(v) * (t + 1);
      own_expected[t] = {e};
    });
  }
  for (auto& th : threads) th.join();

  for (int t = 0; t < kThreads; ++t) {
    SCOPED_TRACE(::testing::Message() << "thread " << t);
    ASSERT_EQ(shared_nodes[t].size(), static_cast<size_t>(kIters));
    for (const Node* n : shared_nodes[t]) EXPECT_EQ(n, held.node().get());
    for (int it = 0; it < kIters; ++it) EXPECT_EQ(fresh_nodes[t][it], fresh_nodes[0][it]) << "iteration " << it;
    EXPECT_TRUE(all_close(shared_vals[t], expected_shared, 1e-5, 1e-6));
    EXPECT_TRUE(all_close(own_vals[t], own_expected[t], 1e-5, 1e-6));
  }
  EXPECT_TRUE(all_close(values(held), expected_shared, 1e-5, 1e-6));
}

TEST(ConcurrentRecord, DifferentExpressionsFromEachThreadEvaluateCorrectly) {
  std::vector<std::vector<double>> got(kThreads), want(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      auto v = stored_values(random_values(24, 160 + static_cast<uint64_t>(t)), DType::F32);
      Tensor x = make_tensor(v, {4, 6});
      // each thread a different op chain, all through views and reductions
      Tensor y =
          t % 2 ? max(x.transpose() * static_cast<double>(t), 1) : sum(kfuse::square(x) + static_cast<double>(t), 1);
      got[t] = values(y);
      for (int r = 0; r < (t % 2 ? 6 : 4); ++r) {
        double acc = t % 2 ? -kInf : 0;
        for (int k = 0; k < (t % 2 ? 4 : 6); ++k) {
          if (t % 2) acc = std::max(acc, v[k * 6 + r] * t);
          else acc += v[r * 6 + k] * v[r * 6 + k] + t;
        }
        want[t].push_back(acc);
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_TRUE(all_close(got[t], want[t], 1e-5, 1e-6)) << "thread " << t;
}

}  // namespace
}  // namespace kfuse::test
