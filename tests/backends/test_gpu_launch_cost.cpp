// Host time of the GPU launch path (OpenCL: PoCL in CI; CUDA on a GPU machine): a cached plan's
// evaluation of a small element-wise kernel, many times, no readback, nothing subtracted; printed
// (the numbers of docs/gpu-backends.md, "Launch path") and bounded loosely, since the machines are
// shared. The loop never waits, so the time is the host's as long as the device keeps up.
#include <chrono>
#include <cstdio>

#include "test_util.hpp"

namespace kfuse::test {
namespace {

template <typename F>
double us_per_call(int n, F&& f) {
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) f();
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / n;
}

void cached_plan_host_time(Device dev) {
  const int64_t n = 1024;
  Tensor a = make_tensor(random_values(n, 1), {n}).to(dev), b = make_tensor(random_values(n, 2), {n}).to(dev),
         c = make_tensor(random_values(n, 3), {n}).to(dev);
  auto eval_once = [&] { relu(a * b + c).eval(); };
  for (int i = 0; i < 20; ++i) eval_once();  // plans, compiles, fills the caches
  synchronize(dev);
  const int iters = 2000;
  const uint64_t l0 = counters().kernels_launched;
  const double us = us_per_call(iters, eval_once);
  const double launches = static_cast<double>(counters().kernels_launched - l0) / iters;
  synchronize(dev);
  std::printf(
      "[ launch  ] cached relu(a*b+c) [1024] on %s: %.2f us host time per eval (3 ops recorded), %.2f "
      "launches per eval\n",
      dev.str().c_str(), us, launches);
  EXPECT_EQ(launches, 1.0);
  EXPECT_LT(us, 2000.0);  // loose: shared machines; the printed number is the measurement
}

TEST(GpuLaunchCost, OpenCLCachedPlanHostTimePerKernel) {
  if (!device_usable(Device::opencl())) GTEST_SKIP() << "no OpenCL device on this machine";
  cached_plan_host_time(Device::opencl());
}

TEST(GpuLaunchCost, CudaCachedPlanHostTimePerKernel) {
  if (!device_usable(Device::cuda())) GTEST_SKIP() << "no CUDA device on this machine";
  cached_plan_host_time(Device::cuda());
}

}  // namespace
}  // namespace kfuse::test
