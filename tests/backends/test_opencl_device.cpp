// Tensors on Device::opencl(): moved there explicitly with to(), computed by the OpenCL backend
// (PoCL on CPU-only machines) as one launch per fused group, and read back with to_vector().
#include <kfuse/explain.hpp>

#include "test_util.hpp"

namespace kfuse::test {
namespace {

TEST(OpenCLDevice, LogSoftmaxRunsOnTheDeviceAsOneKernel) {
  if (!device_usable(Device::opencl())) GTEST_SKIP() << "no OpenCL platform on this machine";
  Tensor x = make_tensor(random_values(4096 * 10, 1, -4, 4), {4096, 10});
  Tensor xd = x.to(Device::opencl());
  EXPECT_EQ(xd.device(), Device::opencl());
  Tensor y = log_softmax(xd, -1);
  EXPECT_EQ(y.device(), Device::opencl());
  EXPECT_EQ(explain(y).kernel_count(), 1u);
  EXPECT_TRUE(all_close(values(y), reference_values(log_softmax(x, -1)), 2e-5, 2e-6));
  Tensor back = y.to(Device::cpu());
  EXPECT_EQ(back.device(), Device::cpu());
  EXPECT_TRUE(all_close(values(back), values(y), 0, 0));
}

TEST(OpenCLDevice, ChainsReductionsAndViews) {
  if (!device_usable(Device::opencl())) GTEST_SKIP() << "no OpenCL platform on this machine";
  Tensor a = make_tensor(random_values(37 * 19, 2), {37, 19}), b = make_tensor(random_values(19, 3), {19});
  Tensor ad = a.to(Device::opencl()), bd = b.to(Device::opencl());
  std::vector<Tensor> dev = {relu(ad * bd + 1.0), sum(ad * ad, 0), transpose(ad) * 2.0, layer_norm(ad, {19}, bd)};
  std::vector<Tensor> host = {relu(a * b + 1.0), sum(a * a, 0), transpose(a) * 2.0, layer_norm(a, {19}, b)};
  eval(dev);
  auto ref = reference_values(host);
  for (size_t i = 0; i < dev.size(); ++i) EXPECT_TRUE(all_close(values(dev[i]), ref[i], 1e-4, 1e-5)) << i;
  // The oracle reads device leaves too.
  EXPECT_TRUE(all_close(reference_values(dev[0]), ref[0], 1e-12, 0));
}

// The same bits as the CPU backends: a * b + c is not contracted (FP_CONTRACT OFF in the
// prelude: PoCL on x86 does not contract even without it, GPU compilers do), fma() rounds once.
// With x = 1 + 2^-12, x * x - (1 + 2^-11) is 0 in two roundings and 2^-24 in one.
TEST(OpenCLDevice, MultiplyAddIsNotContractedAndFmaRoundsOnce) {
  if (!device_usable(Device::opencl())) GTEST_SKIP() << "no OpenCL platform on this machine";
  Tensor x = Tensor::from_vector<float>(std::vector<float>(37, 1.0f + 0x1p-12f), {37}).to(Device::opencl());
  Tensor c = Tensor::from_vector<float>(std::vector<float>(37, -(1.0f + 0x1p-11f)), {37}).to(Device::opencl());
  for (float v : (x * x + c).to_vector<float>()) ASSERT_EQ(v, 0.0f);
  for (float v : fma(x, x, c).to_vector<float>()) ASSERT_EQ(v, 0x1p-24f);
}

TEST(OpenCLDevice, MixingDevicesIsARecordTimeError) {
  if (!device_usable(Device::opencl())) GTEST_SKIP() << "no OpenCL platform on this machine";
  Tensor a = make_tensor(random_values(6, 4), {2, 3});
  Tensor ad = a.to(Device::opencl());
  try {
    (void)(a + ad);
    FAIL() << "expected a UserError";
  } catch (const UserError& e) {
    EXPECT_EQ(std::string(e.what()),
              "add: operands live on different devices (cpu and opencl:0); move them to one device with .to(device) "
              "first");
  }
  EXPECT_THROW((void)ad.data(), UserError);  // host pointer of a device tensor
}

}  // namespace
}  // namespace kfuse::test
