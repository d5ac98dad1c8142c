// Quick-start demo: LogSoftmax over a [4096, 10] tensor. Prints the evaluation plan (one fused
// kernel, and how many an op-by-op library would launch), checks the result against the fp64
// reference evaluator, and times the first (compiling) and later (cached) evaluations.
#include <kfuse/kfuse.hpp>
#include <kfuse/reference.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

int main() {
  using namespace kfuse;
  using clock = std::chrono::steady_clock;
  const int64_t rows = 4096, cols = 10;
  std::vector<float> host(rows * cols);
  std::mt19937 gen(42);
  std::normal_distribution<float> dist(0.f, 2.f);
  for (auto& v : host) v = dist(gen);
  Tensor x = Tensor::from_vector(host, {rows, cols});

  Tensor y = log_softmax(x, -1);  // recorded, not computed
  std::printf("%s\n", explain(y).text().c_str());

  auto t0 = clock::now();
  y.eval();
  double first_ms = std::chrono::duration<double, std::milli>(clock::now() - t0).count();

  std::vector<float> got = y.to_vector<float>();
  std::vector<double> ref = reference_values(y);
  double max_err = 0;
  for (size_t i = 0; i < got.size(); ++i) max_err = std::fmax(max_err, std::fabs(got[i] - ref[i]));
  bool ok = max_err < 1e-5;

  // Later evaluations of the same expression on new data reuse the compiled kernel.
  std::vector<double> times;
  for (int rep = 0; rep < 50; ++rep) {
    Tensor xi = Tensor::from_vector(host, {rows, cols});
    auto s = clock::now();
    log_softmax(xi, -1).eval();
    times.push_back(std::chrono::duration<double, std::micro>(clock::now() - s).count());
  }
  std::sort(times.begin(), times.end());
  Counters c = counters();
  std::printf(
      "log_softmax [%lld, %lld]: first eval %.3f ms (includes compiling), cached eval median %.1f us "
      "(min %.1f us); kernels compiled %llu, launched %llu\n",
      static_cast<long long>(rows), static_cast<long long>(cols), first_ms, times[times.size() / 2], times[0],
      static_cast<unsigned long long>(c.kernels_compiled), static_cast<unsigned long long>(c.kernels_launched));
  std::printf("max |error| vs fp64 reference: %.2e: %s\n", max_err, ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}
