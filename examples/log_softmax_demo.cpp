// Quick-start demo: LogSoftmax over a [4096, 10] tensor, checked against the fp64 reference.
#include <kfuse/kfuse.hpp>
#include <kfuse/reference.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>

int main() {
  using namespace kfuse;
  Tensor x = randn({4096, 10}, /*seed=*/42);
  Tensor y = log_softmax(x, -1);  // recorded, not computed

  auto t0 = std::chrono::steady_clock::now();
  y.eval();
  auto t1 = std::chrono::steady_clock::now();

  std::vector<float> got = y.to_vector<float>();
  std::vector<double> ref = reference_values(y);
  double max_err = 0;
  for (size_t i = 0; i < got.size(); ++i) max_err = std::fmax(max_err, std::fabs(got[i] - ref[i]));
  bool ok = max_err < 1e-5;
  std::printf("log_softmax [4096, 10]: first eval %.3f ms, max |error| vs fp64 reference %.2e: %s\n",
              std::chrono::duration<double, std::milli>(t1 - t0).count(), max_err, ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}
