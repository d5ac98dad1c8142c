// Row kernels by row length (gpu_plan.cpp, choose()): warp (CUDA) or block per row up to
// kRowSplitMin elements, then "row-split": several blocks per row, the partials of each folding
// phase in scratch, combined in a fixed order. Checked on PoCL against fp64 loops.
#include <gtest/gtest.h>

#include <cmath>

#include "../../jit/gpu/gpu_render.hpp"
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

// The sum of a row as its only output (one folding phase, a once-phase store).
GpuCase row_sum(int64_t C) {
  Kernel k = row_kernel("row_sum_" + std::to_string(C), DType::F32, C, 0);
  k.accs = {{AccKind::Sum, DType::F32, row_x(DType::F32, C)}};
  k.phases = {Phase{true, {0}, {}}, Phase{false, {}, {{1, O(0), acc(0, DType::F32)}}}};
  GpuCase c = finish_row(std::move(k), C, 0);
  c.numel = [C](const std::vector<int64_t>& p) { return std::vector<int64_t>{p[0] * C, p[0]}; };
  return c;
}

}  // namespace

TEST(GpuRowSplit, StrategyByRowLength) {
  for (const auto* d : {&g::cuda_dialect(), &g::opencl_dialect()}) {
    SCOPED_TRACE(d->name);
    const g::Rendered sm = g::render(softmax(DType::F32, 70000, false).k, *d);
    EXPECT_EQ(sm.strategy, "row-split");
    EXPECT_EQ(sm.stages.size(), 3u);  // max partials, sum partials, combine + store
    EXPECT_EQ(sm.split, 18);          // chunks of at most 4096 per row
    EXPECT_EQ(sm.scratch_slots, 2);   // one slot column per folding phase's accumulator
    for (const auto& s : sm.stages) EXPECT_EQ(s.units_per_outer, 18);
    EXPECT_EQ(g::render(layer_norm(DType::F32, 40000).k, *d).stages.size(), 3u);
    EXPECT_EQ(g::render(row_sum(32768).k, *d).stages.size(), 2u);
    EXPECT_EQ(g::render(row_sum(32767).k, *d).strategy, "row-block");
    EXPECT_EQ(g::render(softmax(DType::F32, 1000, false).k, *d).strategy, d->warp_shuffle ? "row-warp" : "row-block");
  }
}

#ifdef KFUSE_HAVE_OPENCL
// softmax, log_softmax and layer_norm rows of 1, 31, 1000 and 70000 (row-split) elements on PoCL
// against fp64 loops over the same f32 inputs; the launch count is the strategy's.
TEST(OpenCLRowSplit, MatchesFp64Reference) {
  auto be = detail::find_backend("opencl");
  if (!be) GTEST_SKIP() << "no OpenCL device: " << detail::opencl_describe();
  const int64_t rows = 3;
  for (int64_t C : {1, 31, 1000, 70000}) {
    for (int form = 0; form < 4; ++form) {
      const GpuCase c = form == 0   ? softmax(DType::F32, C, false)
                        : form == 1 ? softmax(DType::F32, C, true)
                        : form == 2 ? layer_norm(DType::F32, C)
                                    : row_sum(C);
      SCOPED_TRACE(c.k.name);
      auto res = be->compile(c.k);
      ASSERT_TRUE(res.kernel) << res.declined;
      const auto numel = c.numel({rows});
      std::vector<std::vector<uint8_t>> host;
      std::vector<std::shared_ptr<Storage>> dev;
      ir::LaunchArgs a;
      a.params = {rows};
      for (size_t i = 0; i < c.k.buffers.size(); ++i) {
        host.push_back(random_buffer(DType::F32, numel[i], 31 + i, false));
        dev.push_back(detail::opencl_alloc(DType::F32, numel[i]));
        detail::opencl_copy_to_device(*dev.back(), host.back().data());
        a.buffers.push_back(dev.back()->data);
      }
      const uint64_t n0 = detail::opencl_launch_count();
      res.kernel->run(a);
      EXPECT_EQ(detail::opencl_launch_count() - n0, g::render(c.k, g::opencl_dialect()).stages.size());
      const size_t out = c.k.buffers.size() - 1;
      std::vector<uint8_t> got(host[out].size());
      detail::opencl_copy_to_host(*dev[out], got.data());
      auto x = [&](int64_t r, int64_t j) { return get(host[0], DType::F32, r * C + j); };
      for (int64_t r = 0; r < rows; ++r) {
        double m = -INFINITY, s = 0, mean = 0, var = 0;
        for (int64_t j = 0; j < C; ++j) m = std::max(m, x(r, j));
        for (int64_t j = 0; j < C; ++j) s += std::exp(x(r, j) - m), mean += x(r, j);
        mean /= static_cast<double>(C);
        for (int64_t j = 0; j < C; ++j) var += (x(r, j) - mean) * (x(r, j) - mean);
        var /= static_cast<double>(C);
        if (form == 3) {
          EXPECT_NEAR(get(got, DType::F32, r), mean * static_cast<double>(C), 1e-5 * (1 + std::sqrt(double(C))));
          continue;
        }
        for (int64_t j = 0; j < C; ++j) {
          const double want = form == 0   ? std::exp(x(r, j) - m) / s
                              : form == 1 ? x(r, j) - m - std::log(s)
                                          : (x(r, j) - mean) / std::sqrt(var + 1e-5) * get(host[1], DType::F32, j) +
                                                get(host[2], DType::F32, j);
          const double have = get(got, DType::F32, r * C + j);
          ASSERT_NEAR(have, want, 2e-6 + 2e-5 * std::fabs(want)) << "row " << r << " col " << j;
        }
      }
    }
  }
}
#endif

#ifdef KFUSE_HAVE_CUDA
TEST(GpuRowSplit, NvrtcCompiles) {
  for (const GpuCase& c : {softmax(DType::F32, 70000, true), layer_norm(DType::F64, 50000)}) {
    const g::Rendered r = g::render(c.k, g::cuda_dialect());
    try {
      const auto out = detail::nvrtc_compile(r.source, c.k.name, "sm_90");
      EXPECT_FALSE(out.ptx.empty());
    } catch (const BackendError& e) { ADD_FAILURE() << e.what() << "\n" << e.log(); }
  }
}
#endif
