// The vectorised pointwise form (gpu_render.cpp, VecForm): which kernels get it, that on PoCL it
// gives bitwise the results of the scalar form at every size around the vector width, that
// accesses which could be misaligned keep the scalar form, and that the CUDA flavour compiles
// with NVRTC to 16-byte vector loads and stores.
#include <gtest/gtest.h>

#include <cstring>
#include <regex>

#include "../../jit/gpu/gpu_render.hpp"
#include "ir/widen_narrow.hpp"
#include "test_gpu_kernels.hpp"
#ifdef KFUSE_HAVE_OPENCL
#include "../../jit/opencl/opencl_runtime.hpp"
#endif
#ifdef KFUSE_HAVE_CUDA
#include "../../jit/cuda/cuda_runtime.hpp"
#endif

using namespace kfuse;
using namespace kfuse::test::gpu;
namespace g = kfuse::detail::gpu;

namespace {

// y = relu(a * b + c) - s over n elements of dtype t (narrow dtypes computed in f32), where s is
// a broadcast scalar (index 0: stays a scalar load). `inner` is the index of a, b, c and y:
// O(0) for the 1-D kernel, O(1) for its scalar twin over the domain [1, n].
Kernel relu_fma(DType t, bool twin, int64_t a_offset = 0, bool mask_c = false) {
  Kernel k;
  k.name = std::string("vec_relu_fma_") + dtype_name(t) + (twin ? "_twin" : "");
  k.kind = ir::KernelKind::Pointwise;
  k.buffers = {{"a", t, false}, {"b", t, false}, {"c", t, false}, {"s", t, false}, {"y", t, true}};
  k.params = {{"outer0", 0}};
  k.outer = twin ? std::vector<ExprRef>{iconst(1), param(0)} : std::vector<ExprRef>{param(0)};
  const ExprRef i = twin ? O(1) : O(0);
  ExprRef a = load(0, t, a_offset ? iadd(i, iconst(a_offset)) : i), b = load(1, t, i);
  ExprRef c = mask_c ? load(2, t, i, bin(Op::Gt, DType::Bool, i, iconst(2))) : load(2, t, i);
  ExprRef v = bin(Op::Sub, t, un(Op::Relu, t, bin(Op::Add, t, bin(Op::Mul, t, a, b), c)), load(3, t, iconst(0)));
  k.phases = {Phase{false, {}, {{4, i, v}}}};
  ir::widen_narrow(k);
  ir::verify_kernel(k);
  return k;
}

}  // namespace

TEST(GpuVector, FormOnlyForContiguousAccesses) {
  auto strat = [](const Kernel& k, const g::Dialect& d) { return g::render(k, d).strategy; };
  for (const auto* d : {&g::cuda_dialect(), &g::opencl_dialect()}) {
    SCOPED_TRACE(d->name);
    EXPECT_EQ(strat(relu_fma(DType::F32, false), *d), "pointwise-vec4");
    EXPECT_EQ(strat(relu_fma(DType::F64, false), *d), "pointwise-vec2");
    EXPECT_EQ(strat(relu_fma(DType::F16, false), *d), "pointwise-vec8");
    EXPECT_EQ(strat(relu_fma(DType::F32, true), *d), "pointwise");            // 2-D domain
    EXPECT_EQ(strat(relu_fma(DType::F32, false, 1), *d), "pointwise");        // offset: misaligned
    EXPECT_EQ(strat(relu_fma(DType::F32, false, 0, true), *d), "pointwise");  // masked load
    EXPECT_EQ(strat(pointwise_views().k, *d), "pointwise");                   // strides, broadcast, masks
    EXPECT_EQ(strat(pointwise_int().k, *d), "pointwise-vec2");                // widest buffer i64
  }
  const std::string cl = g::render(relu_fma(DType::F32, false), g::opencl_dialect()).source;
  EXPECT_NE(cl.find("vload4((size_t)kf_u, kf_b0)"), std::string::npos) << cl;
  EXPECT_NE(cl.find("vstore4("), std::string::npos) << cl;
  EXPECT_EQ(cl.find("vload4((size_t)kf_u, kf_b3)"), std::string::npos) << "the broadcast scalar is a scalar load";
  const std::string h = g::render(relu_fma(DType::F16, false), g::opencl_dialect()).source;
  EXPECT_NE(h.find("vload_half8("), std::string::npos);
  EXPECT_NE(h.find("vstore_half8_rte("), std::string::npos);
  g::Rendered r = g::render(relu_fma(DType::F32, false), g::opencl_dialect());
  ASSERT_EQ(r.stages.size(), 1u);
  EXPECT_EQ(g::stage_units(r.stages[0], relu_fma(DType::F32, false), {4097}), 1025);  // 1024 vectors + tail
}

#ifdef KFUSE_HAVE_OPENCL
namespace {

// Runs kernel k on the OpenCL device over n elements of random inputs; returns y's bytes.
std::vector<uint8_t> run_opencl(detail::Backend& be, const Kernel& k, int64_t n, std::string* source) {
  auto res = be.compile(k);
  EXPECT_TRUE(res.kernel) << res.declined;
  if (!res.kernel) return {};
  if (source) *source = res.kernel->source;
  ir::LaunchArgs a;
  a.params = {n};
  std::vector<std::shared_ptr<Storage>> bufs;
  for (size_t i = 0; i < k.buffers.size(); ++i) {
    const DType t = k.buffers[i].dtype;
    const int64_t len = i == 3 ? 1 : n + 1;  // +1: the offset variant reads a[n]
    bufs.push_back(detail::opencl_alloc(t, len));
    std::vector<uint8_t> host = random_buffer(t, len, 77 + i, false);
    detail::opencl_copy_to_device(*bufs.back(), host.data());
    a.buffers.push_back(bufs.back()->data);
  }
  res.kernel->run(a);
  std::vector<uint8_t> y(static_cast<size_t>(n + 1) * dtype_size(k.buffers[4].dtype));
  detail::opencl_copy_to_host(*bufs[4], y.data());
  y.resize(static_cast<size_t>(n) * dtype_size(k.buffers[4].dtype));
  return y;
}

}  // namespace

TEST(OpenCLVector, BitwiseEqualToScalarForm) {
  auto be = detail::find_backend("opencl");
  if (!be) GTEST_SKIP() << "no OpenCL device: " << detail::opencl_describe();
  for (DType t : {DType::F32, DType::F64, DType::F16}) {
    const Kernel vec = relu_fma(t, false), twin = relu_fma(t, true);
    for (int64_t n : {0, 1, 3, 4, 5, 1023, 4097}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " n=" + std::to_string(n));
      std::string vsrc, ssrc;
      const auto got = run_opencl(*be, vec, n, &vsrc), want = run_opencl(*be, twin, n, &ssrc);
      EXPECT_NE(vsrc.find("pointwise-vec"), std::string::npos);
      EXPECT_EQ(ssrc.find("pointwise-vec"), std::string::npos);
      ASSERT_EQ(got.size(), want.size());
      EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size()), 0);
    }
  }
}

// An offset view (a[i + 1]) could put a vector access off its 16-byte boundary: scalar form, and
// still the right values (checked against the twin computed on the same inputs).
TEST(OpenCLVector, OffsetViewTakesScalarForm) {
  auto be = detail::find_backend("opencl");
  if (!be) GTEST_SKIP() << "no OpenCL device: " << detail::opencl_describe();
  const Kernel off = relu_fma(DType::F32, false, 1);
  for (int64_t n : {1, 5, 4097}) {
    std::string src;
    const auto got = run_opencl(*be, off, n, &src);
    EXPECT_EQ(src.find("pointwise-vec"), std::string::npos);
    EXPECT_EQ(src.find("vload4("), std::string::npos);
    // the same inputs through the host: y = relu(a[i+1] * b[i] + c[i]) - s
    const auto a = random_buffer(DType::F32, n + 1, 77, false), b = random_buffer(DType::F32, n + 1, 78, false),
               c = random_buffer(DType::F32, n + 1, 79, false), s = random_buffer(DType::F32, 1, 80, false);
    for (int64_t i = 0; i < n; ++i) {
      const double want = std::max(0.0, get(a, DType::F32, i + 1) * get(b, DType::F32, i) + get(c, DType::F32, i)) -
                          get(s, DType::F32, 0);
      ASSERT_NEAR(get(got, DType::F32, i), want, 1e-5 * (1 + std::fabs(want))) << "n=" << n << " i=" << i;
    }
  }
}
#endif

#ifdef KFUSE_HAVE_CUDA
// The CUDA flavour compiles, and its accesses are single 16-byte vector instructions.
TEST(GpuVector, NvrtcEmitsVectorAccesses) {
  const std::pair<DType, const char*> cases[] = {{DType::F32, R"(ld\.global(\.nc)?\.v4\.f32)"},
                                                 {DType::F64, R"(ld\.global(\.nc)?\.v2\.f64)"},
                                                 {DType::F16, R"(ld\.global(\.nc)?\.v4\.(u32|b32))"}};
  for (const auto& [t, pat] : cases) {
    SCOPED_TRACE(dtype_name(t));
    const Kernel k = relu_fma(t, false);
    const g::Rendered r = g::render(k, g::cuda_dialect());
    detail::NvrtcOutput out;
    try {
      out = detail::nvrtc_compile(r.source, k.name, "sm_80");
    } catch (const BackendError& e) { FAIL() << e.what() << "\n" << e.log(); }
    EXPECT_TRUE(std::regex_search(out.ptx, std::regex(pat))) << out.ptx;
    EXPECT_TRUE(std::regex_search(out.ptx, std::regex(R"(st\.global\.v[24]\.)"))) << out.ptx;
  }
}
#endif
