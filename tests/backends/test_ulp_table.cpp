// The ULP table (issue 23 item 3): for every composite and transcendental f32 op and every
// backend present (xbyak AVX-512 / AVX2, LLVM, OpenCL, CUDA), the max error in f32 ulps against
// a long-double reference over one fixed sweep per op (a uniform grid over the op's range, a
// log-spaced sweep of both signs, and the specials +-0, +-inf, NaN). The composites' references
// are the exact functions (gelu via erfc, so its tail has no cancellation), which the one
// decomposition (lib/ir/decompose.hpp) and xbyak's fused injectors both compute. Prints the
// table (docs/fusion-and-ir.md "Math of the composite ops" holds a copy) and asserts each op's
// bound on every backend; a NaN out where the reference is a number (or the reverse) fails.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "../../jit/xbyak/xbyak_backend.hpp"
#include "backend/backend.hpp"
#include "ir/kernel.hpp"
#ifdef KFUSE_HAVE_OPENCL
#include "../../jit/opencl/opencl_runtime.hpp"
#endif
#ifdef KFUSE_HAVE_CUDA
#include "../../jit/cuda/cuda_runtime.hpp"
#endif

namespace kfuse {
namespace {

using namespace kfuse::ir;
using LD = long double;

LD sigmoid_l(LD x) { return x < 0 ? expl(x) / (1 + expl(x)) : 1 / (1 + expl(-x)); }

struct OpCase {
  Op op;
  double lo, hi;              // the uniform grid's range
  std::function<LD(LD)> ref;  // exact function
  double bound;               // max ulp on every backend
  double tail = 0;            // below this |result|, absolute error <= 1e-11 instead of ulps
};

// Bounds: the worst backend's measured max rounded up with some margin. The gelus' ulps grow in
// their tail (x < -5, results below 1e-6: exp's argument -a^2 is rounded to f32 spacing, up to
// 2^-18 at a^2 = 72, every formula in f32 has that), so there the bound is absolute.
const std::vector<OpCase>& cases() {
  static const std::vector<OpCase> c = {
      {Op::Exp, -104, 89, [](LD x) { return expl(x); }, 2.5},
      {Op::Log, 1e-30, 1e30, [](LD x) { return logl(x); }, 2.5},
      {Op::Expm1, -20, 20, [](LD x) { return expm1l(x); }, 3.5},
      {Op::Log1p, -1, 100, [](LD x) { return log1pl(x); }, 3.5},
      {Op::Tanh, -12, 12, [](LD x) { return tanhl(x); }, 8},
      {Op::Erf, -6, 6, [](LD x) { return erfl(x); }, 9},
      {Op::Sigmoid, -100, 100, sigmoid_l, 4},
      {Op::Silu, -80, 80, [](LD x) { return x * sigmoid_l(x); }, 4.5},
      {Op::GeluErf, -12, 12, [](LD x) { return x * erfcl(-x / sqrtl(2)) / 2; }, 40, 1e-6},
      {Op::GeluTanh, -12, 12, [](LD x) { return x * sigmoid_l(2 * 0.7978845608028654L * (x + 0.044715L * x * x * x)); },
       28, 1e-6},
  };
  return c;
}

std::vector<float> sweep(const OpCase& c) {
  std::vector<float> x;
  const int n = 1 << 13;
  for (int i = 0; i <= n; ++i) x.push_back(static_cast<float>(c.lo + (c.hi - c.lo) * i / n));
  for (int i = 0; i <= n; ++i) {  // log-spaced magnitudes 1e-30 .. 1e3 (clamped to the range), both signs
    const double m = std::pow(10.0, -30.0 + 33.0 * i / n);
    for (double v : {m, -m})
      if (v >= c.lo && v <= c.hi) x.push_back(static_cast<float>(v));
  }
  for (float v : {0.0f, -0.0f, INFINITY, -INFINITY, NAN}) x.push_back(v);
  return x;
}

// |got - ref| in units of the f32 spacing at ref (subnormal spacing below the normal range).
double ulps(float got, LD ref) {
  if (std::isnan(ref)) return std::isnan(got) ? 0 : INFINITY;
  if (std::isnan(got)) return INFINITY;
  const float rf = static_cast<float>(ref);
  if (std::isinf(rf) || std::isinf(got)) return rf == got ? 0 : INFINITY;
  int e = 0;
  std::frexp(static_cast<double>(ref), &e);
  const LD spacing = ldexpl(1, std::max(e, -125) - 24);
  return static_cast<double>(fabsl(static_cast<LD>(got) - ref) / spacing);
}

Kernel unary_kernel(Op o, int64_t n) {
  Kernel k;
  k.name = std::string("k_ulp_") + op_name(o);
  k.kind = KernelKind::Pointwise;
  k.buffers = {{"in0", DType::F32, false}, {"out0", DType::F32, true}};
  k.params = {{"outer0", n}};
  k.outer = {param(0)};
  Phase ph;
  ph.stores.push_back({1, var(Space::Outer, 0), op(o, DType::F32, {load(0, DType::F32, var(Space::Outer, 0))})});
  k.phases = {ph};
  return k;
}

// Runs `out = k(in)` on the backend's memory.
using Runner = std::function<std::vector<float>(detail::CompiledKernel&, const Kernel&, const std::vector<float>&)>;

std::vector<float> run_host(detail::CompiledKernel& ck, const Kernel& k, const std::vector<float>& in) {
  std::vector<float> out(in.size(), -1.0f);
  LaunchArgs a{{const_cast<float*>(in.data()), out.data()}, k.param_values()};
  ck.run(a);
  return out;
}

template <class Alloc, class ToDev, class ToHost>
Runner device_runner(Alloc alloc, ToDev to_dev, ToHost to_host) {
  return [=](detail::CompiledKernel& ck, const Kernel& k, const std::vector<float>& in) {
    auto din = alloc(DType::F32, static_cast<int64_t>(in.size()));
    auto dout = alloc(DType::F32, static_cast<int64_t>(in.size()));
    to_dev(*din, in.data());
    LaunchArgs a{{din->data, dout->data}, k.param_values()};
    ck.run(a);
    std::vector<float> out(in.size());
    to_host(*dout, out.data());
    return out;
  };
}

struct Column {
  std::string name;
  std::shared_ptr<detail::Backend> backend;
  Runner run;
};

std::vector<Column> backends() {
  std::vector<Column> cols;
  for (auto isa : {detail::xb::Isa::Avx512, detail::xb::Isa::Avx2})
    if (detail::xb::cpu_supports(isa))
      cols.push_back(
          {isa == detail::xb::Isa::Avx512 ? "xbyak avx512" : "xbyak avx2", detail::xb::make_backend(isa), run_host});
  if (auto be = detail::find_backend("llvm")) cols.push_back({"llvm", be, run_host});
#ifdef KFUSE_HAVE_OPENCL
  if (auto be = detail::find_backend("opencl"))
    cols.push_back({"opencl", be,
                    device_runner([](DType t, int64_t n) { return detail::opencl_alloc(t, n); },
                                  detail::opencl_copy_to_device, detail::opencl_copy_to_host)});
#endif
#ifdef KFUSE_HAVE_CUDA
  if (auto be = detail::find_backend("cuda"))
    cols.push_back({"cuda", be,
                    device_runner([](DType t, int64_t n) { return detail::cuda_alloc(t, n); },
                                  detail::cuda_copy_to_device, detail::cuda_copy_to_host)});
#endif
  return cols;
}

TEST(UlpTable, EveryBackendWithinEachOpsBound) {
  const auto cols = backends();
  ASSERT_FALSE(cols.empty());
  std::string table = "| op |";
  for (const auto& c : cols) table += " " + c.name + " |";
  table += "\n|---|";
  for (size_t i = 0; i < cols.size(); ++i) table += "---|";
  table += "\n";
  for (const OpCase& oc : cases()) {
    const std::vector<float> x = sweep(oc);
    table += std::string("| ") + op_name(oc.op) + " |";
    for (const auto& col : cols) {
      SCOPED_TRACE(col.name + " " + op_name(oc.op));
      Kernel k = unary_kernel(oc.op, static_cast<int64_t>(x.size()));
      auto c = col.backend->compile(k);
      if (!c.kernel) {  // a backend may decline an op (xbyak: none of these); the table says so
        table += " declined |";
        continue;
      }
      const std::vector<float> y = col.run(*c.kernel, k, x);
      double worst = 0, tail_abs = 0;
      float at = 0;
      for (size_t i = 0; i < x.size(); ++i) {
        const LD r = oc.ref(static_cast<LD>(x[i]));
        if (std::isfinite(static_cast<double>(r)) && fabsl(r) < oc.tail) {
          tail_abs = std::max(tail_abs, static_cast<double>(fabsl(static_cast<LD>(y[i]) - r)));
          continue;
        }
        const double u = ulps(y[i], r);
        if (!(u <= worst)) {
          worst = u;
          at = x[i];
        }
      }
      EXPECT_LE(worst, oc.bound) << "worst at x = " << at;
      EXPECT_LE(tail_abs, 1e-11) << "absolute error below " << oc.tail;
      char cell[64];
      std::snprintf(cell, sizeof cell, " %.2f |", worst);
      table += cell;
    }
    table += "\n";
  }
  std::printf("%s", table.c_str());
}

}  // namespace
}  // namespace kfuse
