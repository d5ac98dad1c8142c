// Every element-wise op of ops.def (plus where and clamp) against expectations computed here in
// double, independently of kfuse's reference evaluator: contiguous, size-1, scalar, empty and
// non-contiguous (transposed, strided, expanded) inputs in f32 and f64, broadcasting, and IEEE
// propagation of NaN and Inf.
//
// Tolerances: an f32 result may differ from the exact double value by op_tolerance_f32(op)
// relative (the bound ops.def documents for a correct f32 backend; 0 for exact ops such as neg,
// abs, relu, floor, maximum), plus a small absolute slack for ops whose result passes through
// zero inside the tested range (sin, cos, erf, gelu, silu, log near 1). f64 results get 1e-12
// relative (a JIT's libm may differ from the host's by a few ulp).
#include <cmath>

#include "test_util.hpp"

using namespace kfuse;
using namespace kfuse::test;

namespace {

// ---- independent definitions of the unary ops ----
double round_half_even(double x) {
  double r = std::floor(x);
  double d = x - r;
  if (d > 0.5) return r + 1;
  if (d < 0.5) return r;
  return std::fmod(r, 2.0) == 0.0 ? r : r + 1;
}
double relu_def(double x) { return std::isnan(x) ? x : (x > 0 ? x : 0.0); }
double sign_def(double x) { return x > 0 ? 1.0 : (x < 0 ? -1.0 : x); }
double gelu_tanh_def(double x) {
  const double k = std::sqrt(2.0 / M_PI);
  return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
}
Tensor gelu_tanh_fn(const Tensor& x) { return gelu(x, true); }
Tensor gelu_erf_fn(const Tensor& x) { return gelu(x, false); }

struct UnaryCase {
  const char* name;
  Op op;
  Tensor (*fn)(const Tensor&);
  double (*expect)(double);
  double lo, hi;  // a well-conditioned input range
  double atol;    // absolute slack near zero results (f32)
  bool arith;     // Arith/Rounding rule: integer dtypes are kept, bool is refused
};

const UnaryCase kUnary[] = {
    {"neg", Op::Neg, neg, [](double x) { return -x; }, -3, 3, 0, true},
    {"abs", Op::Abs, kfuse::abs, [](double x) { return x < 0 ? -x : x; }, -3, 3, 0, true},
    {"exp", Op::Exp, kfuse::exp, [](double x) { return std::exp(x); }, -5, 5, 0, false},
    {"exp2", Op::Exp2, kfuse::exp2, [](double x) { return std::pow(2.0, x); }, -5, 5, 0, false},
    {"log", Op::Log, kfuse::log, [](double x) { return std::log(x); }, 0.01, 10, 2e-7, false},
    {"log2", Op::Log2, kfuse::log2, [](double x) { return std::log(x) / std::log(2.0); }, 0.01, 10, 2e-7, false},
    {"log1p", Op::Log1p, kfuse::log1p, [](double x) { return std::log1p(x); }, -0.9, 5, 1e-7, false},
    {"expm1", Op::Expm1, kfuse::expm1, [](double x) { return std::expm1(x); }, -3, 3, 1e-7, false},
    {"sqrt", Op::Sqrt, kfuse::sqrt, [](double x) { return std::sqrt(x); }, 0, 10, 0, false},
    {"rsqrt", Op::Rsqrt, rsqrt, [](double x) { return 1.0 / std::sqrt(x); }, 0.01, 10, 0, false},
    {"reciprocal", Op::Recip, reciprocal, [](double x) { return 1.0 / x; }, 0.1, 5, 0, false},
    {"square", Op::Square, square, [](double x) { return x * x; }, -3, 3, 0, true},
    {"sin", Op::Sin, kfuse::sin, [](double x) { return std::sin(x); }, -6, 6, 1e-6, false},
    {"cos", Op::Cos, kfuse::cos, [](double x) { return std::cos(x); }, -6, 6, 1e-6, false},
    {"tanh", Op::Tanh, kfuse::tanh, [](double x) { return std::tanh(x); }, -4, 4, 1e-7, false},
    {"sigmoid", Op::Sigmoid, sigmoid, [](double x) { return 0.5 * (1.0 + std::tanh(0.5 * x)); }, -8, 8, 1e-7, false},
    {"relu", Op::Relu, relu, relu_def, -2, 2, 0, true},
    {"gelu_tanh", Op::GeluTanh, gelu_tanh_fn, gelu_tanh_def, -4, 4, 1e-6, false},
    {"gelu", Op::GeluErf, gelu_erf_fn, [](double x) { return x * 0.5 * std::erfc(-x / std::sqrt(2.0)); }, -4, 4, 1e-6,
     false},
    {"silu", Op::Silu, silu, [](double x) { return x / (1.0 + std::exp(-x)); }, -6, 6, 1e-7, false},
    {"erf", Op::Erf, kfuse::erf, [](double x) { return std::erf(x); }, -3, 3, 1e-7, false},
    {"floor", Op::Floor, kfuse::floor, [](double x) { return std::floor(x); }, -5, 5, 0, true},
    {"ceil", Op::Ceil, kfuse::ceil, [](double x) { return std::ceil(x); }, -5, 5, 0, true},
    {"round", Op::Round, kfuse::round, round_half_even, -5, 5, 0, true},
    {"sign", Op::Sign, sign, sign_def, -2, 2, 0, true},
};

double f32_rtol(Op op) { return op_tolerance_f32(op); }
constexpr double kF64Rtol = 1e-12;

void PrintTo(const UnaryCase& c, std::ostream* os) { *os << c.name; }

class UnaryOp : public ::testing::TestWithParam<UnaryCase> {};

std::vector<double> map(const std::vector<double>& v, double (*f)(double)) {
  std::vector<double> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = f(v[i]);
  return out;
}

TEST_P(UnaryOp, FloatInputsOfEveryLayout) {
  const UnaryCase& c = GetParam();
  for (DType dt : {DType::F32, DType::F64}) {
    SCOPED_TRACE(dtype_name(dt));
    double rtol = dt == DType::F32 ? f32_rtol(c.op) : kF64Rtol;
    double atol = dt == DType::F32 ? c.atol : 1e-14;
    // contiguous, odd shape
    auto v = stored_values(random_values(21, 11, c.lo, c.hi), dt);
    expect_tensor(c.fn(make_tensor(v, {3, 7}, dt)), {3, 7}, dt, map(v, c.expect), rtol, atol);
    // size-1, scalar and empty shapes
    expect_tensor(c.fn(make_tensor({v[0]}, {1, 1}, dt)), {1, 1}, dt, {c.expect(v[0])}, rtol, atol);
    expect_tensor(c.fn(make_tensor({v[1]}, {}, dt)), {}, dt, {c.expect(v[1])}, rtol, atol);
    expect_tensor(c.fn(make_tensor({}, {0, 5}, dt)), {0, 5}, dt, {}, rtol, atol);
    // a transposed view: [7, 3] -> [3, 7]
    auto tv = transposed(v, 7, 3);
    expect_tensor(c.fn(make_tensor(v, {7, 3}, dt).transpose()), {3, 7}, dt, map(tv, c.expect), rtol, atol);
    // a strided slice with negative bounds: rows 1, 3 of 5; columns -7..-1 step 3 of 9 -> 2, 5
    auto w = stored_values(random_values(45, 12, c.lo, c.hi), dt);
    Tensor s = make_tensor(w, {5, 9}, dt).slice({Range{1, std::nullopt, 2}, Range{-7, -1, 3}});
    std::vector<double> sv = {w[1 * 9 + 2], w[1 * 9 + 5], w[3 * 9 + 2], w[3 * 9 + 5]};
    expect_tensor(c.fn(s), {2, 2}, dt, map(sv, c.expect), rtol, atol);
    // an expanded view: [1, 5] -> [4, 5]
    auto e = generate({4, 5}, [&](const std::vector<int64_t>& i) { return c.expect(w[i[1]]); });
    expect_tensor(c.fn(make_tensor({w.begin(), w.begin() + 5}, {1, 5}, dt).expand({4, 5})), {4, 5}, dt, e, rtol, atol);
  }
}

TEST_P(UnaryOp, IntegerAndBoolInputs) {
  const UnaryCase& c = GetParam();
  auto v = random_ints(9, 13, -4, 4);
  v[0] = 3;  // keep log/sqrt defined somewhere and the input non-zero
  for (DType dt : {DType::I32, DType::I64}) {
    SCOPED_TRACE(dtype_name(dt));
    if (c.arith) {  // integers stay integers, exactly
      expect_tensor(c.fn(make_tensor(v, {9}, dt)), {9}, dt, map(v, c.expect));
    } else {  // float math on integers computes in f32
      Tensor r = c.fn(make_tensor(v, {9}, dt));
      EXPECT_EQ(r.dtype(), DType::F32);
      EXPECT_TRUE(all_close({values(r)[0]}, {c.expect(3.0)}, f32_rtol(c.op) + kF32Eps, c.atol));
    }
  }
  Tensor b = make_tensor({1, 0, 1}, {3}, DType::Bool);
  if (c.arith) {
    EXPECT_THROW(c.fn(b), UserError);
  } else {
    Tensor r = c.fn(b);
    EXPECT_EQ(r.dtype(), DType::F32);
    EXPECT_TRUE(all_close({values(r)[0]}, {c.expect(1.0)}, f32_rtol(c.op) + kF32Eps, c.atol));
  }
}

TEST_P(UnaryOp, NanAndInfPropagate) {
  const UnaryCase& c = GetParam();
  const std::vector<double> sp = {kNaN, kInf, -kInf, 0.0, -0.0};
  for (DType dt : {DType::F32, DType::F64}) {
    auto got = values(c.fn(make_tensor(sp, {5}, dt)));
    EXPECT_TRUE(std::isnan(got[0])) << c.name << "(nan) = " << got[0];
    for (size_t i = 1; i < sp.size(); ++i) {
      double want = c.expect(sp[i]);
      // x * sigmoid(x) and x * Phi(x) at -inf: the limit is 0, IEEE evaluation gives NaN; both are fine.
      if (std::isnan(want) && std::isinf(sp[i]) && (c.op == Op::Silu || c.op == Op::GeluErf || c.op == Op::GeluTanh)) {
        EXPECT_TRUE(std::isnan(got[i]) || got[i] == 0.0) << c.name << "(" << sp[i] << ") = " << got[i];
        continue;
      }
      EXPECT_TRUE(close(got[i], want, 0, 0)) << c.name << "(" << sp[i] << ") = " << got[i] << ", expected " << want;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllUnary, UnaryOp, ::testing::ValuesIn(kUnary),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(UnaryOp, EveryUnaryRowOfTheOpTableIsCovered) {
  int rows = 0;
#define KFUSE_UNARY_OP(name, str, rule, expr, tol) ++rows;
#include "kfuse/ops.def"
  // logical_not is covered by LogicalNot below, bitwise_not by tests/unit/test_bitwise.cpp.
  EXPECT_EQ(rows, static_cast<int>(std::size(kUnary)) + 2);
}

TEST(UnaryOp, RoundIsHalfToEven) {
  Tensor x = make_tensor({0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 2.4999, 2.5001}, {8});
  expect_tensor(kfuse::round(x), {8}, DType::F32, {0, 2, 2, 0, -2, -2, 2, 3});
}

TEST(UnaryOp, LogicalNot) {
  for (DType dt : all_dtypes()) {
    SCOPED_TRACE(dtype_name(dt));
    expect_tensor(logical_not(make_tensor({0, 1, 3, 0, -2}, {5}, dt)), {5}, DType::Bool, {1, 0, 0, 1, 0});
  }
  // NaN is a true value (it is != 0), as in NumPy.
  expect_tensor(logical_not(make_tensor({kNaN, kInf, -0.0}, {3})), {3}, DType::Bool, {0, 0, 1});
}

// ---- binary ops ----
struct BinaryCase {
  const char* name;
  Op op;
  Tensor (*fn)(const Tensor&, const Tensor&);
  double (*expect)(double, double);
  bool compare;  // result bool (Compare and Logical rules)
};

double max_def(double a, double b) { return (std::isnan(a) || std::isnan(b)) ? kNaN : (a >= b ? a : b); }
double min_def(double a, double b) { return (std::isnan(a) || std::isnan(b)) ? kNaN : (a <= b ? a : b); }
Tensor pow_fn(const Tensor& a, const Tensor& b) { return kfuse::pow(a, b); }
Tensor max_fn(const Tensor& a, const Tensor& b) { return maximum(a, b); }
Tensor min_fn(const Tensor& a, const Tensor& b) { return minimum(a, b); }

const BinaryCase kBinary[] = {
    {"add", Op::Add, kfuse::add, [](double a, double b) { return a + b; }, false},
    {"sub", Op::Sub, kfuse::sub, [](double a, double b) { return a - b; }, false},
    {"mul", Op::Mul, kfuse::mul, [](double a, double b) { return a * b; }, false},
    {"div", Op::Div, kfuse::div, [](double a, double b) { return a / b; }, false},
    {"pow", Op::Pow, pow_fn, [](double a, double b) { return std::pow(a, b); }, false},
    {"maximum", Op::Maximum, max_fn, max_def, false},
    {"minimum", Op::Minimum, min_fn, min_def, false},
    {"eq", Op::Eq, eq, [](double a, double b) { return a == b ? 1.0 : 0.0; }, true},
    {"ne", Op::Ne, ne, [](double a, double b) { return a != b ? 1.0 : 0.0; }, true},
    {"lt", Op::Lt, lt, [](double a, double b) { return a < b ? 1.0 : 0.0; }, true},
    {"le", Op::Le, le, [](double a, double b) { return a <= b ? 1.0 : 0.0; }, true},
    {"gt", Op::Gt, gt, [](double a, double b) { return a > b ? 1.0 : 0.0; }, true},
    {"ge", Op::Ge, ge, [](double a, double b) { return a >= b ? 1.0 : 0.0; }, true},
    {"logical_and", Op::And, logical_and, [](double a, double b) { return (a != 0 && b != 0) ? 1.0 : 0.0; }, true},
    {"logical_or", Op::Or, logical_or, [](double a, double b) { return (a != 0 || b != 0) ? 1.0 : 0.0; }, true},
};

void PrintTo(const BinaryCase& c, std::ostream* os) { *os << c.name; }

class BinaryOp : public ::testing::TestWithParam<BinaryCase> {};

// Operand values: integers in [-3, 3] for comparisons and logic (ties and zeros occur); a
// positive base for pow; a divisor away from zero for div.
std::vector<double> operand(const BinaryCase& c, size_t n, uint64_t seed, bool second) {
  if (c.compare) return random_ints(n, seed, -3, 3);
  if (c.op == Op::Pow) return second ? random_values(n, seed, -2, 2) : random_values(n, seed, 0.1, 3);
  if (c.op == Op::Div && second) {
    auto v = random_values(n, seed, 0.5, 3);
    for (size_t i = 0; i < n; i += 2) v[i] = -v[i];
    return v;
  }
  return random_values(n, seed);
}

void check_binary(const BinaryCase& c, const Tensor& a, const std::vector<double>& av, const Shape& as, const Tensor& b,
                  const std::vector<double>& bv, const Shape& bs, DType dt) {
  Shape out = *numpy_broadcast(as, bs);
  auto e = generate(
      out, [&](const std::vector<int64_t>& i) { return c.expect(broadcast_at(av, as, i), broadcast_at(bv, bs, i)); });
  double rtol = c.compare ? 0 : (dt == DType::F32 ? op_tolerance_f32(c.op) : kF64Rtol);
  expect_tensor(c.fn(a, b), out, c.compare ? DType::Bool : dt, e, rtol, 0);
}

TEST_P(BinaryOp, BroadcastAndViewsInFloat) {
  const BinaryCase& c = GetParam();
  for (DType dt : {DType::F32, DType::F64}) {
    SCOPED_TRACE(dtype_name(dt));
    auto av = stored_values(operand(c, 15, 21, false), dt);
    auto bv = stored_values(operand(c, 4, 22, true), dt);
    // [3, 1, 5] with [4, 1] -> [3, 4, 5]
    check_binary(c, make_tensor(av, {3, 1, 5}, dt), av, {3, 1, 5}, make_tensor(bv, {4, 1}, dt), bv, {4, 1}, dt);
    // same shape, and a scalar-shaped operand on either side
    check_binary(c, make_tensor(av, {15}, dt), av, {15}, make_tensor(av, {15}, dt), av, {15}, dt);
    check_binary(c, make_tensor(av, {3, 5}, dt), av, {3, 5}, make_tensor({bv[0]}, {}, dt), {bv[0]}, {}, dt);
    check_binary(c, make_tensor({av[0]}, {}, dt), {av[0]}, {}, make_tensor(bv, {2, 2}, dt), bv, {2, 2}, dt);
    // empty with broadcast: [0, 5] with [5]
    check_binary(c, make_tensor({}, {0, 5}, dt), {}, {0, 5}, make_tensor({av.begin(), av.begin() + 5}, {5}, dt),
                 {av.begin(), av.begin() + 5}, {5}, dt);
    // a transposed operand with an expanded one: [5, 3]^T -> [3, 5] op ([1, 5] -> [3, 5])
    auto bw = stored_values(operand(c, 5, 23, true), dt);
    Tensor ta = make_tensor(av, {5, 3}, dt).transpose();
    Tensor eb = make_tensor(bw, {1, 5}, dt).expand({3, 5});
    auto bexp = generate({3, 5}, [&](const std::vector<int64_t>& i) { return bw[i[1]]; });
    check_binary(c, ta, transposed(av, 5, 3), {3, 5}, eb, bexp, {3, 5}, dt);
  }
}

TEST_P(BinaryOp, NanAndInfPropagate) {
  const BinaryCase& c = GetParam();
  const std::vector<double> sp = {kNaN, kInf, -kInf, 0.0, -0.0, 1.0, -2.5};
  const Shape s = {7};
  for (DType dt : {DType::F32, DType::F64}) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor a = make_tensor(sp, {7, 1}, dt), b = make_tensor(sp, {1, 7}, dt);
    auto e = generate({7, 7}, [&](const std::vector<int64_t>& i) { return c.expect(sp[i[0]], sp[i[1]]); });
    auto got = values(c.fn(a, b));
    double rtol = dt == DType::F32 ? op_tolerance_f32(c.op) + kF32Eps : 0;  // finite results round to f32
    for (size_t i = 0; i < e.size(); ++i)
      EXPECT_TRUE(close(got[i], e[i], rtol, 0))
          << c.name << "(" << sp[i / 7] << ", " << sp[i % 7] << ") = " << got[i] << ", expected " << e[i];
  }
}

INSTANTIATE_TEST_SUITE_P(AllBinary, BinaryOp, ::testing::ValuesIn(kBinary),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(BinaryOp, EveryBinaryRowOfTheOpTableIsCovered) {
  int rows = 0;
#define KFUSE_BINARY_OP(name, str, rule, expr, tol) rows += !is_bitwise(Op::name);
#include "kfuse/ops.def"
  // The bitwise ops and shifts (integers only) are covered by tests/unit/test_bitwise.cpp.
  EXPECT_EQ(rows, static_cast<int>(std::size(kBinary)));
}

TEST(BinaryOp, IntegerArithmeticIsExactAndWraps) {
  auto a = random_ints(11, 31, -1000, 1000), b = random_ints(11, 32, -1000, 1000);
  auto ewise = [&](auto f) {
    std::vector<double> e(a.size());
    for (size_t i = 0; i < a.size(); ++i) e[i] = f(a[i], b[i]);
    return e;
  };
  for (DType dt : {DType::I32, DType::I64}) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor ta = make_tensor(a, {11}, dt), tb = make_tensor(b, {11}, dt);
    expect_tensor(ta + tb, {11}, dt, ewise([](double x, double y) { return x + y; }));
    expect_tensor(ta - tb, {11}, dt, ewise([](double x, double y) { return x - y; }));
    expect_tensor(ta * tb, {11}, dt, ewise([](double x, double y) { return x * y; }));
    expect_tensor(maximum(ta, tb), {11}, dt, ewise(max_def));
    expect_tensor(minimum(ta, tb), {11}, dt, ewise(min_def));
    // true division of integers is float (f32), as torch
    expect_tensor(ta / tb, {11}, DType::F32, ewise([](double x, double y) { return x / y; }), kF32Eps);
  }
  // i32 overflow wraps around (two's complement), as in C++ unsigned arithmetic and torch
  Tensor big = make_tensor({2147483647, -2147483648.0, 65536}, {3}, DType::I32);
  expect_tensor(big + make_tensor({1, -1, 0}, {3}, DType::I32), {3}, DType::I32, {-2147483648.0, 2147483647, 65536});
  expect_tensor(big * make_tensor({1, 1, 65536}, {3}, DType::I32), {3}, DType::I32, {2147483647, -2147483648.0, 0});
  // i64 keeps values beyond i32 exactly
  Tensor l = make_tensor({3e12, -5e12}, {2}, DType::I64);
  expect_tensor(l * make_tensor({3, 1}, {2}, DType::I64), {2}, DType::I64, {9e12, -5e12});
}

TEST(BinaryOp, BoolMaximumAndLogic) {
  Tensor a = make_tensor({1, 1, 0, 0}, {4}, DType::Bool), b = make_tensor({1, 0, 1, 0}, {4}, DType::Bool);
  expect_tensor(maximum(a, b), {4}, DType::Bool, {1, 1, 1, 0});
  expect_tensor(minimum(a, b), {4}, DType::Bool, {1, 0, 0, 0});
  expect_tensor(logical_and(a, b), {4}, DType::Bool, {1, 0, 0, 0});
  expect_tensor(logical_or(a, b), {4}, DType::Bool, {1, 1, 1, 0});
  expect_tensor(a == b, {4}, DType::Bool, {1, 0, 0, 1});
  // logic on numbers: non-zero (NaN included) is true
  expect_tensor(logical_and(make_tensor({2.5, kNaN, 0, -1}, {4}), make_tensor({3, 7, 1, 0}, {4}, DType::I32)), {4},
                DType::Bool, {1, 1, 0, 0});
}

TEST(BinaryOp, MixedDtypesComputeInThePromotedType) {
  // i64 + f32 -> f32 and i32 + i64 -> i64, with the operands converted first
  Tensor i = make_tensor({1, -2, 3}, {3}, DType::I64), f = make_tensor({0.5, 0.25, -1.5}, {3}, DType::F32);
  expect_tensor(i + f, {3}, DType::F32, {1.5, -1.75, 1.5});
  expect_tensor(make_tensor({7, 8, 9}, {3}, DType::I32) + i, {3}, DType::I64, {8, 6, 12});
  expect_tensor(make_tensor({1, 0, 1}, {3}, DType::Bool) + make_tensor({7, 8, 9}, {3}, DType::I32), {3}, DType::I32,
                {8, 8, 10});
  // the comparison happens in the promoted type: 2 (i32) < 2.5 (f64)
  expect_tensor(make_tensor({2, 3}, {2}, DType::I32) < make_tensor({2.5, 2.5}, {2}, DType::F64), {2}, DType::Bool,
                {1, 0});
}

TEST(BinaryOp, ScalarOperands) {
  auto v = random_values(10, 41);
  auto sv = stored_values(v, DType::F32);
  Tensor x = make_tensor(v, {2, 5});
  auto each = [&](auto f) {
    std::vector<double> e(sv.size());
    for (size_t i = 0; i < sv.size(); ++i) e[i] = f(sv[i]);
    return e;
  };
  double r = 2e-7;  // one f32 rounding of one op (plus the f32 rounding of the scalar)
  expect_tensor(x + 2.5, {2, 5}, DType::F32, each([](double a) { return a + 2.5; }), r, 1e-7);
  expect_tensor(2.5 - x, {2, 5}, DType::F32, each([](double a) { return 2.5 - a; }), r, 1e-7);
  expect_tensor(x * 3.0, {2, 5}, DType::F32, each([](double a) { return a * 3; }), r);
  expect_tensor(3.0 / x, {2, 5}, DType::F32, each([](double a) { return 3 / a; }), r);
  expect_tensor(x / 4.0, {2, 5}, DType::F32, each([](double a) { return a / 4; }), r);
  expect_tensor(x - 1.0, {2, 5}, DType::F32, each([](double a) { return a - 1; }), r, 1e-7);
  expect_tensor(maximum(x, 0.0), {2, 5}, DType::F32, each([](double a) { return a > 0 ? a : 0.0; }));
  expect_tensor(minimum(x, 0.5), {2, 5}, DType::F32, each([](double a) { return a < 0.5 ? a : 0.5; }));
  expect_tensor(kfuse::pow(x, 2.0), {2, 5}, DType::F32, each([](double a) { return a * a; }), r);
  expect_tensor(kfuse::pow(kfuse::abs(x), 0.5), {2, 5}, DType::F32,
                each([](double a) { return std::sqrt(std::fabs(a)); }), 2e-6);
  expect_tensor(x > 0.0, {2, 5}, DType::Bool, each([](double a) { return a > 0 ? 1.0 : 0.0; }));
  expect_tensor(x <= 0.25, {2, 5}, DType::Bool, each([](double a) { return a <= 0.25 ? 1.0 : 0.0; }));
  // scalar comparisons with the other operators
  Tensor k = make_tensor({1, 2, 3}, {3}, DType::I32);
  expect_tensor(k == 2.0, {3}, DType::Bool, {0, 1, 0});
  expect_tensor(k != 2.0, {3}, DType::Bool, {1, 0, 1});
  expect_tensor(k < 2.0, {3}, DType::Bool, {1, 0, 0});
  expect_tensor(k >= 2.0, {3}, DType::Bool, {0, 1, 1});
  expect_tensor(k > 1.5, {3}, DType::Bool, {0, 1, 1});
  expect_tensor(-k, {3}, DType::I32, {-1, -2, -3});
  expect_tensor(1.0 + k, {3}, DType::I32, {2, 3, 4});
  expect_tensor(10.0 * k, {3}, DType::I32, {10, 20, 30});
  // the tensor-tensor operator forms
  Tensor y = make_tensor({4, 4, 1}, {3}, DType::I32);
  expect_tensor(k - y, {3}, DType::I32, {-3, -2, 2});
  expect_tensor(k * y, {3}, DType::I32, {4, 8, 3});
  expect_tensor(k != y, {3}, DType::Bool, {1, 1, 1});
  expect_tensor(k <= y, {3}, DType::Bool, {1, 1, 0});
  expect_tensor(k > y, {3}, DType::Bool, {0, 0, 1});
  expect_tensor(k >= y, {3}, DType::Bool, {0, 0, 1});
}

// ---- where and clamp ----
TEST(Where, SelectsWithBroadcastAndPromotion) {
  auto cv = random_ints(12, 51, 0, 1);
  auto av = random_values(4, 52), bv = random_ints(3, 53, -9, 9);
  Tensor c = make_tensor(cv, {3, 4}, DType::Bool);
  Tensor a = make_tensor(av, {4}, DType::F64);     // broadcast along rows
  Tensor b = make_tensor(bv, {3, 1}, DType::I32);  // broadcast along columns
  auto e = generate({3, 4}, [&](const std::vector<int64_t>& i) { return cv[i[0] * 4 + i[1]] ? av[i[1]] : bv[i[0]]; });
  expect_tensor(where(c, a, b), {3, 4}, DType::F64, e);
  // a scalar-shaped condition broadcast over the operands; NaN operands pass through untouched
  Tensor n = make_tensor({kNaN, kInf}, {2});
  expect_tensor(where(make_tensor({1}, {}, DType::Bool), n, make_tensor({1, 2}, {2})), {2}, DType::F32, {kNaN, kInf});
  expect_tensor(where(make_tensor({0}, {}, DType::Bool), make_tensor({1, 2}, {2}), n), {2}, DType::F32, {kNaN, kInf});
  // a condition built from a comparison of a transposed view
  Tensor x = make_tensor(av, {2, 2}).transpose();
  auto xt = transposed(stored_values(av, DType::F32), 2, 2);
  auto ex = generate(
      {2, 2}, [&](const std::vector<int64_t>& i) { return xt[i[0] * 2 + i[1]] > 0 ? xt[i[0] * 2 + i[1]] : 0.0; });
  expect_tensor(where(x > 0.0, x, zeros({})), {2, 2}, DType::F32, ex);
}

TEST(Clamp, BoundsNanAndIntegers) {
  auto v = random_values(17, 61, -3, 3);
  v[3] = kNaN;
  v[4] = kInf;
  v[5] = -kInf;
  auto sv = stored_values(v, DType::F32);
  auto each = [&](double lo, double hi) {
    std::vector<double> e(sv.size());
    for (size_t i = 0; i < sv.size(); ++i)
      e[i] = std::isnan(sv[i]) ? kNaN : (sv[i] < lo ? lo : (sv[i] > hi ? hi : sv[i]));
    return e;
  };
  Tensor x = make_tensor(v, {17});
  expect_tensor(clamp(x, -1.0, 1.5), {17}, DType::F32, each(-1.0, 1.5));
  expect_tensor(clamp(x, 0.0, std::nullopt), {17}, DType::F32, each(0.0, kInf));
  expect_tensor(clamp(x, std::nullopt, -0.5), {17}, DType::F32, each(-kInf, -0.5));
  expect_tensor(clamp(x, std::nullopt, std::nullopt), {17}, DType::F32, sv);
  // integer tensors with integral bounds stay integer
  expect_tensor(clamp(make_tensor({-5, 0, 5, 9}, {4}, DType::I32), -2.0, 6.0), {4}, DType::I32, {-2, 0, 5, 6});
}

}  // namespace
