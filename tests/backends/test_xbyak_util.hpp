// Helpers of the xbyak backend tests: hand-built kernel IR of every supported shape, inputs with
// specials, and comparison against the reference interpreter.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "../../jit/xbyak/xbyak_backend.hpp"
#include "backend/factories.hpp"
#include "ir/kernel.hpp"

namespace kfuse::xbt {

using namespace kfuse::ir;
using detail::xb::Isa;

inline std::vector<Isa> isas() {
  std::vector<Isa> v;
  if (detail::xb::cpu_supports(Isa::Avx512)) v.push_back(Isa::Avx512);
  if (detail::xb::cpu_supports(Isa::Avx2)) v.push_back(Isa::Avx2);
  return v;
}

inline ExprRef f32c(double v) { return constant(v, DType::F32); }
inline ExprRef un(Op o, ExprRef a) { return op(o, DType::F32, {std::move(a)}); }
inline ExprRef bin(Op o, ExprRef a, ExprRef b) { return op(o, DType::F32, {std::move(a), std::move(b)}); }

/// Kernel skeleton: `nin` f32 inputs, one f32 output.
inline Kernel skeleton(const std::string& name, ir::KernelKind kind, int nin, int nout = 1) {
  Kernel k;
  k.name = name;
  k.kind = kind;
  for (int i = 0; i < nin; ++i) k.buffers.push_back({"in" + std::to_string(i), DType::F32, false});
  for (int i = 0; i < nout; ++i) k.buffers.push_back({"out" + std::to_string(i), DType::F32, true});
  return k;
}

/// Pointwise over a flat 1-D outer domain [n]: out0[o0] = f(in0[o0], in1[o0], ...).
inline Kernel pointwise(int nin, const std::function<ExprRef(const std::vector<ExprRef>&)>& f, int64_t n) {
  Kernel k = skeleton("k_pw", ir::KernelKind::Pointwise, nin);
  k.params.push_back({"outer0", n});
  k.outer.push_back(param(0));
  std::vector<ExprRef> in;
  for (int i = 0; i < nin; ++i) in.push_back(load(i, DType::F32, var(Space::Outer, 0)));
  Phase ph;
  ph.stores.push_back({nin, var(Space::Outer, 0), f(in)});
  k.phases.push_back(ph);
  return k;
}

/// Row kernel skeleton over [R, C]: x = in0[o0*C + r0].
inline ExprRef row_x(int64_t C) {
  return load(0, DType::F32, iadd(imul(var(Space::Outer, 0), iconst(C)), var(Space::Reduce, 0)));
}
inline ExprRef row_index(int64_t C) { return iadd(imul(var(Space::Outer, 0), iconst(C)), var(Space::Reduce, 0)); }

inline Kernel row_base(const std::string& name, int nin, int64_t R, int64_t C) {
  Kernel k = skeleton(name, ir::KernelKind::Row, nin);
  k.params.push_back({"outer0", R});
  k.outer.push_back(param(0));
  k.reduce.push_back(C);
  return k;
}

inline Phase reduce_phase(std::vector<int> accs, std::vector<Store> stores = {}) {
  Phase p;
  p.over_reduce = true;
  p.accs = std::move(accs);
  p.stores = std::move(stores);
  return p;
}

inline Kernel softmax(int64_t R, int64_t C, bool log_form) {
  Kernel k = row_base(log_form ? "k_log_softmax" : "k_softmax", 1, R, C);
  k.accs.push_back({AccKind::Max, DType::F32, row_x(C)});
  k.accs.push_back({AccKind::Sum, DType::F32, un(Op::Exp, bin(Op::Sub, row_x(C), acc(0, DType::F32)))});
  k.phases.push_back(reduce_phase({0}));
  k.phases.push_back(reduce_phase({1}));
  ExprRef v = log_form ? bin(Op::Sub, bin(Op::Sub, row_x(C), acc(0, DType::F32)), un(Op::Log, acc(1, DType::F32)))
                       : bin(Op::Div, un(Op::Exp, bin(Op::Sub, row_x(C), acc(0, DType::F32))), acc(1, DType::F32));
  k.phases.push_back(reduce_phase({}, {{1, row_index(C), v}}));
  return k;
}

inline Kernel logsumexp(int64_t R, int64_t C) {
  Kernel k = row_base("k_logsumexp", 1, R, C);
  k.accs.push_back({AccKind::Max, DType::F32, row_x(C)});
  k.accs.push_back({AccKind::Sum, DType::F32, un(Op::Exp, bin(Op::Sub, row_x(C), acc(0, DType::F32)))});
  k.phases.push_back(reduce_phase({0}));
  k.phases.push_back(reduce_phase({1}));
  Phase once;
  once.stores.push_back({1, var(Space::Outer, 0), bin(Op::Add, acc(0, DType::F32), un(Op::Log, acc(1, DType::F32)))});
  k.phases.push_back(once);
  return k;
}

/// layer_norm with weight in1[r0] and bias in2[r0].
inline Kernel layer_norm(int64_t R, int64_t C) {
  Kernel k = row_base("k_layer_norm", 3, R, C);
  ExprRef mean = bin(Op::Div, acc(0, DType::F32), f32c(static_cast<double>(C)));
  k.accs.push_back({AccKind::Sum, DType::F32, row_x(C)});
  k.accs.push_back({AccKind::Sum, DType::F32, un(Op::Square, bin(Op::Sub, row_x(C), mean))});
  k.phases.push_back(reduce_phase({0}));
  k.phases.push_back(reduce_phase({1}));
  ExprRef rstd =
      un(Op::Rsqrt, bin(Op::Add, bin(Op::Div, acc(1, DType::F32), f32c(static_cast<double>(C))), f32c(1e-5)));
  ExprRef w = load(1, DType::F32, var(Space::Reduce, 0)), b = load(2, DType::F32, var(Space::Reduce, 0));
  ExprRef v = bin(Op::Add, bin(Op::Mul, bin(Op::Mul, bin(Op::Sub, row_x(C), mean), rstd), w), b);
  k.phases.push_back(reduce_phase({}, {{3, row_index(C), v}}));
  return k;
}

inline Kernel rms_norm(int64_t R, int64_t C) {
  Kernel k = row_base("k_rms_norm", 2, R, C);
  k.accs.push_back({AccKind::Sum, DType::F32, bin(Op::Mul, row_x(C), row_x(C))});
  k.phases.push_back(reduce_phase({0}));
  ExprRef r = un(Op::Rsqrt, bin(Op::Add, bin(Op::Div, acc(0, DType::F32), f32c(static_cast<double>(C))), f32c(1e-6)));
  ExprRef v = bin(Op::Mul, bin(Op::Mul, row_x(C), r), load(1, DType::F32, var(Space::Reduce, 0)));
  k.phases.push_back(reduce_phase({}, {{2, row_index(C), v}}));
  return k;
}

/// Global reduction of in0[0..n): out0[0] = acc (kind), plus mean-like scaling for Sum.
inline Kernel global_reduce(AccKind kind, int64_t n) {
  Kernel k = skeleton("k_global", ir::KernelKind::Global, 1);
  k.reduce.push_back(n);
  k.accs.push_back({kind, DType::F32, load(0, DType::F32, var(Space::Reduce, 0))});
  k.phases.push_back(reduce_phase({0}));
  Phase once;
  once.stores.push_back({1, iconst(0), acc(0, DType::F32)});
  k.phases.push_back(once);
  return k;
}

/// Random f32 values in [lo, hi]; a fraction `special` replaced by NaN/±Inf/±0/huge/tiny.
inline std::vector<float> inputs(size_t n, uint64_t seed, double lo = -3, double hi = 3, double special = 0.02) {
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<double> d(lo, hi), u(0, 1);
  const float sp[] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 1e30f, -1e30f, 1e-40f, -1e-40f, 88.8f, -88.8f, 1.0f};
  std::vector<float> v(n);
  for (auto& x : v) x = u(g) < special ? sp[g() % (sizeof sp / sizeof sp[0])] : static_cast<float>(d(g));
  return v;
}

struct Tol {
  double rtol = 2e-6, atol = 1e-6;
};

inline bool close(float got, float want, Tol t) {
  if (std::isnan(want)) return std::isnan(got);
  if (std::isinf(want)) return got == want;
  if (std::isnan(got) || std::isinf(got)) return false;
  return std::fabs(static_cast<double>(got) - want) <= t.atol + t.rtol * std::fabs(static_cast<double>(want));
}

/// Runs `k` on the xbyak backend for `isa` and on the reference backend; compares every output.
/// Returns the number of mismatches (first few reported). Declines are test failures.
inline int compare(const Kernel& k, const std::vector<std::vector<float>>& in, const std::vector<size_t>& out_sizes,
                   Isa isa, Tol tol, const std::string& what, const Options& opts = detail::default_options()) {
  auto xb = detail::xb::make_backend(isa);
  auto ref = detail::make_reference_backend();
  auto cx = xb->compile(k, opts);
  EXPECT_TRUE(cx.kernel) << what << ": declined: " << cx.declined;
  if (!cx.kernel) return 1;
  auto cr = ref->compile(k);
  std::vector<std::vector<float>> ox, orf;
  LaunchArgs ax, ar;
  for (const auto& v : in) {
    ax.buffers.push_back(const_cast<float*>(v.data()));
    ar.buffers.push_back(const_cast<float*>(v.data()));
  }
  for (size_t s : out_sizes) {
    ox.emplace_back(s + 1, 12345.0f);
    orf.emplace_back(s + 1, 12345.0f);
  }
  for (size_t o = 0; o < out_sizes.size(); ++o) {
    ax.buffers.push_back(ox[o].data());
    ar.buffers.push_back(orf[o].data());
  }
  ax.params = ar.params = k.param_values();
  cx.kernel->run(ax);
  cr.kernel->run(ar);
  int bad = 0;
  for (size_t o = 0; o < out_sizes.size(); ++o) {
    EXPECT_EQ(ox[o][out_sizes[o]], 12345.0f) << what << ": wrote past the end";
    for (size_t i = 0; i < out_sizes[o]; ++i)
      if (!close(ox[o][i], orf[o][i], tol)) {
        if (++bad <= 5)
          ADD_FAILURE() << what << " [" << detail::xb::isa_name(isa) << "] out" << o << "[" << i << "]: xbyak "
                        << ox[o][i] << " reference " << orf[o][i];
      }
  }
  return bad;
}

}  // namespace kfuse::xbt
