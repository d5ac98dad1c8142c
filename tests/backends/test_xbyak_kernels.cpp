// xbyak backend vs the reference interpreter: pointwise chains of every supported op, broadcasts,
// row kernels (softmax family, norms) on short and long rows, global reductions; AVX-512 and
// forced AVX2; declines counted; serialisation round trip; thread-count independence; emit time.
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>

#include "backend/thread_pool.hpp"
#include "test_xbyak_util.hpp"

namespace kfuse::xbt {
namespace {

const std::vector<int64_t> kSizes = {0, 1, 7, 15, 16, 17, 1000, (1 << 20) + 5};

struct UnaryCase {
  Op op;
  Tol tol;
  double lo = -3, hi = 3;
};

std::vector<UnaryCase> unary_cases() {
  return {
      {Op::Neg, {0, 0}},
      {Op::Abs, {0, 0}},
      {Op::Exp, {4e-7, 1e-38}},
      {Op::Exp2, {4e-7, 0}},
      {Op::Log, {4e-7, 0}, 0, 10},
      {Op::Log2, {4e-7, 0}, 0, 10},
      {Op::Log1p, {6e-7, 0}, -1, 5},
      {Op::Expm1, {8e-7, 0}},
      {Op::Sqrt, {2e-7, 0}, 0, 10},
      {Op::Rsqrt, {4e-7, 0}, 0, 10},
      {Op::Recip, {2e-7, 0}},
      {Op::Square, {2e-7, 0}},
      {Op::Tanh, {6e-7, 1e-7}},
      {Op::Sigmoid, {6e-7, 0}},
      {Op::Relu, {0, 0}},
      {Op::GeluTanh, {1e-6, 1e-7}},
      {Op::GeluErf, {1e-6, 2e-7}},
      {Op::Silu, {6e-7, 1e-7}},
      {Op::Erf, {1e-6, 2e-7}},
      {Op::Floor, {0, 0}},
      {Op::Ceil, {0, 0}},
      {Op::Round, {0, 0}},
      {Op::Sign, {0, 0}},
  };
}

TEST(XbyakKernels, EveryUnaryOpEverySize) {
  for (Isa isa : isas())
    for (const auto& c : unary_cases())
      for (int64_t n : kSizes) {
        Kernel k = pointwise(
            1, [&](const std::vector<ExprRef>& in) { return un(c.op, in[0]); }, n);
        auto x = inputs(static_cast<size_t>(n), 17 + n, c.lo, c.hi);
        compare(k, {x}, {static_cast<size_t>(n)}, isa, c.tol, std::string(op_name(c.op)) + " n=" + std::to_string(n));
      }
}

TEST(XbyakKernels, BinaryOpsComparisonsWhere) {
  const std::vector<std::pair<Op, Tol>> bins = {{Op::Add, {2e-7, 0}}, {Op::Sub, {2e-7, 0}},  {Op::Mul, {2e-7, 0}},
                                                {Op::Div, {2e-7, 0}}, {Op::Maximum, {0, 0}}, {Op::Minimum, {0, 0}}};
  for (Isa isa : isas())
    for (int64_t n : {int64_t{17}, int64_t{1000}, int64_t{4099}}) {
      auto a = inputs(static_cast<size_t>(n), 1, -3, 3, 0.1), b = inputs(static_cast<size_t>(n), 2, -3, 3, 0.1);
      for (auto [o, tol] : bins) {
        Kernel k = pointwise(
            2, [&](const std::vector<ExprRef>& in) { return bin(o, in[0], in[1]); }, n);
        compare(k, {a, b}, {static_cast<size_t>(n)}, isa, tol, op_name(o));
      }
      for (Op c : {Op::Eq, Op::Ne, Op::Lt, Op::Le, Op::Gt, Op::Ge}) {
        Kernel k = pointwise(
            2,
            [&](const std::vector<ExprRef>& in) {
              ExprRef cond = op(c, DType::Bool, {in[0], in[1]});
              return op(Op::Where, DType::F32, {cond, bin(Op::Mul, in[0], f32c(2)), bin(Op::Sub, in[1], f32c(1))});
            },
            n);
        compare(k, {a, b}, {static_cast<size_t>(n)}, isa, {0, 0}, std::string("where ") + op_name(c));
      }
      // logical ops, not, casts
      Kernel k = pointwise(
          2,
          [&](const std::vector<ExprRef>& in) {
            ExprRef p = op(Op::Gt, DType::Bool, {in[0], f32c(0)});
            ExprRef q = op(Op::Lt, DType::Bool, {in[1], f32c(0.5)});
            ExprRef r = op(Op::Or, DType::Bool, {op(Op::And, DType::Bool, {p, q}), op(Op::Not, DType::Bool, {in[1]})});
            return bin(Op::Add, op(Op::Cast, DType::F32, {r}),
                       op(Op::Cast, DType::F32, {op(Op::And, DType::Bool, {in[0], in[1]})}));
          },
          n);
      compare(k, {a, b}, {static_cast<size_t>(n)}, isa, {0, 0}, "logical");
    }
}

// exp of an argument that is <= 0 by its form runs with only the lower clamp (eval.cpp,
// nonpositive): -(a*a), (-a)*a, -|a|, and x - max(x) (RowKernels' softmax); inputs with NaN,
// +-inf, +-1e30 and values large enough to underflow. Forms that look alike but can be
// positive keep both clamps: -(a*b), a - max(b).
TEST(XbyakKernels, ExpOfNonPositiveForms) {
  for (Isa isa : isas())
    for (int64_t n : {int64_t{17}, int64_t{4099}}) {
      auto a = inputs(static_cast<size_t>(n), 3, -12, 12, 0.1), b = inputs(static_cast<size_t>(n), 4, -12, 12, 0.1);
      const std::vector<std::pair<std::string, std::function<ExprRef(const std::vector<ExprRef>&)>>> forms = {
          {"exp(-(a*a))", [](const auto& in) { return un(Op::Neg, bin(Op::Mul, in[0], in[0])); }},
          {"exp((-a)*a)", [](const auto& in) { return bin(Op::Mul, un(Op::Neg, in[0]), in[0]); }},
          {"exp(a*(-a))", [](const auto& in) { return bin(Op::Mul, in[0], un(Op::Neg, in[0])); }},
          {"exp(-|a|)", [](const auto& in) { return un(Op::Neg, un(Op::Abs, in[0])); }},
          {"exp(-square(a))", [](const auto& in) { return un(Op::Neg, un(Op::Square, in[0])); }},
          {"exp(-(a*b))", [](const auto& in) { return un(Op::Neg, bin(Op::Mul, in[0], in[1])); }},
          {"exp((-a)*b)", [](const auto& in) { return bin(Op::Mul, un(Op::Neg, in[0]), in[1]); }}};
      for (const auto& [name, f] : forms) {
        Kernel k = pointwise(
            2, [&](const std::vector<ExprRef>& in) { return un(Op::Exp, f(in)); }, n);
        compare(k, {a, b}, {static_cast<size_t>(n)}, isa, {3e-7, 3e-45}, name);  // subnormals: 1 ulp
      }
      // a - max(b) is positive where a > max(b): not the softmax form
      const int64_t R = 7, C = n / R;
      Kernel k = row_base("k_exp_a_minus_max_b", 2, R, C);
      ExprRef xb = load(1, DType::F32, row_index(C));
      k.accs.push_back({AccKind::Max, DType::F32, xb});
      k.phases.push_back(reduce_phase({0}));
      k.phases.push_back(
          reduce_phase({}, {{2, row_index(C), un(Op::Exp, bin(Op::Sub, row_x(C), acc(0, DType::F32)))}}));
      compare(k, {a, b}, {static_cast<size_t>(R * C)}, isa, {3e-7, 3e-45}, "exp(a - max(b))");
    }
}

// The form-proven exp(x <= 0) (on AVX2 a one-step 2^(n+64) with a 2^-64-scaled polynomial,
// injectors.hpp exp_nonpositive_avx2) returns the same bits as the general exp of the same value
// loaded from memory: every n in [-150, 0], subnormal and zero results, -0, -inf and NaN.
TEST(XbyakKernels, ExpOfNonPositiveSameBitsAsGeneralExp) {
  std::vector<float> a;
  for (float v = 0.0f; v < 106.0f; v += 0.0137f) a.push_back(v);
  for (float v :
       {0.0f, 1e-30f, 1e-45f, 86.9f, 87.3365f, 87.34f, 88.7f, 103.28f, 103.3f, 103.98f, 104.0f, 150.0f, INFINITY, NAN})
    a.push_back(v);
  std::vector<float> neg(a.size());
  for (size_t i = 0; i < a.size(); ++i) neg[i] = -std::fabs(a[i]);
  const auto n = static_cast<int64_t>(a.size());
  for (Isa isa : isas()) {
    auto be = detail::xb::make_backend(isa);
    Kernel proven = pointwise(
        1, [](const auto& in) { return un(Op::Exp, un(Op::Neg, un(Op::Abs, in[0]))); }, n);
    Kernel general = pointwise(
        1, [](const auto& in) { return un(Op::Exp, in[0]); }, n);
    auto cp = be->compile(proven), cg = be->compile(general);
    ASSERT_TRUE(cp.kernel && cg.kernel);
    std::vector<float> op(a.size()), og(a.size());
    cp.kernel->run(LaunchArgs{{a.data(), op.data()}, proven.param_values()});
    cg.kernel->run(LaunchArgs{{neg.data(), og.data()}, general.param_values()});
    int bad = 0;
    for (size_t i = 0; i < a.size(); ++i)
      if (std::memcmp(&op[i], &og[i], 4) != 0 && !(std::isnan(op[i]) && std::isnan(og[i])) && ++bad <= 5)
        ADD_FAILURE() << "[" << detail::xb::isa_name(isa) << "] exp(" << neg[i] << "): proven form " << op[i]
                      << ", general " << og[i];
  }
}

TEST(XbyakKernels, LongChainAndBroadcast) {
  for (Isa isa : isas()) {
    // tanh(a*0.5+b)*sigmoid(c) - exp(-a*a) and relu(a*b+c), gelu chains: register pressure
    for (int64_t n : {int64_t{1000}, int64_t{(1 << 20) + 5}}) {
      auto a = inputs(static_cast<size_t>(n), 3), b = inputs(static_cast<size_t>(n), 4),
           c = inputs(static_cast<size_t>(n), 5);
      Kernel k = pointwise(
          3,
          [&](const std::vector<ExprRef>& in) {
            ExprRef t =
                bin(Op::Mul, un(Op::Tanh, bin(Op::Add, bin(Op::Mul, in[0], f32c(0.5)), in[1])), un(Op::Sigmoid, in[2]));
            return bin(Op::Sub, t, un(Op::Exp, un(Op::Neg, bin(Op::Mul, in[0], in[0]))));
          },
          n);
      // absolute part: the result cancels terms of magnitude <= 1, each within its documented ulp
      // bound (tanh 6, sigmoid 3, exp 1: ~10 ulp of 1 = 6e-7)
      compare(k, {a, b, c}, {static_cast<size_t>(n)}, isa, {2e-6, 6e-7}, "chain1");
      // a wide DAG: many live values (forces spills on AVX2)
      Kernel k2 = pointwise(
          3,
          [&](const std::vector<ExprRef>& in) {
            std::vector<ExprRef> v;
            for (int i = 0; i < 24; ++i)
              v.push_back(bin(Op::Add, bin(Op::Mul, in[i % 3], f32c(0.25 * (i + 1))),
                              un(i % 2 ? Op::Exp : Op::Sigmoid, in[(i + 1) % 3])));
            ExprRef s = v[0];
            for (int i = 1; i < 24; ++i) s = bin(Op::Add, s, bin(Op::Mul, v[i], v[23 - i]));
            return s;
          },
          n);
      compare(k2, {a, b, c}, {static_cast<size_t>(n)}, isa, {1e-5, 1e-3}, "wide");
    }
    // 2-D broadcast: out[o0, o1] = x[o0*$1 + o1] * w[o1] + s[o0]
    for (auto [R, C] : {std::pair<int64_t, int64_t>{3, 1}, {5, 7}, {4, 16}, {33, 17}, {2, 1000}, {1000, 3}}) {
      Kernel k = skeleton("k_bcast", ir::KernelKind::Pointwise, 3);
      k.params = {{"outer0", R}, {"outer1", C}};
      k.outer = {param(0), param(1)};
      ExprRef o0 = var(Space::Outer, 0), o1 = var(Space::Outer, 1);
      ExprRef idx = iadd(imul(o0, param(1)), o1);
      ExprRef v = bin(Op::Add, bin(Op::Mul, load(0, DType::F32, idx), load(1, DType::F32, o1)),
                      un(Op::Exp, load(2, DType::F32, o0)));
      Phase ph;
      ph.stores.push_back({3, idx, v});
      k.phases.push_back(ph);
      auto x = inputs(static_cast<size_t>(R * C), 6), w = inputs(static_cast<size_t>(C), 7),
           s = inputs(static_cast<size_t>(R), 8);
      compare(k, {x, w, s}, {static_cast<size_t>(R * C)}, isa, {1e-6, 4e-6},
              "bcast " + std::to_string(R) + "x" + std::to_string(C));
    }
    // scalar kernel (empty outer domain)
    {
      Kernel k = skeleton("k_scalar", ir::KernelKind::Pointwise, 1);
      Phase ph;
      ph.stores.push_back({1, iconst(0), un(Op::Exp, load(0, DType::F32, iconst(0)))});
      k.phases.push_back(ph);
      compare(k, {{0.5f}}, {1}, isa, {4e-7, 0}, "scalar");
    }
  }
}

// A pointwise kernel over 4-D rows whose stream pointers step by run-time amounts (params)
// along the innermost row index, with carries into every outer dim: out[a, c, b, d] = x[a, b,
// c, d] * 2 + w[d], the permute of an attention head split. The row walk advances the pointers
// by those steps and recomputes them on a carry (emitter.cpp row_loop); rows are split between
// threads mid-dimension, so each chunk starts from a full computation.
TEST(XbyakKernels, PermutedRowsStepByRunTimeStrides) {
  for (Isa isa : isas())
    for (auto [A, B, C, D] : std::vector<std::array<int64_t, 4>>{
             {2, 3, 5, 7}, {3, 1, 4, 9}, {1, 5, 1, 17}, {2, 4, 6, 1}, {3, 7, 33, 16}, {2, 61, 97, 24}}) {
      Kernel k = skeleton("k_perm", ir::KernelKind::Pointwise, 2);
      k.params = {{"outer0", A}, {"outer1", C}, {"outer2", B}, {"outer3", D}};
      k.outer = {param(0), param(1), param(2), param(3)};
      ExprRef o0 = var(Space::Outer, 0), o1 = var(Space::Outer, 1), o2 = var(Space::Outer, 2),
              o3 = var(Space::Outer, 3);
      // x [A, B, C, D] read at (o0, o2, o1, o3); the output is contiguous in (o0, o1, o2, o3)
      ExprRef xi = iadd(iadd(o3, imul(o1, param(3))), imul(iadd(o2, imul(o0, param(2))), imul(param(1), param(3))));
      ExprRef oi = iadd(iadd(o3, imul(o2, param(3))), imul(iadd(o1, imul(o0, param(1))), imul(param(2), param(3))));
      Phase ph;
      ph.stores.push_back(
          {2, oi, bin(Op::Add, bin(Op::Mul, load(0, DType::F32, xi), f32c(2.0)), load(1, DType::F32, o3))});
      k.phases.push_back(ph);
      const auto n = static_cast<size_t>(A * B * C * D);
      auto x = inputs(n, 41), w = inputs(static_cast<size_t>(D), 42);
      const Options saved = options();
      for (int threads : {1, 2}) {  // the pool's count: the largest shape splits mid-dimension
        Options o = saved;
        o.num_threads = threads;
        set_options(o);
        compare(k, {x, w}, {n}, isa, {0, 0},
                "perm " + std::to_string(A) + "x" + std::to_string(B) + "x" + std::to_string(C) + "x" +
                    std::to_string(D) + " threads " + std::to_string(threads));
      }
      set_options(saved);
    }
}

const std::vector<int64_t> kCols = {1, 3, 8, 10, 13, 16, 17, 100, 1000, 4099};

// softmax's exp(v - m) / s is emitted as a product with 1/s, computed once per row: s >= 1 there
// (the maximum's own term is exp(0) = 1). Any other row sum keeps the division: x / sum(x) over
// subnormal rows, where 1/s overflows to inf and x * (1/s) would be inf instead of ~1/C.
TEST(XbyakKernels, DivisionByARowSumIsAProductOnlyForSoftmax) {
  for (Isa isa : isas())
    for (int64_t C : {int64_t{7}, int64_t{1000}, int64_t{4099}}) {
      const int64_t R = 6;
      const size_t n = static_cast<size_t>(R * C);
      auto tiny = inputs(n, 21, 1e-44, 1e-43, 0);  // subnormal, and so is their sum: 1/sum overflows
      Kernel k = row_base("k_div_sum", 1, R, C);
      k.accs.push_back({AccKind::Sum, DType::F32, row_x(C)});
      k.phases.push_back(reduce_phase({0}));
      k.phases.push_back(reduce_phase({}, {{1, row_index(C), bin(Op::Div, row_x(C), acc(0, DType::F32))}}));
      compare(k, {tiny}, {n}, isa, {1e-5, 0}, "x / sum(x), subnormal x, C=" + std::to_string(C));
      // softmax itself, with the product, against the reference (rows of one element: s = 1)
      auto x = inputs(n, 23);
      compare(softmax(R, C, false), {x}, {n}, isa, {1e-5, 2e-7}, "softmax C=" + std::to_string(C));
      compare(softmax(R, 1, false), {inputs(static_cast<size_t>(R), 24)}, {static_cast<size_t>(R)}, isa, {0, 0},
              "softmax C=1");
    }
}

TEST(XbyakKernels, RowKernels) {
  for (Isa isa : isas())
    for (int64_t C : kCols) {
      int64_t R = C >= 1000 ? 37 : 301;
      for (double sp : {0.0, 0.01}) {
        auto x = inputs(static_cast<size_t>(R * C), 10 + C, -5, 5, sp),
             w = inputs(static_cast<size_t>(C), 11, -2, 2, 0), b = inputs(static_cast<size_t>(C), 12, -2, 2, 0);
        std::string tag = " C=" + std::to_string(C) + (sp > 0 ? " specials" : "");
        size_t n = static_cast<size_t>(R * C);
        Tol tol{1e-5, 2e-6};
        compare(softmax(R, C, false), {x}, {n}, isa, tol, "softmax" + tag);
        compare(softmax(R, C, true), {x}, {n}, isa, {1e-5, 1e-5}, "log_softmax" + tag);
        compare(logsumexp(R, C), {x}, {static_cast<size_t>(R)}, isa, {1e-5, 1e-5}, "logsumexp" + tag);
        compare(layer_norm(R, C), {x, w, b}, {n}, isa, {2e-4, 2e-4}, "layer_norm" + tag);
        compare(rms_norm(R, C), {x, w}, {n}, isa, {1e-5, 1e-6}, "rms_norm" + tag);
      }
    }
}

TEST(XbyakKernels, GlobalReductions) {
  for (Isa isa : isas())
    for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{17}, int64_t{1000}, int64_t{(1 << 20) + 5}}) {
      auto x = inputs(static_cast<size_t>(n), 20 + n, -1, 1, 0);
      compare(global_reduce(AccKind::Sum, n), {x}, {1}, isa, {1e-5, 1e-4}, "global sum n=" + std::to_string(n));
      compare(global_reduce(AccKind::Max, n), {x}, {1}, isa, {0, 0}, "global max n=" + std::to_string(n));
      compare(global_reduce(AccKind::Min, n), {x}, {1}, isa, {0, 0}, "global min n=" + std::to_string(n));
      auto y = x;
      y[y.size() / 2] = NAN;
      compare(global_reduce(AccKind::Max, n), {y}, {1}, isa, {0, 0}, "global max with NaN");
      compare(global_reduce(AccKind::Min, n), {y}, {1}, isa, {0, 0}, "global min with NaN");
    }
}

// The declined-kernel census: every kernel of the supported set must compile on every ISA.
TEST(XbyakKernels, NothingSupportedIsDeclined) {
  std::vector<Kernel> ks;
  for (const auto& c : unary_cases())
    ks.push_back(pointwise(
        1, [&](const std::vector<ExprRef>& in) { return un(c.op, in[0]); }, 100));
  for (int64_t C : kCols) {
    ks.push_back(softmax(8, C, false));
    ks.push_back(softmax(8, C, true));
    ks.push_back(logsumexp(8, C));
    ks.push_back(layer_norm(8, C));
    ks.push_back(rms_norm(8, C));
  }
  for (AccKind a : {AccKind::Sum, AccKind::Max, AccKind::Min, AccKind::Prod}) ks.push_back(global_reduce(a, 5000));
  for (Isa isa : isas()) {
    auto be = detail::xb::make_backend(isa);
    int declined = 0;
    for (const auto& k : ks) {
      auto r = be->compile(k);
      if (!r.kernel) {
        ++declined;
        ADD_FAILURE() << "declined on " << detail::xb::isa_name(isa) << ": " << r.declined << "\n" << print_kernel(k);
      }
    }
    std::printf("[xbyak %s] %zu kernels, %d declined\n", detail::xb::isa_name(isa), ks.size(), declined);
    EXPECT_EQ(declined, 0);
  }
}

TEST(XbyakKernels, DeclinesWithReasons) {
  auto be = detail::xb::make_backend(Isa::Avx2);
  ASSERT_TRUE(be);
  // strided load
  Kernel k = skeleton("k_strided", ir::KernelKind::Pointwise, 1);
  k.params.push_back({"outer0", 10});
  k.outer.push_back(param(0));
  Phase ph;
  ph.stores.push_back({1, var(Space::Outer, 0), load(0, DType::F32, imul(var(Space::Outer, 0), iconst(2)))});
  k.phases.push_back(ph);
  auto r = be->compile(k);
  EXPECT_FALSE(r.kernel);
  EXPECT_NE(r.declined.find("stride 2"), std::string::npos) << r.declined;
  // i64 buffers
  Kernel k2 = k;
  k2.buffers[0].dtype = DType::I64;
  r = be->compile(k2);
  EXPECT_FALSE(r.kernel);
  EXPECT_NE(r.declined.find("xbyak: i64"), std::string::npos) << r.declined;
  // pow
  Kernel k3 = pointwise(
      2, [](const std::vector<ExprRef>& in) { return bin(Op::Pow, in[0], in[1]); }, 10);
  r = be->compile(k3);
  EXPECT_FALSE(r.kernel);
  EXPECT_NE(r.declined.find("pow"), std::string::npos) << r.declined;
  // argmax
  Kernel k4 = global_reduce(AccKind::Sum, 10);
  k4.accs[0].kind = AccKind::ArgMax;
  k4.accs[0].dtype = DType::I64;
  r = be->compile(k4);
  EXPECT_FALSE(r.kernel);
  EXPECT_NE(r.declined.find("argmax"), std::string::npos) << r.declined;
}

TEST(XbyakKernels, SerializationRoundTrip) {
  for (Isa isa : isas()) {
    auto be = detail::xb::make_backend(isa);
    for (const Kernel& k : {softmax(50, 17, true), layer_norm(50, 100)}) {
      auto c = be->compile(k);
      ASSERT_TRUE(c.kernel) << c.declined;
      EXPECT_EQ(c.kernel->binary_kind, "x86-raw");
      EXPECT_EQ(c.kernel->backend, "xbyak");
      EXPECT_EQ(c.kernel->target, std::string("x86_64-") + detail::xb::isa_name(isa));
      auto l = be->load(k, c.kernel->binary);
      ASSERT_TRUE(l);
      auto x = inputs(50 * 100, 99), w = inputs(100, 98), b = inputs(100, 97);
      std::vector<float> o1(50 * 100), o2(50 * 100);
      LaunchArgs a1, a2;
      a1.buffers = {x.data(), w.data(), b.data()};
      a1.buffers.resize(static_cast<size_t>(k.num_inputs()));
      a2.buffers = a1.buffers;
      a1.buffers.push_back(o1.data());
      a2.buffers.push_back(o2.data());
      a1.params = a2.params = k.param_values();
      c.kernel->run(a1);
      l->run(a2);
      EXPECT_EQ(0, std::memcmp(o1.data(), o2.data(), o1.size() * 4));
      // a corrupted header is refused
      auto bad = c.kernel->binary;
      bad[0] ^= 1;
      EXPECT_FALSE(be->load(k, bad));
    }
  }
}

// kfuse-cache asks the backend where the code is in a binary (the framing is the backend's).
TEST(XbyakKernels, CodeRangeOfTheBinary) {
  for (Isa isa : isas()) {
    auto be = detail::xb::make_backend(isa);
    auto c = be->compile(softmax(50, 17, true));
    ASSERT_TRUE(c.kernel) << c.declined;
    const auto& bin = c.kernel->binary;
    size_t off = 0, size = 0;
    std::string what;
    ASSERT_TRUE(be->code_range(bin, &off, &size, &what));
    EXPECT_EQ(off, 16u);  // "KFXB", version, ISA, code bytes
    EXPECT_GT(size, 0u);
    EXPECT_LE(off + size, bin.size());
    EXPECT_NE(what.find(std::string("xbyak x86-64 code, ").append(std::to_string(size)).append(" bytes")),
              std::string::npos)
        << what;
    auto bad = bin;
    bad[0] ^= 1;
    EXPECT_FALSE(be->code_range(bad, &off, &size, &what));
    EXPECT_FALSE(be->code_range(std::vector<uint8_t>(8), &off, &size, &what));
  }
}

// Results do not depend on the thread count: the same kernel run inline on a pool worker
// (one thread) and through parallel_for (all threads) is bitwise identical.
TEST(XbyakKernels, ThreadCountIndependent) {
  for (Isa isa : isas()) {
    auto be = detail::xb::make_backend(isa);
    const int64_t n = (1 << 20) + 5;
    for (const Kernel& k : {global_reduce(AccKind::Sum, n), softmax(2048, 512, false)}) {
      auto c = be->compile(k);
      ASSERT_TRUE(c.kernel);
      size_t in_n = k.reduce[0] * (k.outer.empty() ? 1 : 2048), out_n = k.outer.empty() ? 1 : in_n;
      auto x = inputs(in_n, 5, -1, 1, 0);
      std::vector<float> o1(out_n), o2(out_n);
      LaunchArgs a1{{x.data(), o1.data()}, k.param_values()}, a2{{x.data(), o2.data()}, k.param_values()};
      c.kernel->run(a1);
      detail::parallel_for(2, 1, [&](int64_t b, int64_t) {
        if (b == 0) c.kernel->run(a2);  // inside a parallel region: runs on one thread
      });
      EXPECT_EQ(0, std::memcmp(o1.data(), o2.data(), out_n * 4)) << k.name;
    }
  }
}

// Short rows run across lanes on AVX-512 (lane i owns row o+i, a masked group for the last < 16
// rows). A row's result must not depend on its lane or on which chunk (thread) it lands in: run
// the kernel on all rows, on the rows from k onwards (every row shifted by k lanes), and on
// several chunkings of the row range; all bitwise identical.
TEST(XbyakKernels, ShortRowsLanePositionIndependent) {
  for (Isa isa : isas()) {
    auto be = detail::xb::make_backend(isa);
    for (int64_t C : {1, 3, 8, 10, 13, 16}) {
      const int64_t R = 301;
      auto x = inputs(static_cast<size_t>(R * C), 40 + C, -5, 5, 0.02),
           w = inputs(static_cast<size_t>(C), 41, -2, 2, 0), b = inputs(static_cast<size_t>(C), 42, -2, 2, 0);
      struct Case {
        Kernel k;
        int64_t out_per_row;
      };
      for (const Case& cs : {Case{softmax(R, C, false), C}, Case{softmax(R, C, true), C}, Case{logsumexp(R, C), 1},
                             Case{layer_norm(R, C), C}, Case{rms_norm(R, C), C}}) {
        auto c = be->compile(cs.k);
        ASSERT_TRUE(c.kernel) << c.declined;
        int nin = static_cast<int>(cs.k.buffers.size()) - 1;
        auto run_rows = [&](int64_t first, int64_t n, std::vector<float>& out) {
          LaunchArgs a;
          a.buffers.push_back(x.data() + first * C);
          if (nin > 1) a.buffers.push_back(w.data());
          if (nin > 2) a.buffers.push_back(b.data());
          a.buffers.push_back(out.data() + first * cs.out_per_row);
          a.params = {n};
          c.kernel->run(a);
        };
        size_t on = static_cast<size_t>(R * cs.out_per_row);
        std::vector<float> all(on, 1.0f);
        run_rows(0, R, all);
        for (int64_t k : {1, 5, 16, 17}) {
          std::vector<float> shifted(on, 1.0f), chunked(on, 1.0f);
          run_rows(0, k, shifted);
          run_rows(k, R - k, shifted);
          for (int64_t r0 = 0; r0 < R; r0 += 3 * k) run_rows(r0, std::min<int64_t>(3 * k, R - r0), chunked);
          EXPECT_EQ(0, std::memcmp(all.data(), shifted.data(), on * 4)) << cs.k.name << " C=" << C << " k=" << k;
          EXPECT_EQ(0, std::memcmp(all.data(), chunked.data(), on * 4)) << cs.k.name << " C=" << C << " k=" << k;
        }
      }
    }
  }
}

// Which kernels take the rows-across-lanes path (analysis only).
TEST(XbyakKernels, LanePlan) {
  detail::xb::Plan p;
  for (int64_t C : {1, 10, 16}) {
    ASSERT_EQ("", detail::xb::analyze(softmax(64, C, true), p));
    EXPECT_TRUE(p.lanes) << C;
    ASSERT_EQ("", detail::xb::analyze(logsumexp(64, C), p));
    EXPECT_TRUE(p.lanes) << C;
    ASSERT_EQ("", detail::xb::analyze(layer_norm(64, C), p));
    EXPECT_TRUE(p.lanes) << C;
  }
  ASSERT_EQ("", detail::xb::analyze(softmax(64, 17, true), p));
  EXPECT_FALSE(p.lanes);
}

// Reduction loops are unrolled with up to 4 independent accumulator sets: row lengths that
// leave 0..3 single vectors after the unrolled part, with 0, 1 and several unrolled iterations,
// with and without a masked tail; max/min rows with a NaN in each position class.
TEST(XbyakKernels, UnrolledReductionRemainders) {
  for (Isa isa : isas()) {
    const int64_t W = isa == Isa::Avx512 ? 16 : 8;
    for (int64_t vecs : {1, 2, 3, 4, 5, 6, 7, 8, 9, 13}) {
      for (int64_t rem : {int64_t{0}, W / 2 + 1}) {
        const int64_t C = vecs * W + rem, R = 9;
        auto x = inputs(static_cast<size_t>(R * C), 70 + C, -4, 4, 0);
        for (int64_t r = 0; r < R; ++r) x[r * C + (r * 5) % C] = r % 3 == 0 ? NAN : x[r * C];  // NaN in some rows
        auto w = inputs(static_cast<size_t>(C), 71, -2, 2, 0), b = inputs(static_cast<size_t>(C), 72, -2, 2, 0);
        const size_t n = static_cast<size_t>(R * C);
        std::string tag = " C=" + std::to_string(C);
        compare(softmax(R, C, true), {x}, {n}, isa, {1e-5, 1e-5}, "log_softmax" + tag);
        compare(logsumexp(R, C), {x}, {static_cast<size_t>(R)}, isa, {1e-5, 1e-5}, "logsumexp" + tag);
        compare(layer_norm(R, C), {x, w, b}, {n}, isa, {2e-4, 2e-4}, "layer_norm" + tag);
        compare(global_reduce(AccKind::Min, C), {x}, {1}, isa, {0, 0}, "global min" + tag);
        compare(global_reduce(AccKind::Sum, C), {w}, {1}, isa, {1e-5, 1e-5}, "global sum" + tag);
      }
    }
  }
}

// Outputs of >= 16 MiB are written with streaming stores where every store address is vector
// aligned and (on CPUs that ask for the 4K-alias check, forced both ways here) no contiguous
// input is a few vectors behind the output modulo 4 KiB (emitter.cpp, streaming_check), with
// regular stores otherwise: each path (aligned, misaligned and aliasing buffers), pointwise and
// row kernels, against an fp64 oracle; tails and odd row lengths too.
TEST(XbyakKernels, StreamingStoresLargeOutputs) {
  struct Placed {  // n floats at `offset` bytes past a 4 KiB boundary
    Placed(size_t n, size_t offset)
        : mem(static_cast<float*>(std::aligned_alloc(4096, (n * 4 + offset + 64 + 4095) / 4096 * 4096))),
          p(mem + offset / 4) {}
    ~Placed() { std::free(mem); }
    float* mem;
    float* p;
  };
  struct Case {
    size_t out_offset, in_offset;
    const char* what;
  };
  const Case cases[] = {{0, 0, "streaming"},
                        {4, 0, "misaligned output"},
                        {0, 4096 - 32, "input 32 bytes behind the output mod 4 KiB"},
                        {64, 48, "input 16 bytes behind"},
                        {0, 2048, "input 2 KiB away"}};
  // The oracle is computed directly in double, once per kernel: its result does not depend on
  // where the buffers sit, the ISA or the alias check. (The IR interpreter took ~1 s per launch
  // here, minutes under ASan on a 2-vCPU machine; these kernels' math is two lines.)
  const int64_t n = (int64_t{1} << 22) + 21;              // 16 MiB + a tail
  const int64_t most = std::max<int64_t>(n, 8200 * 515);  // the largest input below
  auto a = inputs(static_cast<size_t>(most), 81, -3, 3, 0.01), b = inputs(static_cast<size_t>(n), 82, -3, 3, 0);
  Kernel pw = pointwise(
      2, [](const std::vector<ExprRef>& in) { return un(Op::Relu, bin(Op::Mul, in[0], in[1])); }, n);
  auto pointwise_oracle = [&](std::vector<float>& out) {
    for (int64_t i = 0; i < n; ++i) {  // (NaN inputs propagate, as relu's does)
      const double v = double{a[i]} * b[i];
      out[static_cast<size_t>(i)] = static_cast<float>(v > 0 || std::isnan(v) ? v : 0.0);
    }
  };
  auto rows_oracle = [&](int64_t R, int64_t C, bool log_form) {
    return [&a, R, C, log_form](std::vector<float>& out) {
      for (int64_t r = 0; r < R; ++r) {
        const float* x = a.data() + r * C;
        double m = -INFINITY, s = 0;
        for (int64_t c = 0; c < C; ++c)
          m = std::isnan(m) || x[c] > m || std::isnan(x[c]) ? (std::isnan(m) ? m : x[c]) : m;
        for (int64_t c = 0; c < C; ++c) s += std::exp(x[c] - m);
        for (int64_t c = 0; c < C; ++c)
          out[static_cast<size_t>(r * C + c)] =
              static_cast<float>(log_form ? x[c] - m - std::log(s) : std::exp(x[c] - m) / s);
      }
    };
  };
  // [R, C] rows with C = 515, 6149: misaligned row starts; C = 512, 6144: every row aligned.
  // Pipelined rows (online.cpp) stream the previous row's stores from the joined loop: the
  // two-loop form (C = 512, 515) and the online one (C >= kOnlineMinReduce = 6144).
  static_assert(detail::xb::kOnlineMinReduce == 6144, "sizes below");
  struct Large {
    Kernel k;
    int64_t count;
    std::function<void(std::vector<float>&)> oracle;
  };
  const Large ks[] = {{pw, n, pointwise_oracle},
                      {softmax(8200, 512, true), 8200 * 512, rows_oracle(8200, 512, true)},
                      {softmax(8200, 515, false), 8200 * 515, rows_oracle(8200, 515, false)},
                      {softmax(683, 6144, true), 683 * 6144, rows_oracle(683, 6144, true)},
                      {softmax(683, 6149, false), 683 * 6149, rows_oracle(683, 6149, false)}};
  for (const auto& [k, count, oracle] : ks) {
    const bool two = k.kind == ir::KernelKind::Pointwise;
    std::vector<float> expect(static_cast<size_t>(count));
    oracle(expect);
    for (Isa isa : isas()) {
      auto be = detail::xb::make_backend(isa);
      for (int alias_check : {0, 1})
        for (const Case& c : cases) {
          Options force;
          force.xbyak_alias_check = alias_check;
          auto cx = be->compile(k, force);
          ASSERT_TRUE(cx.kernel) << cx.declined;
          Placed ia(static_cast<size_t>(count), c.in_offset), ib(two ? static_cast<size_t>(n) : 0, c.in_offset);
          std::copy(a.begin(), a.begin() + count, ia.p);
          if (two) std::copy(b.begin(), b.end(), ib.p);
          Placed ox(static_cast<size_t>(count), c.out_offset);
          std::vector<void*> bx{ia.p};
          if (two) bx.push_back(ib.p);
          bx.push_back(ox.p);
          ox.p[count] = 12345.0f;
          cx.kernel->run(LaunchArgs{bx, k.param_values()});
          EXPECT_EQ(ox.p[count], 12345.0f) << k.name << ": wrote past the end";
          int bad = 0;
          for (int64_t i = 0; i < count; ++i)
            if (!close(ox.p[i], expect[static_cast<size_t>(i)], {1e-5, 1e-5}) && ++bad <= 5)
              ADD_FAILURE() << k.name << " (" << c.what << (alias_check ? ", 4K-alias check" : "") << ") ["
                            << detail::xb::isa_name(isa) << "] out[" << i << "]: xbyak " << ox.p[i] << " reference "
                            << expect[static_cast<size_t>(i)];
        }
    }
  }
}

// Emit time per kernel (analysis + emission + copy to an RX mapping, median of 51; README
// "Emit time" quotes the printed figures). The bound is 50x the measured ~100 us, so it only
// catches a pathological regression (say, an emitter gone quadratic in the kernel size); it is
// checked in optimised builds without sanitizers, where timings mean something.
#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define KFUSE_TEST_SANITIZED 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define KFUSE_TEST_SANITIZED 1
#endif
#if defined(NDEBUG) && !defined(KFUSE_TEST_SANITIZED)
constexpr bool kTimingsMeaningful = true;
#else
constexpr bool kTimingsMeaningful = false;
#endif
constexpr double kEmitBoundUs = 5000;

TEST(XbyakKernels, EmitTime) {
  if (isas().empty()) GTEST_SKIP() << "no AVX2 on this CPU";
  for (Isa isa : isas()) {
    auto be = detail::xb::make_backend(isa);
    std::vector<Kernel> ks = {pointwise(
                                  3,
                                  [](const std::vector<ExprRef>& in) {
                                    return un(Op::Relu, bin(Op::Add, bin(Op::Mul, in[0], in[1]), in[2]));
                                  },
                                  100),
                              softmax(8, 1000, true),
                              layer_norm(8, 512),
                              softmax(64, 10, true),
                              softmax(64, 16, true),
                              pointwise(
                                  1, [](const std::vector<ExprRef>& in) { return un(Op::GeluTanh, in[0]); }, 100)};
    for (const auto& k : ks) {
      std::vector<double> t;
      size_t bytes = 0;
      for (int i = 0; i < 51; ++i) {
        auto c = be->compile(k);
        ASSERT_TRUE(c.kernel) << k.name << " declined on " << detail::xb::isa_name(isa) << ": " << c.declined;
        // 0 would mean the backend stopped timing its emit, and the bound below would pass vacuously.
        ASSERT_GT(c.kernel->compile_ms, 0.0) << k.name;
        t.push_back(c.kernel->compile_ms * 1000);
        bytes = c.kernel->binary.size();
      }
      EXPECT_GT(bytes, 0u) << k.name << ": no machine code";
      std::sort(t.begin(), t.end());
      const double median = t[t.size() / 2];
      std::printf("[xbyak %s] %-16s emit median %.1f us (min %.1f), %zu bytes\n", detail::xb::isa_name(isa),
                  k.name.c_str(), median, t[0], bytes);
      if (kTimingsMeaningful) {
        EXPECT_LT(median, kEmitBoundUs) << k.name << " on " << detail::xb::isa_name(isa) << ": median emit time";
      }
    }
  }
}

}  // namespace
}  // namespace kfuse::xbt
