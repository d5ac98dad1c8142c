// Tensors on a GPU device: moved there explicitly with to(), computed by the device's backend as
// one launch per fused group, and read back with to_vector(). Each test runs on OpenCL (PoCL on
// CPU-only machines, CI) and on CUDA (a machine with an NVIDIA GPU), skipped where the device is
// not there.
#include <kfuse/explain.hpp>

#include "../random_dag.hpp"
#include "test_util.hpp"

namespace kfuse::test {
namespace {

class GpuDevice : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (!device_usable(dev())) GTEST_SKIP() << "no " << GetParam() << " device on this machine";
  }
  Device dev() const { return GetParam() == "cuda" ? Device::cuda() : Device::opencl(); }
};

TEST_P(GpuDevice, LogSoftmaxRunsOnTheDeviceAsOneKernel) {
  Tensor x = make_tensor(random_values(4096 * 10, 1, -4, 4), {4096, 10});
  Tensor xd = x.to(dev());
  EXPECT_EQ(xd.device(), dev());
  Tensor y = log_softmax(xd, -1);
  EXPECT_EQ(y.device(), dev());
  EXPECT_EQ(explain(y).kernel_count(), 1u);
  EXPECT_TRUE(all_close(values(y), reference_values(log_softmax(x, -1)), 2e-5, 2e-6));
  Tensor back = y.to(Device::cpu());
  EXPECT_EQ(back.device(), Device::cpu());
  EXPECT_TRUE(all_close(values(back), values(y), 0, 0));
}

TEST_P(GpuDevice, ChainsReductionsAndViews) {
  Tensor a = make_tensor(random_values(37 * 19, 2), {37, 19}), b = make_tensor(random_values(19, 3), {19});
  Tensor ad = a.to(dev()), bd = b.to(dev());
  std::vector<Tensor> dev = {relu(ad * bd + 1.0), sum(ad * ad, 0), transpose(ad) * 2.0, layer_norm(ad, {19}, bd)};
  std::vector<Tensor> host = {relu(a * b + 1.0), sum(a * a, 0), transpose(a) * 2.0, layer_norm(a, {19}, b)};
  eval(dev);
  auto ref = reference_values(host);
  for (size_t i = 0; i < dev.size(); ++i) EXPECT_TRUE(all_close(values(dev[i]), ref[i], 1e-4, 1e-5)) << i;
  // The oracle reads device leaves too.
  EXPECT_TRUE(all_close(reference_values(dev[0]), ref[0], 1e-12, 0));
  // Parts of one shape stacked along an outer axis: one store per part per point (lower_group.cpp).
  std::vector<Tensor> dparts, hparts;
  for (int p = 0; p < 17; ++p) {
    hparts.push_back(relu(reshape(a, {37, 1, 19}) * static_cast<double>(p) - 0.5));
    dparts.push_back(relu(reshape(ad, {37, 1, 19}) * static_cast<double>(p) - 0.5));
  }
  EXPECT_TRUE(all_close(values(concat(dparts, 1)), reference_values(concat(hparts, 1)), 1e-6, 1e-6));
}

// The same bits as the CPU backends: a * b + c is not contracted (FP_CONTRACT OFF in the
// prelude: PoCL on x86 does not contract even without it, GPU compilers do), fma() rounds once.
// With x = 1 + 2^-12, x * x - (1 + 2^-11) is 0 in two roundings and 2^-24 in one.
TEST_P(GpuDevice, MultiplyAddIsNotContractedAndFmaRoundsOnce) {
  Tensor x = Tensor::from_vector<float>(std::vector<float>(37, 1.0f + 0x1p-12f), {37}).to(dev());
  Tensor c = Tensor::from_vector<float>(std::vector<float>(37, -(1.0f + 0x1p-11f)), {37}).to(dev());
  for (float v : (x * x + c).to_vector<float>()) ASSERT_EQ(v, 0.0f);
  for (float v : fma(x, x, c).to_vector<float>()) ASSERT_EQ(v, 0x1p-24f);
}

TEST_P(GpuDevice, MixingDevicesIsARecordTimeError) {
  Tensor a = make_tensor(random_values(6, 4), {2, 3});
  Tensor ad = a.to(dev());
  try {
    (void)(a + ad);
    FAIL() << "expected a UserError";
  } catch (const UserError& e) {
    EXPECT_EQ(std::string(e.what()), "add: operands live on different devices (cpu and " + dev().str() +
                                         "); move them to one device with .to(device) first");
  }
  EXPECT_THROW((void)ad.data(), UserError);  // host pointer of a device tensor
}

// Every row form through the executor: one element, under a warp (31), a warp's multiples and
// their neighbours (the row cache and its guarded last element), above 1024 (a block per row) and
// row-split (70000); the column forms (serial, two-stage, two-stage-stores) at odd sizes.
TEST_P(GpuDevice, RowAndColumnFormsMatchTheReference) {
  for (int64_t C : {1, 31, 32, 33, 512, 1000, 1024, 1025, 70000}) {
    SCOPED_TRACE("C=" + std::to_string(C));
    const int64_t R = C > 4096 ? 3 : 37;
    Tensor x = make_tensor(random_values(R * C, 40 + C, -4, 4), {R, C}), w = make_tensor(random_values(C, 41), {C}),
           b = make_tensor(random_values(C, 42), {C});
    Tensor xd = x.to(dev()), wd = w.to(dev()), bd = b.to(dev());
    std::vector<Tensor> d = {softmax(xd, -1), log_softmax(xd, -1), layer_norm(xd, {C}, wd, bd)};
    std::vector<Tensor> h = {softmax(x, -1), log_softmax(x, -1), layer_norm(x, {C}, w, b)};
    eval(d);
    auto ref = reference_values(h);
    for (size_t i = 0; i < d.size(); ++i) EXPECT_TRUE(all_close(values(d[i]), ref[i], 1e-4, 1e-5)) << i;
  }
  for (int64_t R : {1, 7, 257, 1000, 4099}) {
    SCOPED_TRACE("R=" + std::to_string(R));
    Tensor x = make_tensor(random_values(R * 67, 50 + R), {R, 67});
    Tensor xd = x.to(dev());
    std::vector<Tensor> d = {sum(xd, 0), xd - mean(xd, 0, true), max(xd, {0})};
    std::vector<Tensor> h = {sum(x, 0), x - mean(x, 0, true), max(x, {0})};
    eval(d);
    auto ref = reference_values(h);
    for (size_t i = 0; i < d.size(); ++i) EXPECT_TRUE(all_close(values(d[i]), ref[i], 1e-4, 1e-4)) << i;
  }
}

// matmul through the executor on the device: the tiled GEMM with its fused epilogue, at sizes that
// are not tile multiples, a transposed operand, a batch broadcast, and K not a slice multiple.
TEST_P(GpuDevice, MatmulWithEpilogueMatchesTheReference) {
  struct Shape3 {
    int64_t m, k, n;
  };
  for (Shape3 s : {Shape3{1, 1, 1}, Shape3{65, 17, 63}, Shape3{130, 200, 129}, Shape3{64, 64, 64}}) {
    SCOPED_TRACE(std::to_string(s.m) + "x" + std::to_string(s.k) + "x" + std::to_string(s.n));
    Tensor a = make_tensor(random_values(s.m * s.k, 60), {s.m, s.k}),
           bt = make_tensor(random_values(s.n * s.k, 61), {s.n, s.k}),
           bias = make_tensor(random_values(s.n, 62), {s.n});
    Tensor ad = a.to(dev()), btd = bt.to(dev()), biasd = bias.to(dev());
    Tensor y = gelu(matmul(ad, transpose(btd)) + biasd);
    EXPECT_EQ(explain(y).kernel_count(), 1u) << explain(y).text();
    const double tol = 1e-5 * static_cast<double>(s.k);  // K-scaled (README "Matmul")
    EXPECT_TRUE(all_close(values(y), reference_values(gelu(matmul(a, transpose(bt)) + bias)), tol, tol));
  }
  Tensor a = make_tensor(random_values(3 * 33 * 19, 63), {3, 33, 19}),
         b = make_tensor(random_values(19 * 40, 64), {19, 40});
  Tensor y = matmul(a.to(dev()), b.to(dev()));
  EXPECT_TRUE(all_close(values(y), reference_values(matmul(a, b)), 2e-4, 2e-4));
}

// The random-DAG property on the device: the seeds of the CPU differential suite, every leaf moved
// to the device, against the fp64 reference (which reads device leaves).
// (Two tests of 30 seeds: 60 in one took 28-32 s on PoCL on a 2-vCPU EPYC, past the suite's 30 s budget.)
void random_dags_match(const Device& dev, uint64_t first, uint64_t last) {
  for (uint64_t seed = first; seed < last; ++seed) {
    Dag d = random_dag(seed, {DType::F32}, dev);
    try {
      eval(d.roots);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "seed " << seed << ": eval threw: " << e.what();
      continue;
    }
    auto ref = reference_values(d.roots);
    for (size_t i = 0; i < d.roots.size(); ++i) {
      EXPECT_EQ(d.roots[i].device(), dev) << "seed " << seed << " root " << i;
      ASSERT_TRUE(all_close(values(d.roots[i]), ref[i], 1e-4, 1e-5)) << "seed " << seed << " root " << i;
    }
  }
}
TEST_P(GpuDevice, RandomDagsMatchTheReference) { random_dags_match(dev(), 1000, 1030); }
TEST_P(GpuDevice, MoreRandomDagsMatchTheReference) { random_dags_match(dev(), 1030, 1060); }

// Narrow storage on the device: u8/i8/f16/bf16 loads, f16/bf16 stores and the rounding of casts
// give the host's bits (both compute in f32 and round to nearest even where the IR says; NaN,
// infinities, f16 overflow and subnormals, ties), at odd sizes, size 1 and empty; softmax, a row
// sum and layer_norm of f16/bf16 within the storage type's tolerance of the fp64 reference.
TEST_P(GpuDevice, NarrowDtypesRoundAsOnTheHost) {
  const double specials[] = {kNaN,  kInf, -kInf,       65520,           1e5,        3e-5,
                             -6e-8, -0.0, 1 + 0x1p-11, 1 + 3 * 0x1p-11, 1 + 0x1p-8, 1 + 3 * 0x1p-8};
  for (const Shape& s : std::vector<Shape>{{1}, {0, 3}, {7}, {5, 19}, {3, 1031}}) {
    SCOPED_TRACE(shape_str(s));
    const auto n = static_cast<size_t>(count_of(s));
    std::vector<double> xv = random_values(n, 70, -3, 3);
    for (size_t i = 0; i < n && i < std::size(specials); ++i) xv[i * 7 % n] = specials[i];
    const Tensor h = make_tensor(xv, s, DType::F16), b = make_tensor(xv, s, DType::BF16),
                 y = make_tensor(random_values(n, 71, 0.5, 2), s),
                 u = make_tensor(random_ints(n, 72, 0, 255), s, DType::U8),
                 i8 = make_tensor(random_ints(n, 73, -128, 127), s, DType::I8);
    // (its own names: the host tensors above are passed to it, and so are their device copies)
    auto ops = [](const Tensor& hh, const Tensor& bb, const Tensor& yy, const Tensor& uu, const Tensor& ii) {
      return std::vector<Tensor>{hh + hh * 0.5,
                                 relu(bb) * 3.0,
                                 hh.cast(DType::F32) * yy,
                                 bb.cast(DType::F32) + yy,
                                 uu.cast(DType::F32) * 0.5 + yy,
                                 ii.cast(DType::F32) - yy,
                                 (yy * 3.0).cast(DType::F16),
                                 (yy - 1.0).cast(DType::BF16),
                                 hh.cast(DType::BF16),
                                 bb.cast(DType::F16),
                                 uu.cast(DType::F16) + hh};
    };
    std::vector<Tensor> host = ops(h, b, y, u, i8),
                        on = ops(h.to(dev()), b.to(dev()), y.to(dev()), u.to(dev()), i8.to(dev()));
    eval(on);
    for (size_t k = 0; k < host.size(); ++k) {
      EXPECT_EQ(on[k].dtype(), host[k].dtype());
      EXPECT_TRUE(same_bits(values(on[k]), values(host[k]))) << "op " << k;
    }
    if (s.size() == 2 && n > 0) {
      const Tensor hr = make_tensor(random_values(n, 74, -4, 4), s, DType::F16), hrd = hr.to(dev());
      const Tensor br = make_tensor(random_values(n, 75, -4, 4), s, DType::BF16), brd = br.to(dev());
      EXPECT_TRUE(all_close(values(softmax(hrd, -1)), reference_values(softmax(hr, -1)), 2e-3, 2e-3));
      EXPECT_TRUE(all_close(values(sum(hrd, 1)), reference_values(sum(hr, 1)), 2e-2, 2e-2));
      EXPECT_TRUE(all_close(values(layer_norm(brd, {s[1]})), reference_values(layer_norm(br, {s[1]})), 3e-2, 3e-2));
    }
  }
}

// The random-DAG property with inputs of every narrow dtype on the device (the seeds of the host's
// LowPrecisionOn suite), within the storage types' tolerance of the fp64 reference.
TEST_P(GpuDevice, RandomDagsWithNarrowInputsMatchTheReference) {
  for (uint64_t seed = 2000; seed < 2006; ++seed) {
    Dag d = random_dag(seed, {DType::F16, DType::BF16, DType::U8, DType::I8, DType::F32}, dev());
    eval(d.roots);
    auto ref = reference_values(d.roots);
    for (size_t i = 0; i < d.roots.size(); ++i)
      ASSERT_TRUE(all_close(values(d.roots[i]), ref[i], 6e-2, 6e-2))
          << "seed " << seed << " root " << i << " " << dtype_name(d.roots[i].dtype());
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, GpuDevice, ::testing::Values("opencl", "cuda"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace kfuse::test
