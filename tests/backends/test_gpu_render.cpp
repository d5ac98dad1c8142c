// The GPU renderer: every construct renders for both dialects, and the CUDA source compiles with
// NVRTC for sm_80 and sm_90 and passes ptxas with no register spills.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <regex>

#include "../../jit/gpu/gpu_render.hpp"
#include "test_gpu_kernels.hpp"
#include "ir/widen_narrow.hpp"
#ifdef KFUSE_HAVE_CUDA
#include "../../jit/cuda/cuda_runtime.hpp"
#endif

using namespace kfuse;
using namespace kfuse::test::gpu;
namespace g = kfuse::detail::gpu;

TEST(GpuRender, StrategiesAndLaunchCounts) {
  auto strat = [](const GpuCase& c, const g::Dialect& d) { return g::render(c.k, d).strategy; };
  EXPECT_EQ(strat(pointwise_views(), g::cuda_dialect()), "pointwise");
  EXPECT_EQ(strat(softmax(DType::F32, 1000, false), g::cuda_dialect()), "row-warp");
  EXPECT_EQ(strat(softmax(DType::F32, 3000, true), g::cuda_dialect()), "row-block");
  EXPECT_EQ(strat(softmax(DType::F32, 1000, false), g::opencl_dialect()), "row-block");
  EXPECT_EQ(strat(column_mean_max(DType::F32, 5), g::opencl_dialect()), "serial");
  EXPECT_EQ(strat(column_mean_max(DType::F32, 1000), g::opencl_dialect()), "two-stage-thread");
  EXPECT_EQ(strat(column_centre(DType::F32, 7), g::cuda_dialect()), "serial");
  EXPECT_EQ(strat(column_centre(DType::F32, 1000), g::cuda_dialect()), "two-stage-stores");
  EXPECT_EQ(strat(global_sum_argmax(DType::F32, 10007), g::cuda_dialect()), "two-stage-block");
  for (const auto* d : {&g::cuda_dialect(), &g::opencl_dialect()}) {
    for (const GpuCase& c : all_cases()) {
      g::Rendered r = g::render(c.k, *d);
      EXPECT_EQ(static_cast<int>(r.stages.size()), c.launches) << c.k.name << " " << d->name;
      EXPECT_EQ(r.source.find("{{"), std::string::npos);
    }
    // Softmax, log-softmax and layer-norm rows are ONE launch.
    EXPECT_EQ(g::render(layer_norm(DType::F32, 300).k, *d).stages.size(), 1u);
    EXPECT_EQ(g::render(softmax(DType::F32, 7, true).k, *d).stages.size(), 1u);
  }
}

TEST(GpuRender, DialectTableShowsInSource) {
  const GpuCase c = softmax(DType::F32, 1000, false);
  const std::string cu = g::render(c.k, g::cuda_dialect()).source;
  const std::string cl = g::render(c.k, g::opencl_dialect()).source;
  EXPECT_NE(cu.find("__shfl_xor_sync"), std::string::npos);
  EXPECT_NE(cu.find("expf("), std::string::npos);
  EXPECT_NE(cl.find("barrier(CLK_LOCAL_MEM_FENCE)"), std::string::npos);
  EXPECT_NE(cl.find("__global const float* KF_RESTRICT kf_b0"), std::string::npos);
  EXPECT_EQ(cl.find("expf("), std::string::npos);
}

TEST(GpuRender, NvrtcAndPtxasNoSpills) {
#ifndef KFUSE_HAVE_CUDA
  GTEST_SKIP() << "CUDA backend not built in (KFUSE_WITH_CUDA=OFF): NVRTC render test skipped";
#else
  const std::string ptxas = "/usr/local/cuda/bin/ptxas";
  const bool have_ptxas = std::ifstream(ptxas).good();
  if (!have_ptxas) std::fprintf(stderr, "note: %s not found; checking NVRTC only\n", ptxas.c_str());
  const std::string dir = ::testing::TempDir();
  double total_ms = 0;
  int compiles = 0;
  std::vector<GpuCase> cases = all_cases();
  // the tiled GEMM of the dtypes all_cases() does not run (register micro-tiles must not spill,
  // beyond the bound below)
  for (DType t : {DType::F64, DType::I32}) cases.push_back(gemm_case({t, 1, 40, true, false, {}, {true}, true}, {}));
  cases.push_back(gemm_case({DType::F32, 0, 4096, false, false, {}, {}, false}, {}));  // the bench's matmul
  {  // loads, stores and rounding casts of the narrow dtypes (f16 through the PTX conversions)
    GpuCase c;
    Kernel& k = c.k;
    k.name = "pw_narrow";
    k.kind = ir::KernelKind::Pointwise;
    k.params = {{"outer0", 0}};
    k.outer = {param(0)};
    Phase ph;
    const DType ts[] = {DType::F16, DType::BF16, DType::U8, DType::I8};
    for (DType t : ts) k.buffers.push_back({"in" + std::to_string(k.buffers.size()), t, false});
    for (int i = 0; i < 4; ++i) {
      ExprRef x = load(i, ts[i], O(0));
      ph.stores.push_back({add_out(k, ts[i]), O(0), bin(Op::Add, ts[i], x, x)});
      ph.stores.push_back({add_out(k, DType::F32), O(0), un(Op::Exp, DType::F32, un(Op::Cast, DType::F32, x))});
    }
    k.phases = {ph};
    ir::widen_narrow(k);
    ir::verify_kernel(k);
    cases.push_back(c);
  }
  for (const GpuCase& c : cases) {
    g::Rendered r = g::render(c.k, g::cuda_dialect());
    for (const char* arch : {"sm_80", "sm_90"}) {
      SCOPED_TRACE(c.k.name + " " + arch);
      detail::NvrtcOutput out;
      try {
        out = detail::nvrtc_compile(r.source, c.k.name, arch);
      } catch (const BackendError& e) { FAIL() << e.what() << "\n" << e.log(); }
      total_ms += out.ms;
      ++compiles;
      ASSERT_FALSE(out.ptx.empty());
      if (!have_ptxas) continue;
      const std::string ptx = dir + "/kf_" + c.k.name + ".ptx";
      std::ofstream(ptx) << out.ptx;
      const std::string cmd = ptxas + " -arch=" + arch + " -v " + ptx + " -o " + ptx + ".cubin 2>&1";
      FILE* p = popen(cmd.c_str(), "r");
      ASSERT_TRUE(p);
      std::string log;
      char buf[512];
      while (fgets(buf, sizeof buf, p)) log += buf;
      const int rc = pclose(p);
      EXPECT_EQ(rc, 0) << log;
      std::regex spill(R"((\d+) bytes spill stores, (\d+) bytes spill loads)");
      int entries = 0;
      for (size_t q = log.find("Compiling entry function"); q != std::string::npos;
           q = log.find("Compiling entry function", q + 1))
        ++entries;
      // A kernel that asks for two blocks per multiprocessor (the 128 x 128 GEMM tiling: at most
      // 128 registers) may spill a little: timed faster so on an H200 (gemm_render.cpp, Tiling).
      const int allowed = r.stages.size() == 1 && r.stages[0].min_blocks > 1 ? 128 : 0;
      for (auto it = std::sregex_iterator(log.begin(), log.end(), spill); it != std::sregex_iterator(); ++it) {
        EXPECT_LE(std::stoi((*it)[1]), allowed) << log;
        EXPECT_LE(std::stoi((*it)[2]), allowed) << log;
      }
      EXPECT_EQ(entries, static_cast<int>(r.stages.size())) << log;
      std::remove(ptx.c_str());
      std::remove((ptx + ".cubin").c_str());
    }
  }
  std::fprintf(stderr, "NVRTC: %d compiles, %.1f ms mean\n", compiles, total_ms / std::max(1, compiles));
#endif
}

#ifdef KFUSE_HAVE_CUDA
// a * b + c stays a multiply and an add (NVRTC --fmad=false, as the CPU backends never contract);
// Op::Fma and the tiled GEMM's multiply-accumulate are one fma.rn each.
TEST(GpuRender, NvrtcContractsOnlyExplicitFma) {
  auto ptx_of = [](bool fused) {
    GpuCase c;
    Kernel& k = c.k;
    k.name = fused ? "pw_fma" : "pw_mul_add";
    k.kind = ir::KernelKind::Pointwise;
    k.params = {{"outer0", 0}};
    k.outer = {param(0)};
    for (int i = 0; i < 3; ++i) k.buffers.push_back({"in" + std::to_string(i), DType::F32, false});
    ExprRef a = load(0, DType::F32, O(0)), b = load(1, DType::F32, O(0)), x = load(2, DType::F32, O(0));
    Phase ph;
    ph.stores.push_back(
        {add_out(k, DType::F32), O(0),
         fused ? op(Op::Fma, DType::F32, {a, b, x}) : bin(Op::Add, DType::F32, bin(Op::Mul, DType::F32, a, b), x)});
    k.phases = {ph};
    ir::verify_kernel(k);
    return detail::nvrtc_compile(g::render(k, g::cuda_dialect()).source, k.name, "sm_90").ptx;
  };
  const std::string plain = ptx_of(false), fused = ptx_of(true);
  EXPECT_EQ(plain.find("fma.rn.f32"), std::string::npos) << plain;
  EXPECT_NE(plain.find("mul.rn.f32"), std::string::npos) << plain;
  EXPECT_NE(fused.find("fma.rn.f32"), std::string::npos) << fused;
  const GpuCase gemm = gemm_case({DType::F32, 1, 19, true, false, {}, {}, true}, {});
  const std::string g_ptx = detail::nvrtc_compile(g::render(gemm.k, g::cuda_dialect()).source, "gemm", "sm_90").ptx;
  EXPECT_NE(g_ptx.find("fma.rn.f32"), std::string::npos);
}

// The 4-byte tiled GEMM reads its staged slices as 16-byte vectors (a lane's groups of 4 adjacent
// rows and columns); the 64 x 64 tiling (Options::gpu_gemm_tile = 64) reads them one by one.
TEST(GpuRender, NvrtcGemmReadsSlicesAsVectors) {
  for (DType t : {DType::F32, DType::I32}) {
    const GpuCase gemm = gemm_case({t, 0, 4096, false, false, {}, {}, true}, {});
    const std::string v4 = t == DType::F32 ? "ld.shared.v4.f32" : "ld.shared.v4.u32";
    const std::string grouped = detail::nvrtc_compile(g::render(gemm.k, g::cuda_dialect()).source, "g", "sm_90").ptx;
    // a full slice, unrolled: 8 k x (2 + 2) vector reads; the tail slice's loop: 4 more
    size_t n = 0;
    for (size_t at = grouped.find(v4); at != std::string::npos; at = grouped.find(v4, at + 1)) ++n;
    EXPECT_EQ(n, 36u) << dtype_name(t);
    const std::string strided =
        detail::nvrtc_compile(g::render(gemm.k, g::cuda_dialect(), {64}).source, "g", "sm_90").ptx;
    EXPECT_EQ(strided.find("ld.shared.v"), std::string::npos) << dtype_name(t);
  }
}

TEST(GpuRender, NvrtcErrorCarriesLog) {
  try {
    detail::nvrtc_compile("extern \"C\" __global__ void k() { undeclared_thing(); }", "broken", "sm_80");
    FAIL() << "expected BackendError";
  } catch (const BackendError& e) { EXPECT_NE(e.log().find("undeclared_thing"), std::string::npos) << e.log(); }
}
#endif

// Row-warp rows that fit in registers read the row from memory once: the later phases of
// softmax, log_softmax and layer_norm take it from the per-lane kf_row array (the device run of
// CudaBackend.Differential checks the values; here the form).
TEST(GpuRender, RowWarpReadsItsRowOnce) {
  auto count = [](const std::string& s, const std::string& what) {
    size_t n = 0;
    for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
    return n;
  };
  const std::string ls = g::render(softmax(DType::F32, 512, true).k, g::cuda_dialect()).source;
  EXPECT_NE(ls.find("float kf_row0[16];"), std::string::npos) << ls;
  EXPECT_EQ(count(ls, "kf_b0["), 1u) << ls;  // one load of x, three phases
  const std::string ln = g::render(layer_norm(DType::F32, 512).k, g::cuda_dialect()).source;
  EXPECT_EQ(count(ln, "kf_b0["), 1u) << ln;
  // 1000 is no multiple of the warp: the last element of a lane is guarded.
  const std::string odd = g::render(softmax(DType::F32, 1000, false).k, g::cuda_dialect()).source;
  EXPECT_NE(odd.find("float kf_row0[32];"), std::string::npos) << odd;
  EXPECT_NE(odd.find("if (kf_r >= 1000) break;"), std::string::npos) << odd;
  // f64 rows stay rolled (no register arrays); OpenCL has no warp form.
  EXPECT_EQ(g::render(softmax(DType::F64, 512, true).k, g::cuda_dialect()).source.find("kf_row"), std::string::npos);
  EXPECT_EQ(g::render(softmax(DType::F32, 512, true).k, g::opencl_dialect()).source.find("kf_row"), std::string::npos);
}
