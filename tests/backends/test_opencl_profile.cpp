// The profiler on the OpenCL backend (PoCL's CPU device in CI): launches timed with the queue's
// profiling events, counts equal to the plan's.
#include <gtest/gtest.h>

#include <kfuse/kfuse.hpp>
#include <kfuse/profile.hpp>

#include "unit/profile_test_util.hpp"

namespace kfuse {
namespace {

bool have_opencl() {
  try {
    Tensor::from_vector<float>({1.f}, {1}).to(Device::opencl());
    return true;
  } catch (const std::exception&) { return false; }
}

TEST(OpenCLProfile, CountsEqualThePlanAndTimesComeFromEvents) {
  if (!have_opencl()) GTEST_SKIP() << "no OpenCL platform on this machine";
  check_counts_equal_plan(Device::opencl());
}

TEST(OpenCLProfile, DeviceRoofsMeasuredWithKfuseKernels) {
  if (!have_opencl()) GTEST_SKIP() << "no OpenCL platform on this machine";
  MachineModel m = fake_machine();
  set_machine(m);
  const MachineModel& mm = machine({false, true, {Device::opencl()}});
  const DeviceRoofs* d = mm.device_roofs(Device::opencl());
  ASSERT_NE(d, nullptr);
  EXPECT_GT(d->read_gbps, 0);
  EXPECT_GT(d->fma_f32_gflops, 0);
  EXPECT_EQ(mm.cpu, "test CPU");  // the injected CPU roofs stay
  // A launch on the device now has a bound from the device's roofs.
  Tensor x = Tensor::from_vector<float>(std::vector<float>(4096, 1.f), {4096}).to(Device::opencl());
  (x * 2.0f).eval();
  Profile p = profile([&] { (x * 2.0f).eval(); });
  ASSERT_EQ(p.launches.size(), 1u);
  EXPECT_EQ(p.launches[0].device, "opencl:0");
  EXPECT_EQ(p.launches[0].backend, "opencl");
  EXPECT_GT(p.launches[0].bound_seconds, 0);
  set_machine(m);
}

}  // namespace
}  // namespace kfuse
