// The CUDA backend's launches. Without a driver or device (CI, this project's dev machines) these
// tests skip with the reason; the library must still load and report the reason cleanly.
#include <gtest/gtest.h>

#include "test_gpu_kernels.hpp"
#ifdef KFUSE_HAVE_CUDA
#include "../../jit/cuda/cuda_runtime.hpp"
#endif

using namespace kfuse;
using namespace kfuse::test::gpu;

#ifdef KFUSE_HAVE_CUDA
namespace {
DeviceOps cuda_ops() {
  return {[](DType t, int64_t n) { return detail::cuda_alloc(t, n); }, detail::cuda_copy_to_device,
          detail::cuda_copy_to_host, detail::cuda_launch_count};
}
}  // namespace

TEST(CudaBackend, UnavailableIsReportedNotFatal) {
  if (detail::cuda_available()) GTEST_SKIP() << "a CUDA device is present: " << detail::cuda_describe();
  EXPECT_EQ(detail::find_backend("cuda"), nullptr);
  EXPECT_NE(detail::cuda_describe().find("CUDA"), std::string::npos) << detail::cuda_describe();
  EXPECT_THROW(detail::cuda_alloc(DType::F32, 4), BackendUnavailable);
}

TEST(CudaBackend, Differential) {
  if (!detail::cuda_available()) GTEST_SKIP() << "no CUDA device: " << detail::cuda_describe();
  auto be = detail::find_backend("cuda");
  ASSERT_TRUE(be);
  EXPECT_EQ(be->device(), Device::cuda(0));
  for (const GpuCase& c : all_cases()) run_differential(c, *be, cuda_ops());
}

TEST(CudaBackend, RowKernelsAreOneLaunch) {
  if (!detail::cuda_available()) GTEST_SKIP() << "no CUDA device: " << detail::cuda_describe();
  auto be = detail::find_backend("cuda");
  ASSERT_TRUE(be);
  expect_one_launch(*be,
                    {softmax(DType::F32, 1000, false), softmax(DType::F32, 3000, true), layer_norm(DType::F32, 300)},
                    cuda_ops(), [] { detail::cuda_synchronize(); });
}
#else
TEST(CudaBackend, NotBuilt) { GTEST_SKIP() << "CUDA backend not built in (KFUSE_WITH_CUDA=OFF)"; }
#endif
