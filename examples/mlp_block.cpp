// An MLP block as users write it: y = layer_norm(gelu(x @ W + b)), at a realistic size by default
// (batch 512, 1024 -> 4096). The matmul, bias and GELU are one contraction kernel (the GEMM with
// its epilogue); layer_norm is a row kernel after it. Prints the plan and the time of an
// evaluation beside it, and checks the last rows (edge tiles) against the fp64 reference.
// --profile=PREFIX runs the evaluations under kfuse::Profiler, prints its table and writes
// PREFIX.txt/.json/.trace.json/.svg (the roofline chart).
// Usage: kfuse_mlp_block [--profile=PREFIX] [batch] [in] [hidden] [repetitions]
#include <kfuse/kfuse.hpp>
#include <kfuse/profile.hpp>
#include <kfuse/reference.hpp>

#include <memory>
#include <string>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <thread>
#include <vector>

int main(int argc, char** argv) {
  using namespace kfuse;
  std::string profile_prefix;
  std::vector<char*> pos;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--profile=", 0) == 0) profile_prefix = a.substr(10);
    else pos.push_back(argv[i]);
  }
  argc = static_cast<int>(pos.size());
  argv = pos.data();
  const int64_t batch = argc > 1 ? std::atoll(argv[1]) : 512;
  const int64_t in = argc > 2 ? std::atoll(argv[2]) : 1024;
  const int64_t hidden = argc > 3 ? std::atoll(argv[3]) : 4096;
  const int reps = argc > 4 ? std::max(1, std::atoi(argv[4])) : 5;

  // Host data, as a model's weights and activations would be.
  std::mt19937 gen(7);
  std::normal_distribution<float> n01(0.f, 1.f);
  auto host = [&](int64_t count, float scale) {
    std::vector<float> v(static_cast<size_t>(count));
    for (auto& e : v) e = n01(gen) * scale;
    return v;
  };
  const std::vector<float> x_host = host(batch * in, 1.f);
  Tensor x = Tensor::from_vector(x_host, {batch, in});
  Tensor w = Tensor::from_vector(host(in * hidden, 1.f / std::sqrt(static_cast<float>(in))), {in, hidden});
  Tensor b = Tensor::from_vector(host(hidden, 0.1f), {hidden});
  Tensor gamma = Tensor::from_vector(host(hidden, 0.1f), {hidden}) + 1.0;
  Tensor beta = Tensor::from_vector(host(hidden, 0.1f), {hidden});
  auto block = [&](const Tensor& input) {
    return layer_norm(gelu(matmul(input, w) + b, /*approximate_tanh=*/true), {hidden}, gamma, beta);
  };

  Tensor y = block(x);
  Explanation plan = explain(y);
  std::printf("%s\n", plan.text().c_str());

  // The first evaluation plans and compiles; later ones, recorded again on a new input tensor
  // as a model's forward pass would be (the same expression on the same tensor is the same,
  // already evaluated node), find the plan and the kernels in the cache.
  using clk = std::chrono::steady_clock;
  std::unique_ptr<Profiler> profiler;
  if (!profile_prefix.empty()) profiler = std::make_unique<Profiler>();  // the machine model is read first
  auto t0 = clk::now();
  y.eval();
  const double first = std::chrono::duration<double>(clk::now() - t0).count();
  std::vector<Tensor> inputs;
  for (int r = 0; r < reps; ++r) inputs.push_back(Tensor::from_vector(x_host, {batch, in}));
  std::vector<double> times;
  for (int r = 0; r < reps; ++r) {
    t0 = clk::now();
    block(inputs[static_cast<size_t>(r)]).eval();
    times.push_back(std::chrono::duration<double>(clk::now() - t0).count());
  }
  if (profiler) {
    Profile p = profiler->stop();
    p.write(profile_prefix);
    std::printf("%s(%s.txt, .json, .trace.json, .svg)\n\n", p.table().c_str(), profile_prefix.c_str());
  }
  std::sort(times.begin(), times.end());
  const int threads =
      options().num_threads > 0 ? options().num_threads : static_cast<int>(std::thread::hardware_concurrency());
  const double med = times[times.size() / 2];
  const double gflop = 2.0 * static_cast<double>(batch * in) * static_cast<double>(hidden) * 1e-9;
  std::printf(
      "time: first eval %.2f ms (plan + compile), then median of %d evals %.2f ms (min %.2f) = %.1f GFLOP/s "
      "on %d thread(s)\n",
      first * 1e3, reps, med * 1e3, times.front() * 1e3, gflop / med, threads);

  // Rows are independent: the last rows of y against the fp64 reference of the same block on
  // those rows of x (the interpreter's reference of the whole batch would take minutes).
  const int64_t nrows = std::min<int64_t>(batch, 4);
  std::vector<double> ref = reference_values(block(x.slice({Range{batch - nrows}, Range::all()})));
  std::vector<float> got = y.to_vector<float>();
  const size_t off = static_cast<size_t>((batch - nrows) * hidden);
  double max_err = 0;
  for (size_t i = 0; i < ref.size(); ++i) max_err = std::fmax(max_err, std::fabs(got[off + i] - ref[i]));
  bool ok = max_err < 1e-3;
  std::printf(
      "mlp block [%lld x %lld] -> [%lld]: %zu kernels (an op-by-op library: %lld), max |error| %.2e on the "
      "last %lld rows: %s\n",
      static_cast<long long>(batch), static_cast<long long>(in), static_cast<long long>(hidden), plan.kernel_count(),
      static_cast<long long>(plan.unfused_kernels), max_err, static_cast<long long>(nrows), ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}
