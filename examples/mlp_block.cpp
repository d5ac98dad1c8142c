// An MLP block as users write it: y = layer_norm(gelu(x @ W + b)). The matmul is opaque (its own
// kernel); bias add, GELU and layer_norm fuse into ONE row kernel after it. Prints the plan and
// checks the result against the fp64 reference. Usage: kfuse_mlp_block [batch] [in] [hidden]
#include <kfuse/kfuse.hpp>
#include <kfuse/reference.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

int main(int argc, char** argv) {
  using namespace kfuse;
  const int64_t batch = argc > 1 ? std::atoll(argv[1]) : 64;
  const int64_t in = argc > 2 ? std::atoll(argv[2]) : 128;
  const int64_t hidden = argc > 3 ? std::atoll(argv[3]) : 256;

  // Host data, as a model's weights and activations would be.
  std::mt19937 gen(7);
  std::normal_distribution<float> n01(0.f, 1.f);
  auto host = [&](int64_t count, float scale) {
    std::vector<float> v(static_cast<size_t>(count));
    for (auto& e : v) e = n01(gen) * scale;
    return v;
  };
  Tensor x = Tensor::from_vector(host(batch * in, 1.f), {batch, in});
  Tensor w = Tensor::from_vector(host(in * hidden, 1.f / std::sqrt(static_cast<float>(in))), {in, hidden});
  Tensor b = Tensor::from_vector(host(hidden, 0.1f), {hidden});
  Tensor gamma = Tensor::from_vector(host(hidden, 0.1f), {hidden}) + 1.0;
  Tensor beta = Tensor::from_vector(host(hidden, 0.1f), {hidden});

  Tensor y = layer_norm(gelu(matmul(x, w) + b, /*approximate_tanh=*/true), {hidden}, gamma, beta);
  Explanation plan = explain(y);
  std::printf("%s\n", plan.text().c_str());

  std::vector<float> got = y.to_vector<float>();
  std::vector<double> ref = reference_values(y);
  double max_err = 0;
  for (size_t i = 0; i < got.size(); ++i) max_err = std::fmax(max_err, std::fabs(got[i] - ref[i]));
  bool ok = max_err < 1e-3;
  std::printf("mlp block [%lld x %lld] -> [%lld]: %zu kernels (an op-by-op library: %lld), max |error| %.2e: %s\n",
              static_cast<long long>(batch), static_cast<long long>(in), static_cast<long long>(hidden),
              plan.kernel_count(), static_cast<long long>(plan.unfused_kernels), max_err, ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}
