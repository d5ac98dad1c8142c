// Accuracy of the xbyak math injectors (exp, exp2, log, log2, log1p, expm1, tanh, sigmoid, silu,
// erf, gelu both forms) over >= 1e6 points plus special values, against long double; the max
// error in ULPs (of the correctly rounded f32 result) is printed and bounded. Each op runs as a
// one-op pointwise kernel, on the AVX-512 path and on forced AVX2.
#include <cfloat>
#include <cstdio>
#include <cstring>

#include "test_xbyak_util.hpp"

namespace kfuse::xbt {
namespace {

struct MathCase {
  Op op;
  long double (*ref)(long double);
  double lo, hi;  // uniform sampling range (plus a log-uniform sweep of |x| when log_sweep)
  double max_ulp;
  bool log_sweep = false;
  // results with |ref| < floor are measured in absolute error, bounded by floor * 2^-18
  // (subnormal results by default; the far negative tails of gelu/silu, where the f32 argument
  // of exp is the conditioning limit, with a larger floor)
  double floor = FLT_MIN;
};

long double sig(long double x) { return 1.0L / (1.0L + expl(-x)); }
long double gelu_erf(long double x) { return 0.5L * x * erfcl(-x / sqrtl(2.0L)); }
long double gelu_tanh(long double x) {
  // x * sigmoid(2u) == 0.5 x (1 + tanh(u)) without the cancellation of the latter for x << 0
  long double u = 0.7978845608028654L * (x + 0.044715L * x * x * x);
  return x / (1.0L + expl(-2.0L * u));
}
long double silu(long double x) { return x * sig(x); }
long double log2_(long double x) { return log2l(x); }

float ulp_of(float r) {
  float a = std::fabs(r);
  if (std::isinf(a)) return INFINITY;
  return std::nextafter(a, INFINITY) - a;
}

void check(const MathCase& c, Isa isa) {
  const size_t n = 1 << 20;
  std::vector<float> x(n);
  std::mt19937_64 g(42);
  std::uniform_real_distribution<double> u(c.lo, c.hi), e(-30, 30);
  for (size_t i = 0; i < n; ++i) {
    if (c.log_sweep && i % 2) {  // |x| log-uniform in [2^-30, 2^30] (sign from the range)
      double m = std::exp2(e(g));
      x[i] = static_cast<float>(c.lo < 0 && (i % 4 == 1) ? -m : m);
      if (x[i] < c.lo || x[i] > c.hi) x[i] = static_cast<float>(u(g));
    } else {
      x[i] = static_cast<float>(u(g));
    }
  }
  const float sp[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN,    FLT_MIN, FLT_TRUE_MIN, -FLT_MIN, FLT_MAX, -FLT_MAX,
                      1.0f, -1.0f, 0.5f,     88.7f,     88.73f, -87.3f,  -103.0f,      1e-30f,   -1e-30f};
  for (size_t i = 0; i < sizeof sp / sizeof sp[0]; ++i) x[i] = sp[i];
  Kernel k = pointwise(
      1, [&](const std::vector<ExprRef>& in) { return un(c.op, in[0]); }, static_cast<int64_t>(n));
  auto be = detail::xb::make_backend(isa);
  auto ck = be->compile(k);
  ASSERT_TRUE(ck.kernel) << ck.declined;
  std::vector<float> y(n);
  LaunchArgs a{{x.data(), y.data()}, k.param_values()};
  ck.kernel->run(a);
  double worst = 0, worst_abs = 0;
  float worst_x = 0;
  int special_bad = 0;
  for (size_t i = 0; i < n; ++i) {
    long double r = c.ref(static_cast<long double>(x[i]));
    auto rf = static_cast<float>(r);
    if (std::isnan(rf) || std::isinf(rf)) {
      if (!(std::isnan(rf) ? std::isnan(y[i]) : y[i] == rf)) {
        if (++special_bad <= 5) ADD_FAILURE() << op_name(c.op) << "(" << x[i] << ") = " << y[i] << ", want " << rf;
      }
      continue;
    }
    if (std::isnan(y[i]) || std::isinf(y[i])) {
      if (++special_bad <= 5) ADD_FAILURE() << op_name(c.op) << "(" << x[i] << ") = " << y[i] << ", want " << rf;
      continue;
    }
    if (rf == 0 && y[i] == 0 && std::signbit(rf) != std::signbit(y[i]) && (x[i] == 0))
      ADD_FAILURE() << op_name(c.op) << "(" << x[i] << "): sign of zero";
    if (std::fabs(rf) < c.floor) {
      double ae = static_cast<double>(fabsl(static_cast<long double>(y[i]) - r));
      if (ae > worst_abs) worst_abs = ae;
      continue;
    }
    double err = static_cast<double>(fabsl(static_cast<long double>(y[i]) - r) / ulp_of(rf));
    if (err > worst) {
      worst = err;
      worst_x = x[i];
    }
  }
  std::printf(
      "[xbyak %s] %-10s max %.2f ulp (at x = %.9g) over %zu points + specials; |ref| < %.3g: max abs err %.3g\n",
      detail::xb::isa_name(isa), op_name(c.op), worst, worst_x, n, c.floor, worst_abs);
  EXPECT_LE(worst_abs, c.floor * 0x1p-18) << op_name(c.op);
  EXPECT_LE(worst, c.max_ulp) << op_name(c.op) << " at x = " << worst_x;
  EXPECT_EQ(special_bad, 0);
}

std::vector<MathCase> cases() {
  return {
      {Op::Exp, expl, -104, 89, 2, true},
      {Op::Exp2, exp2l, -151, 129, 2, true},
      {Op::Log, logl, 0, 1e30, 2, true},
      {Op::Log2, log2_, 0, 1e30, 2, true},
      {Op::Log1p, log1pl, -1, 100, 3, true},
      {Op::Expm1, expm1l, -20, 20, 3, true},
      {Op::Tanh, tanhl, -12, 12, 6, true},  // rational fit: ~5 ulp (math_constants.hpp)
      {Op::Sigmoid, sig, -100, 100, 3, true},
      {Op::Silu, silu, -80, 80, 4, true, 1e-30},
      {Op::Erf, erfl, -6, 6, 8, true},
      {Op::GeluErf, gelu_erf, -12, 12, 32, true, 1e-6},
      {Op::GeluTanh, gelu_tanh, -12, 12, 32, true, 1e-6},
  };
}

TEST(XbyakMath, UlpBoundsAndSpecials) {
  for (Isa isa : isas())
    for (const auto& c : cases()) check(c, isa);
}

// A math-heavy loop body runs U vectors at a time, their instructions interleaved (interleave.cpp:
// 4 copies of exp, 2 of gelu), while a masked tail runs one vector by itself. Both must give the
// same bits: each value of a long input (interleaved path) against the same value computed alone
// in a kernel of 3 elements (the tail path), for every injector op, and fused in a chain of two.
TEST(XbyakMath, InterleavedCopiesMatchOneVectorBitwise) {
  const std::vector<float> x = inputs(8 * 16 * 4 * 3, 5, -9, 9, 0.05);
  for (Isa isa : isas()) {
    auto be = detail::xb::make_backend(isa);
    for (const auto& c : cases()) {
      for (bool chain : {false, true}) {
        auto body = [&](const std::vector<ExprRef>& in) {
          ExprRef v = un(c.op, in[0]);
          return chain ? un(Op::Tanh, bin(Op::Mul, v, f32c(0.25))) : v;
        };
        Kernel kl = pointwise(1, body, static_cast<int64_t>(x.size()));
        Kernel ks = pointwise(1, body, 3);
        auto cl = be->compile(kl);
        auto cs = be->compile(ks);
        ASSERT_TRUE(cl.kernel && cs.kernel) << cl.declined << cs.declined;
        std::vector<float> y(x.size()), one(3);
        LaunchArgs la{{const_cast<float*>(x.data()), y.data()}, kl.param_values()};
        cl.kernel->run(la);
        int bad = 0;
        for (size_t i = 0; i + 3 <= x.size(); i += 3) {
          LaunchArgs sa{{const_cast<float*>(x.data() + i), one.data()}, ks.param_values()};
          cs.kernel->run(sa);
          for (size_t j = 0; j < 3; ++j)
            if (std::memcmp(&one[j], &y[i + j], 4) != 0 && ++bad <= 3)
              ADD_FAILURE() << detail::xb::isa_name(isa) << " " << op_name(c.op) << (chain ? " chain" : "") << "("
                            << x[i + j] << "): " << y[i + j] << " in a long loop, " << one[j] << " alone";
        }
      }
    }
  }
}

// The AVX-512 code of every math op (opmask forms such as the masked vpxord of exp_flush_tiny)
// is emitted even where the CPU cannot run it: xbyak rejects a bad operand form while emitting,
// so a machine without AVX-512 still catches it; the ULP test above runs it where it can.
TEST(XbyakMath, Avx512CodeIsEmittedForEveryOp) {
  for (const auto& c : cases()) {
    Kernel k = pointwise(
        1, [&](const std::vector<ExprRef>& in) { return un(c.op, in[0]); }, 1000);
    detail::xb::Plan p;
    ASSERT_EQ(detail::xb::analyze(k, p), "") << op_name(c.op);
    EXPECT_GT(detail::xb::emit(k, p, Isa::Avx512).code_bytes, 0u) << op_name(c.op);
  }
}

// Exact ops and the documented special-value behaviour.
TEST(XbyakMath, SpecialValues) {
  struct S {
    Op op;
    float x, want;
  };
  const S s[] = {{Op::Exp, -INFINITY, 0.0f},        {Op::Exp, INFINITY, INFINITY},      {Op::Log, 0.0f, -INFINITY},
                 {Op::Log, -0.0f, -INFINITY},       {Op::Log, INFINITY, INFINITY},      {Op::Tanh, INFINITY, 1.0f},
                 {Op::Tanh, -INFINITY, -1.0f},      {Op::Sigmoid, -INFINITY, 0.0f},     {Op::Sigmoid, INFINITY, 1.0f},
                 {Op::Erf, INFINITY, 1.0f},         {Op::Erf, -INFINITY, -1.0f},        {Op::Relu, -0.0f, 0.0f},
                 {Op::Sqrt, -0.0f, -0.0f},          {Op::Rsqrt, 0.0f, INFINITY},        {Op::Recip, -0.0f, -INFINITY},
                 {Op::GeluErf, INFINITY, INFINITY}, {Op::GeluTanh, INFINITY, INFINITY}, {Op::Expm1, -INFINITY, -1.0f},
                 {Op::Log1p, -1.0f, -INFINITY}};
  for (Isa isa : isas()) {
    auto be = detail::xb::make_backend(isa);
    for (const auto& c : s) {
      Kernel k = pointwise(
          1, [&](const std::vector<ExprRef>& in) { return un(c.op, in[0]); }, 1);
      auto ck = be->compile(k);
      ASSERT_TRUE(ck.kernel);
      float x = c.x, y = 7;
      LaunchArgs a{{&x, &y}, k.param_values()};
      ck.kernel->run(a);
      EXPECT_EQ(y, c.want) << op_name(c.op) << "(" << c.x << ") [" << detail::xb::isa_name(isa) << "]";
      EXPECT_EQ(std::signbit(y), std::signbit(c.want)) << op_name(c.op) << "(" << c.x << ")";
    }
    // NaN in, NaN out (every transcendental; relu and max/min propagate too)
    for (Op o : {Op::Exp, Op::Exp2, Op::Log, Op::Log2, Op::Log1p, Op::Expm1, Op::Tanh, Op::Sigmoid, Op::Silu, Op::Erf,
                 Op::GeluErf, Op::GeluTanh, Op::Relu, Op::Sqrt, Op::Rsqrt, Op::Floor}) {
      Kernel k = pointwise(
          1, [&](const std::vector<ExprRef>& in) { return un(o, in[0]); }, 1);
      auto ck = be->compile(k);
      float x = NAN, y = 7;
      LaunchArgs a{{&x, &y}, k.param_values()};
      ck.kernel->run(a);
      EXPECT_TRUE(std::isnan(y)) << op_name(o);
    }
  }
}

}  // namespace
}  // namespace kfuse::xbt
