// Shared by the model examples (transformer_block.cpp, recommender.cpp): the kernels of a plan
// printed, and the time of its first evaluation and of the ones after it.
#pragma once
#include <kfuse/kfuse.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <thread>
#include <vector>

namespace kfuse_example {

/// Prints the kernels explain() plans for `y`: name, kind, first output.
inline void print_plan(const kfuse::Tensor& y) {
  const kfuse::Explanation plan = kfuse::explain(y);
  std::printf("plan: %zu kernels (an op-by-op library: %lld)\n", plan.kernel_count(),
              static_cast<long long>(plan.unfused_kernels));
  for (const kfuse::KernelReport& k : plan.kernels)
    std::printf("  %-34s %-12s -> %s\n", k.name.c_str(), k.kind.c_str(), k.outputs.empty() ? "" : k.outputs[0].c_str());
}

struct Timing {
  double first = 0;           ///< seconds: the first evaluation (plans and compiles)
  std::vector<double> times;  ///< seconds, sorted: the evaluations after it
  int threads = 1;
  double median() const { return times[times.size() / 2]; }
};

/// Evaluates `y`, then records and evaluates record(r) for r = 0..reps-1 (reps >= 1). The first
/// evaluation plans and compiles; later ones, on new input tensors each (a model's next batch,
/// made by the caller beforehand), find the plan and the kernels in the cache.
inline Timing time_evals(kfuse::Tensor y, int reps, const std::function<kfuse::Tensor(int)>& record) {
  using clk = std::chrono::steady_clock;
  auto seconds = [](clk::time_point t0) { return std::chrono::duration<double>(clk::now() - t0).count(); };
  Timing t;
  auto t0 = clk::now();
  y.eval();
  t.first = seconds(t0);
  for (int r = 0; r < reps; ++r) {
    t0 = clk::now();
    record(r).eval();
    t.times.push_back(seconds(t0));
  }
  std::sort(t.times.begin(), t.times.end());
  const int n = kfuse::options().num_threads;
  t.threads = n > 0 ? n : static_cast<int>(std::thread::hardware_concurrency());
  return t;
}

}  // namespace kfuse_example
