// The GPU renderer's tiled GEMM (strategy "gemm-tiled", jit/gpu/gpu_render.cpp): which contraction
// kernels take it and how many blocks a launch gets (render only; the CUDA flavour of every dtype
// goes through NVRTC and ptxas in GpuRender.NvrtcAndPtxasNoSpills), then on the OpenCL device
// (PoCL on CI) against an fp64 / wrapping-integer loop: tile and K-slice edges, empty extents,
// transposed and batch-broadcast operands, f32/f64/i32/i64, a bias + relu epilogue, bitwise
// repeatability, and the generic row kernel (the fallback) on the same IR.
#include <gtest/gtest.h>

#include <cstring>

#include "../../jit/gpu/gpu_render.hpp"
#include "test_gpu_kernels.hpp"
#ifdef KFUSE_HAVE_OPENCL
#include "../../jit/opencl/opencl_runtime.hpp"
#endif

using namespace kfuse;
using namespace kfuse::test::gpu;
namespace g = kfuse::detail::gpu;

namespace {

// A contraction whose A operand also depends on n: not the GEMM form, so the generic row kernel.
Kernel not_gemm_form() {
  Kernel k = gemm_kernel({DType::F32, 0, 7, false, false, {}, {}, false});
  const ExprRef a = load(0, DType::F32, iadd(imul(O(0), iconst(7)), Rv(0)));
  k.accs[0].value = bin(Op::Mul, DType::F32, bin(Op::Add, DType::F32, a, load(2, DType::F32, O(1))),
                        load(1, DType::F32, iadd(imul(Rv(0), param(1)), O(1))));
  return k;
}

}  // namespace

TEST(GpuGemm, RendersTiledOnlyForTheGemmForm) {
  const GemmSpec s{DType::F64, 1, 70, true, true, {true}, {}, true};
  for (const auto* d : {&g::cuda_dialect(), &g::opencl_dialect()}) {
    SCOPED_TRACE(d->name);
    g::Rendered r = g::render(gemm_kernel(s), *d);
    EXPECT_EQ(r.strategy, "gemm-tiled");
    ASSERT_EQ(r.stages.size(), 1u);
    EXPECT_TRUE(r.uses_f64);
    EXPECT_NE(r.source.find("kf_As["), std::string::npos);
    // a block per 64 x 64 tile per batch point: 3 * ceil(65/64) * ceil(1/64), none when empty
    const Kernel k = gemm_kernel(s);
    EXPECT_EQ(g::stage_units(r.stages[0], k, {3, 65, 1}), 6);
    EXPECT_EQ(g::stage_units(r.stages[0], k, {3, 0, 1}), 0);
    EXPECT_EQ(g::groups_for(r.stages[0], *d, 6), 6);
    // the same body as a row kernel, or a contraction outside the form: the generic kernels
    Kernel row = k;
    row.kind = ir::KernelKind::Row;
    EXPECT_NE(g::render(row, *d).strategy, "gemm-tiled");
    EXPECT_NE(g::render(not_gemm_form(), *d).strategy, "gemm-tiled");
  }
}

// Operands that are plain loads (any strides, transposed, batch-broadcast) stage from per-tile
// offsets plus kl * step (gemm_render.cpp, k_step); an operand with a fused prologue evaluates its
// expression per element; K = 0 keeps the general staging (no row to clamp into).
TEST(GpuGemm, PlainOperandsStageFromTileOffsets) {
  for (const GemmSpec& s : {GemmSpec{DType::F32, 0, 9, false, false, {}, {}, false},
                            GemmSpec{DType::F32, 1, 33, true, true, {true}, {}, true},
                            GemmSpec{DType::F64, 1, 70, true, false, {}, {true}, false}}) {
    const std::string src = g::render(gemm_kernel(s), g::opencl_dialect()).source;
    EXPECT_NE(src.find("kf_b0[kf_ao[kf_w] + kf_ak]"), std::string::npos) << src;
    EXPECT_NE(src.find("kf_b1[kf_bo[kf_w] + kf_bk]"), std::string::npos) << src;
  }
  Kernel k = gemm_kernel({DType::F32, 0, 9, false, false, {}, {}, false});
  ExprRef& prod = k.accs[0].value;
  prod = bin(Op::Mul, DType::F32, un(Op::Exp, DType::F32, prod->args[0]), prod->args[1]);
  const std::string src = g::render(k, g::opencl_dialect()).source;
  EXPECT_EQ(src.find("kf_ao["), std::string::npos) << src;
  EXPECT_NE(src.find("kf_bo["), std::string::npos) << src;
  EXPECT_EQ(g::render(gemm_kernel({DType::F32, 0, 0, false, false, {}, {}, false}), g::opencl_dialect())
                .source.find("kf_ao["),
            std::string::npos);
}

// 4-byte accumulators take 128 x 128 tiles (8 x 8 per lane in groups of 4 adjacent rows and
// columns), 64 x 64 when Options::gpu_gemm_tile says 64; 8-byte ones keep 64 x 64 either way.
TEST(GpuGemm, TilingByAccumulatorWidthAndKnob) {
  const Kernel f32 = gemm_kernel({DType::F32, 0, 9, false, false, {}, {}, true});
  const Kernel f64 = gemm_kernel({DType::F64, 0, 9, false, false, {}, {}, true});
  const g::Rendered r = g::render(f32, g::cuda_dialect()), r64 = g::render(f32, g::cuda_dialect(), {64}),
                    d = g::render(f64, g::cuda_dialect(), {64});
  EXPECT_EQ(r.stages[0].tile_m, 128);
  EXPECT_EQ(r.stages[0].block, 256);
  EXPECT_EQ(g::stage_units(r.stages[0], f32, {129, 1}), 2);
  EXPECT_NE(r.source.find("kf_o0 = kf_m0 + (kf_i / 4) * 64 + kf_ty * 4 + kf_i % 4;"), std::string::npos) << r.source;
  EXPECT_EQ(r64.stages[0].tile_m, 64);
  EXPECT_EQ(r64.stages[0].block, 64);
  EXPECT_NE(r64.source.find("kf_o0 = kf_m0 + kf_ty + kf_i * 8;"), std::string::npos) << r64.source;
  EXPECT_EQ(d.stages[0].tile_m, 64);
  EXPECT_EQ(d.stages[0].block, 256);
  // Two blocks per multiprocessor for the 128 x 128 tiling only (CUDA's __launch_bounds__).
  EXPECT_EQ(r.stages[0].min_blocks, 2);
  EXPECT_NE(r.source.find("__launch_bounds__(256, 2)"), std::string::npos);
  EXPECT_EQ(r64.stages[0].min_blocks, 1);
  EXPECT_EQ(d.stages[0].min_blocks, 1);
  EXPECT_NE(r64.source.find("__launch_bounds__(64)"), std::string::npos);
  Options o = detail::default_options();
  EXPECT_EQ(g::render_options_key(o), "");
  o.gpu_gemm_tile = 128;
  EXPECT_EQ(g::render_options_key(o), "");
  o.gpu_gemm_tile = 64;
  EXPECT_EQ(g::render_options_key(o), "gpu_gemm_tile=64");
  o.gpu_gemm_tile = 32;
  EXPECT_THROW(g::render_knobs(o), UserError);
}

#ifdef KFUSE_HAVE_OPENCL
namespace {

struct GemmRun {
  std::vector<std::vector<uint8_t>> host;  // inputs as sent, outputs as read back
};

// Random inputs: floats in [-1, 1]; integers large enough that the products wrap.
std::vector<uint8_t> gemm_input(DType t, int64_t n, uint64_t seed) {
  std::vector<uint8_t> b(static_cast<size_t>(n) * dtype_size(t));
  std::mt19937_64 rng(seed);
  for (int64_t i = 0; i < n; ++i) {
    const double u = std::uniform_real_distribution<double>(-1, 1)(rng);
    switch (t) {
      case DType::F32: reinterpret_cast<float*>(b.data())[i] = static_cast<float>(u); break;
      case DType::F64: reinterpret_cast<double*>(b.data())[i] = u; break;
      case DType::I32: reinterpret_cast<int32_t*>(b.data())[i] = static_cast<int32_t>(u * (1 << 20)); break;
      case DType::I64: reinterpret_cast<int64_t*>(b.data())[i] = static_cast<int64_t>(u * 1099511627776.0); break;
      default: break;
    }
  }
  return b;
}

GemmRun run_once(const Kernel& k, detail::CompiledKernel& ck, const std::vector<int64_t>& numel,
                 const std::vector<int64_t>& params) {
  GemmRun r;
  std::vector<std::shared_ptr<Storage>> dev;
  ir::LaunchArgs la;
  la.params = params;
  for (size_t i = 0; i < k.buffers.size(); ++i) {
    const DType t = k.buffers[i].dtype;
    r.host.push_back(k.buffers[i].output ? std::vector<uint8_t>(numel[i] * dtype_size(t), 0xAB)
                                         : gemm_input(t, numel[i], 17 + i));
    dev.push_back(detail::opencl_alloc(t, numel[i]));
    detail::opencl_copy_to_device(*dev.back(), r.host.back().data());
    la.buffers.push_back(dev.back()->data);
  }
  ck.run(la);
  for (size_t i = 0; i < k.buffers.size(); ++i)
    if (k.buffers[i].output) detail::opencl_copy_to_host(*dev[i], r.host[i].data());
  return r;
}

// Checks output C of `r` against a loop: fp64 with a K-scaled tolerance for floats, exact
// wrapping arithmetic (unsigned) for integers.
void check(const GemmSpec& s, const std::vector<int64_t>& p, const GemmRun& r) {
  const std::vector<int64_t> ext(p.begin(), p.begin() + s.nbatch);
  const int64_t M = p[s.nbatch], N = p[s.nbatch + 1], K = s.K;
  int64_t nbat = 1;
  for (auto e : ext) nbat *= e;
  const double u = s.t == DType::F32 ? 6e-8 : 1.2e-16;
  int bad = 0;
  for (int64_t bi = 0; bi < nbat && bad < 5; ++bi) {
    std::vector<int64_t> at(ext.size());
    for (int64_t rest = bi, d = s.nbatch; d-- > 0;) {
      at[d] = rest % ext[d];
      rest /= ext[d];
    }
    const int64_t ao = gemm_batch_offset(ext, at, s.a_bcast, M * K), bo = gemm_batch_offset(ext, at, s.b_bcast, K * N);
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        const int64_t ia0 = ao + (s.ta ? m : m * K), ias = s.ta ? M : 1;
        const int64_t ib0 = bo + (s.tb ? n * K : n), ibs = s.tb ? 1 : N;
        const int64_t ci = (bi * M + m) * N + n;
        double want = 0, mag = 0, got = 0;
        if (is_float(s.t)) {
          for (int64_t kk = 0; kk < K; ++kk) {
            const double x = get(r.host[0], s.t, ia0 + kk * ias) * get(r.host[1], s.t, ib0 + kk * ibs);
            want += x;
            mag += std::fabs(x);
          }
          got = get(r.host[3], s.t, ci);
        } else if (s.t == DType::I32) {
          uint32_t acc = 0;
          auto* A = reinterpret_cast<const int32_t*>(r.host[0].data());
          auto* B = reinterpret_cast<const int32_t*>(r.host[1].data());
          for (int64_t kk = 0; kk < K; ++kk)
            acc += static_cast<uint32_t>(A[ia0 + kk * ias]) * static_cast<uint32_t>(B[ib0 + kk * ibs]);
          if (s.relu_bias) {  // the bias add wraps too (near +-2^31 it flips the relu)
            acc += static_cast<uint32_t>(reinterpret_cast<const int32_t*>(r.host[2].data())[n]);
            want = std::max(static_cast<int32_t>(acc), 0);
          } else {
            want = static_cast<int32_t>(acc);
          }
          got = reinterpret_cast<const int32_t*>(r.host[3].data())[ci];
        } else {
          uint64_t acc = 0;
          auto* A = reinterpret_cast<const int64_t*>(r.host[0].data());
          auto* B = reinterpret_cast<const int64_t*>(r.host[1].data());
          for (int64_t kk = 0; kk < K; ++kk)
            acc += static_cast<uint64_t>(A[ia0 + kk * ias]) * static_cast<uint64_t>(B[ib0 + kk * ibs]);
          // compared as integers (a double would round them)
          const int64_t w = static_cast<int64_t>(acc), gi = reinterpret_cast<const int64_t*>(r.host[3].data())[ci];
          if (w != gi && bad++ < 5) ADD_FAILURE() << "[" << bi << "," << m << "," << n << "]: " << gi << " != " << w;
          continue;
        }
        if (s.relu_bias && is_float(s.t)) {
          want += get(r.host[2], s.t, n);
          want = want > 0 ? want : 0;
        }
        const double tol = is_float(s.t) ? 4.0 * (K + 2) * u * (mag + std::fabs(want) + 1.0) : 0;
        if (!(std::fabs(got - want) <= tol) && bad++ < 5)
          ADD_FAILURE() << "[" << bi << "," << m << "," << n << "]: got " << got << ", want " << want;
      }
  }
}

std::shared_ptr<detail::Backend> opencl_backend() { return detail::find_backend("opencl"); }

// Compiles `s` (the tiled path must take it) under `o`, runs every param set twice and checks
// both runs; returns the outputs of the first runs.
std::vector<std::vector<uint8_t>> run_spec(detail::Backend& be, const GemmSpec& s,
                                           const std::vector<std::vector<int64_t>>& param_sets,
                                           const Options& o = detail::default_options()) {
  const Kernel k = gemm_kernel(s);
  SCOPED_TRACE(k.name + " gpu_gemm_tile " + std::to_string(o.gpu_gemm_tile));
  std::vector<std::vector<uint8_t>> outs;
  auto res = be.compile(k, o);
  if (!res.kernel && res.declined.find("no fp64") != std::string::npos) return outs;  // a device without doubles
  EXPECT_TRUE(res.kernel) << res.declined;
  if (!res.kernel) return outs;
  EXPECT_NE(res.kernel->source.find("gemm-tiled"), std::string::npos);
  for (const auto& p : param_sets) {
    SCOPED_TRACE("params " + ::testing::PrintToString(p));
    const auto numel = gemm_numel(s, p);
    const GemmRun r1 = run_once(k, *res.kernel, numel, p), r2 = run_once(k, *res.kernel, numel, p);
    check(s, p, r1);
    EXPECT_EQ(r1.host[3], r2.host[3]) << "two runs differ";
    outs.push_back(r1.host[3]);
  }
  return outs;
}

}  // namespace

TEST(GpuGemm, OpenCLMatchesLoops) {
  auto be = opencl_backend();
  if (!be) GTEST_SKIP() << "no OpenCL device: " << detail::opencl_describe();
  // f32, K = 17 (two full slices of 8 and a tail of 1; one of 16 and a tail under the 64 x 64
  // tiling), bias + relu; the edges of both tilings (63/64/65: a lane's second group of rows,
  // 127/128/129: the 128 x 128 tile), single rows/columns, empty M or N, and random M, N in
  // 1..260 (params: no recompiles). Both tilings sum k ascending in one accumulator: the same bits.
  std::vector<std::vector<int64_t>> sizes = {{1, 1},     {64, 64}, {65, 63}, {1, 67},    {67, 1},
                                             {0, 5},     {5, 0},   {67, 67}, {128, 128}, {129, 127},
                                             {127, 129}, {1, 130}, {130, 1}, {200, 257}};
  std::mt19937 rng(7);
  for (int i = 0; i < 3; ++i)
    sizes.push_back({1 + static_cast<int64_t>(rng() % 260), 1 + static_cast<int64_t>(rng() % 260)});
  Options o64 = detail::default_options();
  o64.gpu_gemm_tile = 64;
  const GemmSpec f32{DType::F32, 0, 17, false, false, {}, {}, true};
  EXPECT_EQ(run_spec(*be, f32, sizes), run_spec(*be, f32, sizes, o64)) << "the tilings differ";
  // f64, K = 64 (whole slices), both operands transposed, two batch dims, A broadcast along the
  // first and B along the second; an empty batch
  run_spec(*be, {DType::F64, 2, 64, true, true, {true, false}, {false, true}, false}, {{2, 3, 13, 66}, {0, 2, 3, 3}});
  // i32 products wrap; K = 33 (slices and a tail), A transposed, B broadcast over the batch
  run_spec(*be, {DType::I32, 1, 33, true, false, {}, {true}, true}, {{3, 29, 41}, {2, 131, 70}});
  run_spec(*be, {DType::I32, 1, 33, true, false, {}, {true}, true}, {{2, 131, 70}}, o64);
  // i64 products wrap; K = 1, B transposed
  run_spec(*be, {DType::I64, 0, 1, false, true, {}, {}, false}, {{37, 65}});
}

TEST(GpuGemm, OpenCLEmptyReduce) {
  auto be = opencl_backend();
  if (!be) GTEST_SKIP() << "no OpenCL device: " << detail::opencl_describe();
  run_spec(*be, {DType::F32, 0, 0, false, false, {}, {}, true}, {{3, 70}});  // relu(0 + bias)
}

// The generic row kernel on the same IR (the tiled path's fallback) gives the same results
// within the tolerance, and so does a contraction outside the GEMM form.
TEST(GpuGemm, OpenCLGenericKernelAgrees) {
  auto be = opencl_backend();
  if (!be) GTEST_SKIP() << "no OpenCL device: " << detail::opencl_describe();
  const GemmSpec s{DType::F32, 1, 21, false, true, {}, {true}, true};
  Kernel row = gemm_kernel(s);
  row.kind = ir::KernelKind::Row;
  auto res = be->compile(row);
  ASSERT_TRUE(res.kernel) << res.declined;
  EXPECT_EQ(res.kernel->source.find("gemm-tiled"), std::string::npos);
  const std::vector<int64_t> p = {2, 9, 70};
  check(s, p, run_once(row, *res.kernel, gemm_numel(s, p), p));

  const Kernel other = not_gemm_form();
  auto res2 = be->compile(other);
  ASSERT_TRUE(res2.kernel) << res2.declined;
  const GemmRun r = run_once(other, *res2.kernel, {5 * 7, 7 * 6, 6, 5 * 6}, {5, 6});
  for (int64_t m = 0; m < 5; ++m)
    for (int64_t n = 0; n < 6; ++n) {
      double want = 0;
      for (int64_t kk = 0; kk < 7; ++kk)
        want += (get(r.host[0], DType::F32, m * 7 + kk) + get(r.host[2], DType::F32, n)) *
                get(r.host[1], DType::F32, kk * 6 + n);
      EXPECT_NEAR(get(r.host[3], DType::F32, m * 6 + n), want, 1e-5) << m << "," << n;
    }
}
#endif
