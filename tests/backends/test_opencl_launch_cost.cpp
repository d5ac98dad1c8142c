// Host time of the GPU launch path on the OpenCL device (PoCL here): a cached plan's evaluation of
// a small element-wise kernel, many times, no readback, nothing subtracted; printed (the numbers
// of docs/gpu-backends.md, "Launch path") and bounded loosely, since the machine is shared.
#include <chrono>
#include <cstdio>

#include "../../jit/opencl/opencl_runtime.hpp"
#include "test_util.hpp"

namespace kfuse::test {
namespace {

template <typename F>
double us_per_call(int n, F&& f) {
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) f();
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / n;
}

TEST(OpenCLLaunchCost, CachedPlanHostTimePerKernel) {
  const Device dev = Device::opencl();
  if (!device_usable(dev)) GTEST_SKIP() << "no OpenCL device: " << detail::opencl_describe();
  const int64_t n = 1024;
  Tensor a = make_tensor(random_values(n, 1), {n}).to(dev), b = make_tensor(random_values(n, 2), {n}).to(dev),
         c = make_tensor(random_values(n, 3), {n}).to(dev);
  auto eval_once = [&] { relu(a * b + c).eval(); };
  for (int i = 0; i < 20; ++i) eval_once();  // plans, compiles, fills the caches
  synchronize(dev);
  const int iters = 2000;
  const uint64_t l0 = detail::opencl_launch_count();
  const double us = us_per_call(iters, eval_once);
  const double launches = static_cast<double>(detail::opencl_launch_count() - l0) / iters;
  synchronize(dev);
  std::printf("[ launch  ] cached relu(a*b+c) [1024] on %s: %.2f us host time per eval, %.2f launches per eval\n",
              detail::opencl_describe().c_str(), us, launches);
  EXPECT_EQ(launches, 1.0);
  EXPECT_LT(us, 2000.0);  // loose: a shared 2-core machine; the printed number is the measurement
}

}  // namespace
}  // namespace kfuse::test
