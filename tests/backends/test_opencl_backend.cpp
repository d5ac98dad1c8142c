// The OpenCL backend on whatever OpenCL device is present (PoCL on CI): every kernel of
// test_gpu_kernels.hpp against the reference interpreter, at outer sizes 0, 1, odd and larger.
#include <gtest/gtest.h>

#include <cstdlib>

#include "test_gpu_kernels.hpp"
#ifdef KFUSE_HAVE_OPENCL
#include "../../jit/opencl/opencl_runtime.hpp"
#endif

using namespace kfuse;
using namespace kfuse::test::gpu;

#ifdef KFUSE_HAVE_OPENCL
namespace {

std::shared_ptr<detail::Backend> opencl_or_skip() {
  auto be = detail::find_backend("opencl");
  return be;
}

DeviceOps opencl_ops() {
  return {[](DType t, int64_t n) { return detail::opencl_alloc(t, n); }, detail::opencl_copy_to_device,
          detail::opencl_copy_to_host, detail::opencl_launch_count};
}

}  // namespace

TEST(OpenCLBackend, Differential) {
  auto be = opencl_or_skip();
  if (!be) GTEST_SKIP() << "no OpenCL device: " << detail::opencl_describe();
  EXPECT_EQ(be->device(), Device::opencl(0));
  for (const GpuCase& c : all_cases()) run_differential(c, *be, opencl_ops());
}

TEST(OpenCLBackend, RowKernelsAreOneLaunch) {
  auto be = opencl_or_skip();
  if (!be) GTEST_SKIP() << "no OpenCL device: " << detail::opencl_describe();
  expect_one_launch(*be, {softmax(DType::F32, 1000, false), softmax(DType::F32, 7, true), layer_norm(DType::F32, 300)},
                    opencl_ops(), [] { detail::opencl_finish(); });
}

TEST(OpenCLBackend, StorageRoundTrip) {
  if (!detail::opencl_available()) GTEST_SKIP() << "no OpenCL device: " << detail::opencl_describe();
  std::vector<double> v = {1.5, -2, 3};
  auto s = detail::opencl_alloc(DType::F64, 3);
  EXPECT_EQ(s->device, Device::opencl(0));
  detail::opencl_copy_to_device(*s, v.data());
  std::vector<double> back(3);
  detail::opencl_copy_to_host(*s, back.data());
  EXPECT_EQ(back, v);
  auto empty = detail::opencl_alloc(DType::F32, 0);  // zero-size tensors are valid
  detail::opencl_copy_to_host(*empty, nullptr);
}
#else
TEST(OpenCLBackend, NotBuilt) { GTEST_SKIP() << "OpenCL backend not built in (KFUSE_WITH_OPENCL=OFF)"; }
#endif
