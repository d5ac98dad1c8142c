// LLVM backend, pointwise kernels: every element-wise op of ops.def on every dtype it applies
// to, casts with NaN/Inf/out-of-range values, masked loads, IDiv/IMod index maps, multiple
// outputs and sizes 0/1/odd/not a multiple of 16, each compared with the reference interpreter.
//
// Tolerances: ops that are one IEEE operation (+ - * / sqrt, comparisons, rounding, casts,
// integer ops) must match bitwise (signed zeros included); f32 math within ops.def's f32
// tolerance plus 2 ULP; f64 math within 1e-11 relative plus 4 ULP (SLEEF u10 functions are
// <= 1 ULP, see test_llvm_math.cpp; the slack covers glibc's own error in the reference and the
// cancellation inside gelu_tanh).
#include "test_llvm_util.hpp"
#include "test_util.hpp"

namespace kfuse::test::llvmt {
namespace {

const int64_t kSizes[] = {0, 1, 17, 1000, 4099};

struct Range {
  double lo, hi;
};

Range unary_range(Op o) {
  switch (o) {
    case Op::Exp:
    case Op::Exp2:
    case Op::Expm1: return {-80, 80};
    case Op::Log:
    case Op::Log2:
    case Op::Log1p:
    case Op::Sqrt:
    case Op::Rsqrt: return {-0.5, 100};
    case Op::Sin:
    case Op::Cos: return {-100, 100};
    case Op::Erf:
    case Op::GeluTanh: return {-5, 5};
    case Op::Tanh:
    case Op::Sigmoid:
    case Op::Silu:
    case Op::GeluErf: return {-10, 10};
    default: return {-100, 100};
  }
}

Tol float_tol(Op o, DType dt) {
  double t = op_tolerance_f32(o);
  if (t == 0) return {};
  // The gelus in f32 are lib/ir/decompose.hpp's forms (the ULP table's bounds: < 28 / 40 ulp for
  // results >= 1e-6, absolute 1e-11 below); the reference's f64 gelus themselves cancel
  // (1 + tanh(u), 1 + erf(y) for x << 0: relative error up to 1e-9 at x = -5, 0 below -8).
  if (o == Op::GeluErf || o == Op::GeluTanh) return dt == DType::F32 ? Tol{t, 40, 1e-11} : Tol{1e-11, 4, 1e-15};
  return dt == DType::F32 ? Tol{t, 2} : Tol{1e-11, 4};
}

std::vector<Op> unary_ops() {
  return {
#define KFUSE_UNARY_OP(name, str, rule, expr, tol) Op::name,
#include "kfuse/ops.def"
  };
}
std::vector<Op> binary_ops() {
  return {
#define KFUSE_BINARY_OP(name, str, rule, expr, tol) Op::name,
#include "kfuse/ops.def"
  };
}
bool is_compare(Op o) { return o == Op::Eq || o == Op::Ne || o == Op::Lt || o == Op::Le || o == Op::Gt || o == Op::Ge; }
bool is_logical(Op o) { return o == Op::And || o == Op::Or || o == Op::Not; }

TEST(LlvmPointwise, EveryUnaryOpFloat) {
  KFUSE_REQUIRE_LLVM();
  for (DType dt : {DType::F32, DType::F64})
    for (Op o : unary_ops()) {
      if (is_bitwise(o)) continue;  // integers only (IntegerOps)
      DType out = is_logical(o) ? DType::Bool : dt;
      for (int64_t n : {int64_t{4099}}) {
        Range r = unary_range(o);
        Kernel k = pointwise(std::string("k_") + op_name(o), {dt}, out, n, [&](auto& l) { return op(o, out, {l[0]}); });
        check_vs_reference(k, {Buf::from(dt, rand_values(n, 7 + n, r.lo, r.hi, true))}, {static_cast<size_t>(n)},
                           float_tol(o, dt), std::string(op_name(o)) + "." + dtype_name(dt));
      }
    }
}

TEST(LlvmPointwise, EveryBinaryOpFloat) {
  KFUSE_REQUIRE_LLVM();
  for (DType dt : {DType::F32, DType::F64})
    for (Op o : binary_ops()) {
      if (is_bitwise(o)) continue;  // integers only (IntegerOps)
      DType out = is_compare(o) || is_logical(o) ? DType::Bool : dt;
      const int64_t n = 2053;
      double lo = o == Op::Pow ? 0.0 : -10, hi = 10;
      auto a = rand_values(n, 3, lo, hi, true);
      auto b = rand_values(n, 4, o == Op::Pow ? -8 : -10, o == Op::Pow ? 8 : 10, true);
      for (int i = 0; i < 200; ++i) b[i] = a[i];                              // ties for comparisons
      for (int i = 200; i < 300; ++i) b[i] = std::round(b[i]), a[i] = -a[i];  // pow(neg, int)
      Kernel k = pointwise(std::string("k_") + op_name(o), {dt, dt}, out, n, [&](auto& l) {
        return op(o, out, {l[0], l[1]});
      });
      check_vs_reference(k, {Buf::from(dt, a), Buf::from(dt, b)}, {static_cast<size_t>(n)}, float_tol(o, dt),
                         std::string(op_name(o)) + "." + dtype_name(dt));
    }
}

TEST(LlvmPointwise, IntegerOps) {
  KFUSE_REQUIRE_LLVM();
  const std::vector<Op> un = {Op::Neg,   Op::Abs,  Op::Square, Op::Relu, Op::Sign,
                              Op::Floor, Op::Ceil, Op::Round,  Op::Not,  Op::BitNot};
  std::vector<Op> bin = {Op::Add,    Op::Sub,   Op::Mul,    Op::Div, Op::Maximum, Op::Minimum, Op::Eq,
                         Op::Ne,     Op::Lt,    Op::Le,     Op::Gt,  Op::Ge,      Op::And,     Op::Or,
                         Op::BitAnd, Op::BitOr, Op::BitXor, Op::Shl, Op::Shr};
  for (DType dt : {DType::I32, DType::I64}) {
    const int64_t n = 1031;
    int64_t lim = dt == DType::I32 ? 60000 : 1000000;
    auto a = random_ints(n, 5, -lim, lim);
    auto b = random_ints(n, 6, -20, 20);  // small divisors, zeros included
    if (dt == DType::I32) {               // wrap-around at the extremes
      a[0] = 2147483647, b[0] = 1;
      a[1] = -2147483648.0, b[1] = -1;
      a[2] = -2147483648.0, b[2] = 0;
    }
    // shift counts: the width - 1, the width, past it, hugely past it (as unsigned too)
    const double bits = dt == DType::I32 ? 32 : 64;
    b[3] = bits - 1, b[4] = bits, b[5] = bits + 1, b[6] = 1e9, b[7] = -1e9, b[8] = -bits;
    for (Op o : un) {
      DType out = o == Op::Not ? DType::Bool : dt;
      Kernel k = pointwise(std::string("k_") + op_name(o), {dt}, out, n, [&](auto& l) { return op(o, out, {l[0]}); });
      auto x = a;
      if (o == Op::Square) x[0] = x[1] = 46340;  // the reference's double product is inexact above 2^53
      check_vs_reference(k, {Buf::from(dt, x)}, {static_cast<size_t>(n)}, {},
                         std::string(op_name(o)) + "." + dtype_name(dt));
    }
    for (Op o : bin) {
      DType out = is_compare(o) || is_logical(o) ? DType::Bool : dt;
      Kernel k = pointwise(std::string("k_") + op_name(o), {dt, dt}, out, n, [&](auto& l) {
        return op(o, out, {l[0], l[1]});
      });
      check_vs_reference(k, {Buf::from(dt, a), Buf::from(dt, b)}, {static_cast<size_t>(n)}, {},
                         std::string(op_name(o)) + "." + dtype_name(dt));
    }
  }
}

TEST(LlvmPointwise, BoolOpsAndWhere) {
  KFUSE_REQUIRE_LLVM();
  const int64_t n = 999;
  auto a = random_ints(n, 8, 0, 1), b = random_ints(n, 9, 0, 1);
  for (Op o : {Op::Not, Op::And, Op::Or, Op::Maximum, Op::Minimum, Op::Eq, Op::Ne, Op::Lt, Op::Le, Op::Gt, Op::Ge}) {
    bool unary = o == Op::Not;
    Kernel k = pointwise(std::string("k_") + op_name(o), {DType::Bool, DType::Bool}, DType::Bool, n, [&](auto& l) {
      return unary ? op(o, DType::Bool, {l[0]}) : op(o, DType::Bool, {l[0], l[1]});
    });
    check_vs_reference(k, {Buf::from(DType::Bool, a), Buf::from(DType::Bool, b)}, {static_cast<size_t>(n)}, {},
                       op_name(o));
  }
  for (DType dt : {DType::F32, DType::I64, DType::Bool}) {
    Kernel k = pointwise("k_where", {DType::Bool, dt, dt}, dt, n, [&](auto& l) {
      return op(Op::Where, dt, {l[0], l[1], l[2]});
    });
    auto x = dt == DType::Bool ? random_ints(n, 1, 0, 1) : rand_values(n, 1, -5, 5, dt == DType::F32);
    auto y = dt == DType::Bool ? random_ints(n, 2, 0, 1) : rand_values(n, 2, -5, 5);
    check_vs_reference(k, {Buf::from(DType::Bool, a), Buf::from(dt, x), Buf::from(dt, y)}, {static_cast<size_t>(n)},
                       {});
  }
}

TEST(LlvmPointwise, CastsEveryPairWithSpecials) {
  KFUSE_REQUIRE_LLVM();
  std::vector<double> v = {
      0.0,    -0.0, 1.0,          -1.0,         0.5,           -0.5,          2.7,    -2.7,    1e10,   -1e10,
      3e9,    -3e9, 2147483647.0, 2147483648.0, -2147483648.0, -2147483649.0, 9.3e18, -9.3e18, 9.2e18, 1e300,
      -1e300, NAN,  INFINITY,     -INFINITY,    16777217.0,    123456789.0,   1e-40,  255,     256};
  for (DType from : all_dtypes())
    for (DType to : all_dtypes()) {
      std::vector<double> in;
      for (double x : v) {  // values the source dtype can hold (via its own conversion)
        if (from == DType::Bool) in.push_back(x != 0.0);
        else if (!is_float(from)) in.push_back(std::isfinite(x) && std::fabs(x) < 2e9 ? std::trunc(x) : 7);
        else in.push_back(x);
      }
      for (int64_t n : {int64_t{1}, static_cast<int64_t>(in.size())}) {
        Kernel k = pointwise(std::string("k_cast_") + dtype_name(from) + "_" + dtype_name(to), {from}, to, n,
                             [&](auto& l) { return op(Op::Cast, to, {l[0]}); });
        check_vs_reference(k, {Buf::from(from, in)}, {static_cast<size_t>(n)}, {},
                           std::string("cast ") + dtype_name(from) + "->" + dtype_name(to));
      }
    }
}

TEST(LlvmPointwise, SizesAndChain) {
  KFUSE_REQUIRE_LLVM();
  for (int64_t n : kSizes) {
    // relu(a * b + c) / (1 + exp(-c)) with a cast chain through f64 and back
    Kernel k = pointwise("k_chain", {DType::F32, DType::F32, DType::F32}, DType::F32, n, [](auto& l) {
      auto t = op(Op::Relu, DType::F32, {op(Op::Add, DType::F32, {op(Op::Mul, DType::F32, {l[0], l[1]}), l[2]})});
      auto d = op(Op::Cast, DType::F64, {t});
      auto s = op(Op::Sigmoid, DType::F64, {op(Op::Cast, DType::F64, {l[2]})});
      return op(Op::Cast, DType::F32, {op(Op::Mul, DType::F64, {d, s})});
    });
    std::vector<Buf> in;
    for (int i = 0; i < 3; ++i) in.push_back(Buf::from(DType::F32, rand_values(n, 10 + i, -3, 3, true)));
    auto out = check_vs_reference(k, in, {static_cast<size_t>(n)}, {1e-15, 1});
    for (size_t i = 0; i < out[0].size(); ++i) ASSERT_NE(out[0].get(i), -77.0);
  }
}

// out[o0, o1] of a [C, R] output = in[o1, o0] of an [R, C] input, both as 2-D and as a flat
// 1-D outer domain with IDiv/IMod; and a padded copy whose loads are masked (no access outside).
TEST(LlvmPointwise, TransposeReshapeAndMaskedPad) {
  KFUSE_REQUIRE_LLVM();
  for (auto [R, C] : {std::pair<int64_t, int64_t>{1, 1}, {3, 5}, {37, 19}, {64, 33}}) {
    auto x = rand_values(R * C, 21, -1, 1);
    Kernel k2 = outer2d("k_transpose2d", ir::KernelKind::Pointwise, DType::F32, C, R);
    Phase ph;
    auto o0 = var(Space::Outer, 0), o1 = var(Space::Outer, 1);
    ph.stores.push_back({1, iadd(imul(o0, param(1)), o1), load(0, DType::F32, iadd(imul(o1, param(0)), o0))});
    k2.phases = {ph};
    check_vs_reference(k2, {Buf::from(DType::F32, x)}, {static_cast<size_t>(R * C)}, {});

    Kernel k1 = k2;
    k1.name = "k_transpose_flat";
    k1.params = {{"numel", R * C}};
    k1.outer = {param(0)};
    auto o = var(Space::Outer, 0);
    // out flat o = c*R + r  ->  in[r*C + c]
    auto src = iadd(imul(imod(o, iconst(R)), iconst(C)), idiv(o, iconst(R)));
    k1.phases[0].stores = {{1, o, load(0, DType::F32, src)}};
    check_vs_reference(k1, {Buf::from(DType::F32, x)}, {static_cast<size_t>(R * C)}, {});
  }
  for (int64_t n : kSizes) {
    const int64_t pad = 3;
    Kernel k;
    k.name = "k_pad";
    k.kind = ir::KernelKind::Pointwise;
    k.buffers = {{"in0", DType::F64, false}, {"out0", DType::F64, true}};
    k.params = {{"outer0", n + 2 * pad}};
    k.outer = {param(0)};
    auto o = var(Space::Outer, 0);
    auto inside = op(Op::And, DType::Bool,
                     {op(Op::Ge, DType::Bool, {o, iconst(pad)}), op(Op::Lt, DType::Bool, {o, iconst(n + pad)})});
    Phase ph;
    ph.stores.push_back(
        {1, o,
         op(Op::Add, DType::F64, {load(0, DType::F64, isub(o, iconst(pad)), inside), constant(0.5, DType::F64)})});
    k.phases = {ph};
    // exactly n elements: ASan flags any access outside them
    std::vector<Buf> in = {Buf::from(DType::F64, rand_values(n, 5, -1, 1))};
    in[0].bytes.resize(n * 8);
    in[0].bytes.shrink_to_fit();
    check_vs_reference(k, in, {static_cast<size_t>(n + 2 * pad)}, {});
  }
}

TEST(LlvmPointwise, MultipleOutputs) {
  KFUSE_REQUIRE_LLVM();
  for (int64_t n : kSizes) {
    Kernel k = pointwise("k_multi", {DType::F32, DType::F32}, DType::F32, n, [](auto& l) {
      return op(Op::Add, DType::F32, {l[0], l[1]});
    });
    k.buffers.push_back({"out1", DType::Bool, true});
    k.buffers.push_back({"out2", DType::I32, true});
    auto a = load(0, DType::F32, var(Space::Outer, 0)), b = load(1, DType::F32, var(Space::Outer, 0));
    k.phases[0].stores.push_back({3, var(Space::Outer, 0), op(Op::Gt, DType::Bool, {a, b})});
    k.phases[0].stores.push_back(
        {4, var(Space::Outer, 0), op(Op::Cast, DType::I32, {op(Op::Mul, DType::F32, {a, b})})});
    std::vector<Buf> in = {Buf::from(DType::F32, rand_values(n, 1, -100, 100, true)),
                           Buf::from(DType::F32, rand_values(n, 2, -100, 100, true))};
    size_t sz = static_cast<size_t>(n);
    check_vs_reference(k, in, {sz, sz, sz}, {});
  }
}

}  // namespace
}  // namespace kfuse::test::llvmt
