// kfuse_profiler_cost: what the profiler costs per evaluation of an 8-float 3-op chain (record +
// eval, one kernel launch), the smallest unit it records (docs/profiling.md "Overhead").
//   kfuse_profiler_cost            medians of alternating batches with the profiler off and on
//   kfuse_profiler_cost --evals N  N evaluations, profiler off (for instruction counts: the off
//                                  cost is the difference per evaluation between two builds)
#include <kfuse/kfuse.hpp>
#include <kfuse/profile.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<float> x(8, 0.5f);
  kfuse::Tensor y;
  auto run = [&] {
    kfuse::Tensor t = kfuse::Tensor::borrow(x.data(), kfuse::Shape{8});
    y = kfuse::exp(t) * 2.0f + 1.0f;
    y.eval();
  };
  if (argc == 3 && std::strcmp(argv[1], "--evals") == 0) {
    for (int i = 0, n = std::atoi(argv[2]); i < n; ++i) run();
    return 0;
  }
  if (argc != 1) {
    std::fprintf(stderr, "usage: kfuse_profiler_cost [--evals N]\n");
    return 2;
  }
  for (int i = 0; i < 1000; ++i) run();  // compiled, planned, pools warm
  (void)kfuse::machine();                // the model is read (or measured) outside the batches
  constexpr int kBatch = 500, kBatches = 41;
  std::vector<double> off, on;
  for (int b = 0; b < kBatches; ++b) {  // alternating, so that both see the same load
    double t0 = now_s();
    for (int i = 0; i < kBatch; ++i) run();
    off.push_back((now_s() - t0) / kBatch);
    kfuse::Profiler p;
    t0 = now_s();
    for (int i = 0; i < kBatch; ++i) run();
    on.push_back((now_s() - t0) / kBatch);
    p.stop();
  }
  std::printf("per record + eval (1 launch): profiler off %.2f us, on %.2f us (medians of %d batches of %d)\n",
              median(off) * 1e6, median(on) * 1e6, kBatches, kBatch);
  return 0;
}
