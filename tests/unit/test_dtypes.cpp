// Dtypes and type promotion as property tests: the result dtype of every op rule for every
// dtype pair against a table written here, the weak C++ scalar rule, NumPy broadcasting of
// random shapes against the independent rule in test_util.hpp, and cast semantics.
#include <random>

#include "test_util.hpp"

using namespace kfuse;
using namespace kfuse::test;

namespace {

constexpr DType B = DType::Bool, I32 = DType::I32, I64 = DType::I64, F32 = DType::F32, F64 = DType::F64;

// Promotion of two tensors, indexed [a][b] in the order bool, i32, i64, f32, f64: the higher
// category wins (bool < integer < float), then the larger size. Note i64 with f32 gives f32.
const DType kPromote[5][5] = {
    /* bool */ {B, I32, I64, F32, F64},
    /* i32  */ {I32, I32, I64, F32, F64},
    /* i64  */ {I64, I64, I64, F32, F64},
    /* f32  */ {F32, F32, F32, F32, F64},
    /* f64  */ {F64, F64, F64, F64, F64},
};
int idx(DType t) { return static_cast<int>(t); }

TEST(Promotion, TableForEveryPairAndEveryRule) {
  for (DType a : all_dtypes())
    for (DType b : all_dtypes()) {
      SCOPED_TRACE(::testing::Message() << dtype_name(a) << " with " << dtype_name(b));
      DType p = kPromote[idx(a)][idx(b)];
      EXPECT_EQ(promote_types(a, b), p);
      Tensor x = ones({2}, a), y = ones({2}, b);
      // Arith: promoted; refused when both are bool
      if (p == B) {
        EXPECT_THROW(add(x, y), UserError);
        EXPECT_THROW(mul(x, y), UserError);
      } else {
        EXPECT_EQ(add(x, y).dtype(), p);
        EXPECT_EQ(sub(x, y).dtype(), p);
        EXPECT_EQ(mul(x, y).dtype(), p);
      }
      // ArithBool: promoted, bool allowed
      EXPECT_EQ(maximum(x, y).dtype(), p);
      EXPECT_EQ(minimum(x, y).dtype(), p);
      // FloatMath: promoted, then bool/int become f32
      DType fm = is_float(p) ? p : F32;
      EXPECT_EQ(kfuse::div(x, y).dtype(), fm);
      EXPECT_EQ(kfuse::pow(x, y).dtype(), fm);
      // Compare and Logical: bool
      EXPECT_EQ(eq(x, y).dtype(), B);
      EXPECT_EQ(lt(x, y).dtype(), B);
      EXPECT_EQ(logical_and(x, y).dtype(), B);
      // where and concat promote their value operands; matmul too (bool refused)
      EXPECT_EQ(where(ones({2}, B), x, y).dtype(), p);
      EXPECT_EQ(concat({x, y}, 0).dtype(), p);
      if (a != B && b != B) { EXPECT_EQ(matmul(x, y).dtype(), p); }
      // the value survives promotion: 1 op 1
      if (p != B) { EXPECT_EQ(add(x, y).to_vector<double>(), (std::vector<double>{2, 2})); }
    }
}

TEST(Promotion, UnaryRules) {
  for (DType t : all_dtypes()) {
    SCOPED_TRACE(dtype_name(t));
    Tensor x = ones({3}, t);
    DType fm = is_float(t) ? t : F32;
    EXPECT_EQ(exp(x).dtype(), fm);
    EXPECT_EQ(sigmoid(x).dtype(), fm);
    EXPECT_EQ(logical_not(x).dtype(), B);
    EXPECT_EQ(sum(x).dtype(), is_float(t) ? t : I64);  // integer and bool sums go to i64
    EXPECT_EQ(max(x).dtype(), t);
    EXPECT_EQ(argmax(x).dtype(), I64);
    EXPECT_EQ(softmax(x).dtype(), fm);
    if (t == B) {
      EXPECT_THROW(neg(x), UserError);
      EXPECT_THROW(kfuse::abs(x), UserError);
      EXPECT_THROW(kfuse::round(x), UserError);
    } else {
      EXPECT_EQ(neg(x).dtype(), t);
      EXPECT_EQ(kfuse::floor(x).dtype(), t);
      EXPECT_EQ(relu(x).dtype(), t);
    }
  }
}

TEST(Promotion, ScalarsAreWeak) {
  // A C++ scalar only changes the dtype when its category is higher than the tensor's; an
  // integral-valued double (2.0) counts as an integer, a fractional or non-finite one as a float.
  struct Row {
    DType tensor;
    DType with_int;    // tensor * 2.0
    DType with_float;  // tensor * 0.5
  };
  const Row rows[] = {{B, I64, F32}, {I32, I32, F32}, {I64, I64, F32}, {F32, F32, F32}, {F64, F64, F64}};
  for (const Row& r : rows) {
    SCOPED_TRACE(dtype_name(r.tensor));
    Tensor x = ones({2}, r.tensor);
    if (r.tensor != B) {
      EXPECT_EQ((x * 2.0).dtype(), r.with_int);
      EXPECT_EQ((2.0 + x).dtype(), r.with_int);
    }
    EXPECT_EQ((x * 0.5).dtype(), r.with_float);
    EXPECT_EQ((0.5 - x).dtype(), r.with_float);
    EXPECT_EQ((x * kInf).dtype(), r.with_float);
    EXPECT_EQ((x + kNaN).dtype(), r.with_float);
    EXPECT_EQ((x > 0.5).dtype(), B);
    EXPECT_EQ(promote_with_scalar(r.tensor, DTypeCategory::Integer), r.tensor == B ? I64 : r.with_int);
    EXPECT_EQ(promote_with_scalar(r.tensor, DTypeCategory::Float), r.with_float);
  }
  // the values: int * 2.0 stays exact in i32; int * 0.5 is f32
  Tensor k = make_tensor({3, -7}, {2}, I32);
  expect_tensor(k * 2.0, {2}, I32, {6, -14});
  expect_tensor(k * 0.5, {2}, F32, {1.5, -3.5});
  expect_tensor(maximum(k, 0.0), {2}, I32, {3, 0});
  expect_tensor(k / 2.0, {2}, F32, {1.5, -3.5});  // division is float math
  // bool with an integer scalar becomes i64 (bool itself refuses arithmetic)
  expect_tensor(make_tensor({1, 0}, {2}, B) + 1.0, {2}, I64, {2, 1});
  // a weak f32 scalar stays in f64 precision for an f64 tensor
  expect_tensor(make_tensor({1}, {1}, F64) + 0.1, {1}, F64, {1.1});
}

TEST(Promotion, IntegralScalarsOutsideTheIntegerDtypeAreFloats) {
  // An integral double that the integer dtype it would be converted to cannot hold counts as a
  // float: the result is f32, never a wrapped or saturated constant (i32 * 3e9 wrapped, i32 *
  // 1e30 gave 0, bool * 1e30 gave INT64_MIN).
  Tensor k = make_tensor({1, -2}, {2}, I32);
  expect_tensor(k * 1e30, {2}, F32, {1e30, -2e30}, 1e-6);
  expect_tensor(k * 3e9, {2}, F32, {3e9, -6e9}, 1e-6);
  expect_tensor(3e9 + k, {2}, F32, {3e9 + 1, 3e9 - 2}, 1e-6);
  expect_tensor(maximum(k, 3e9), {2}, F32, {3e9, 3e9}, 1e-6);
  expect_tensor(minimum(k, -3e9), {2}, F32, {-3e9, -3e9}, 1e-6);
  expect_tensor(clamp(k, 0.0, 3e9), {2}, F32, {1, 0});
  expect_tensor(k < 3e9, {2}, B, {1, 1});             // was: compared with the wrapped -1294967296
  expect_tensor(k == -4294967295.0, {2}, B, {0, 0});  // wraps to 1 in i32
  Tensor b = make_tensor({1, 0}, {2}, B);
  expect_tensor(b * 1e30, {2}, F32, {1e30, 0}, 1e-6);
  expect_tensor(b + 9223372036854775808.0, {2}, F32, {9223372036854775808.0, 9223372036854775808.0}, 1e-6);
  // the bounds: the extremes of the integer dtype stay integers
  EXPECT_EQ((k + 2147483647.0).dtype(), I32);
  EXPECT_EQ((k + -2147483648.0).dtype(), I32);
  EXPECT_EQ((k + 2147483648.0).dtype(), F32);
  EXPECT_EQ((k + -2147483649.0).dtype(), F32);
  Tensor l = make_tensor({1}, {1}, I64);
  EXPECT_EQ((l * 3e9).dtype(), I64);
  EXPECT_EQ((l * -9223372036854775808.0).dtype(), I64);
  EXPECT_EQ((l * 9223372036854775808.0).dtype(), F32);  // 2^63: one past INT64_MAX
  EXPECT_EQ((b + -9223372036854775808.0).dtype(), I64);
  EXPECT_EQ((ones({2}, F64) * 1e30).dtype(), F64);
}

// Random shape pairs: compatible ones broadcast as NumPy does (checked on values), incompatible
// ones throw naming the first mismatching dimension from the right.
TEST(Broadcasting, RandomShapesFollowNumPy) {
  std::mt19937 g(7);
  auto dim = [&](int hi) { return static_cast<int64_t>(std::uniform_int_distribution<int>(0, hi)(g)); };
  int compatible = 0, incompatible = 0;
  for (int iter = 0; iter < 300; ++iter) {
    Shape a(static_cast<size_t>(dim(4))), b(static_cast<size_t>(dim(4)));
    for (auto& d : a) d = dim(3);
    for (auto& d : b) d = dim(3);
    // make most pairs compatible: copy or set 1 in b's trailing dims
    if (iter % 4 != 0)
      for (size_t i = 1; i <= std::min(a.size(), b.size()); ++i) {
        int64_t& db = b[b.size() - i];
        int64_t da = a[a.size() - i];
        if (da != 1 && db != 1 && db != da) db = dim(1) ? da : 1;
      }
    SCOPED_TRACE(::testing::Message() << shape_str(a) << " with " << shape_str(b));
    auto want = numpy_broadcast(a, b);
    std::vector<double> av(static_cast<size_t>(count_of(a))), bv(static_cast<size_t>(count_of(b)));
    for (size_t i = 0; i < av.size(); ++i) av[i] = static_cast<double>(i) + 1;
    for (size_t i = 0; i < bv.size(); ++i) bv[i] = 100.0 * static_cast<double>(i + 1);
    Tensor ta = make_tensor(av, a, I64), tb = make_tensor(bv, b, I64);
    if (want) {
      ++compatible;
      auto e = generate(*want,
                        [&](const std::vector<int64_t>& i) { return broadcast_at(av, a, i) + broadcast_at(bv, b, i); });
      expect_tensor(ta + tb, *want, I64, e);
      EXPECT_EQ(broadcast_to(ta, *want).shape(), *want);
    } else {
      ++incompatible;
      size_t k = 1;  // first mismatch from the right
      while (a[a.size() - k] == b[b.size() - k] || a[a.size() - k] == 1 || b[b.size() - k] == 1) ++k;
      std::string msg = "add: cannot broadcast " + shape_str(a) + " i64 with " + shape_str(b) + " i64: dimension -" +
                        std::to_string(k) + " is " + std::to_string(a[a.size() - k]) + " vs " +
                        std::to_string(b[b.size() - k]) + "; sizes must be equal or 1 (reshape or expand an operand)";
      EXPECT_USER_ERROR(ta + tb, msg);
    }
  }
  EXPECT_GT(compatible, 150);
  EXPECT_GT(incompatible, 10);
}

TEST(Cast, Semantics) {
  // float -> int truncates toward zero; NaN, +-Inf and out-of-range values give the minimum
  std::vector<double> f = {2.7, -2.7, 0.5, -0.0, kNaN, kInf, -kInf, 3e9, -3e9, 2147483520.0};
  const double m32 = -2147483648.0;
  expect_tensor(make_tensor(f, {10}, F64).cast(I32), {10}, I32, {2, -2, 0, 0, m32, m32, m32, m32, m32, 2147483520.0});
  const double m64 = -9223372036854775808.0;
  expect_tensor(make_tensor(f, {10}, F32).cast(I64), {10}, I64, {2, -2, 0, 0, m64, m64, m64, 3e9, -3e9, 2147483520.0});
  expect_tensor(make_tensor({1e19, -1e19}, {2}, F64).cast(I64), {2}, I64, {m64, m64});
  // anything -> bool tests != 0 (NaN is true)
  expect_tensor(make_tensor({0.0, -0.0, 0.1, kNaN, -kInf}, {5}, F32).cast(B), {5}, B, {0, 0, 1, 1, 1});
  expect_tensor(make_tensor({0, 5, -1}, {3}, I64).cast(B), {3}, B, {0, 1, 1});
  // bool -> numbers is 0/1
  expect_tensor(make_tensor({1, 0}, {2}, B).cast(F32), {2}, F32, {1, 0});
  expect_tensor(cast(make_tensor({1, 0}, {2}, B), I32), {2}, I32, {1, 0});
  // integer -> integer wraps
  expect_tensor(make_tensor({4294967301.0, 2147483648.0, -2147483649.0}, {3}, I64).cast(I32), {3}, I32,
                {5, m32, 2147483647});
  // integer -> float rounds to nearest (2^24 + 1 is not an f32)
  expect_tensor(make_tensor({16777217}, {1}, I32).cast(F32), {1}, F32, {16777216});
  expect_tensor(make_tensor({16777217}, {1}, I32).cast(F64), {1}, F64, {16777217});
  // f64 -> f32 rounds; overflow gives inf (checked on eval() only: the fp64 oracle does not
  // round float results to f32)
  expect_tensor(make_tensor({0.1}, {1}, F64).cast(F32), {1}, F32, {static_cast<double>(0.1f)});
  EXPECT_EQ(values(make_tensor({1e39, -1e39}, {2}, F64).cast(F32)), (std::vector<double>{kInf, -kInf}));
  // a cast to the same dtype is the tensor itself; casts of views and empties work
  Tensor x = make_tensor({1, 2}, {2});
  EXPECT_EQ(x.cast(F32).node(), x.node());
  expect_tensor(make_tensor({1.5, 2.5, 3.5, 4.5}, {2, 2}).transpose().cast(I32), {2, 2}, I32, {1, 3, 2, 4});
  expect_tensor(make_tensor({}, {0, 2}).cast(I64), {0, 2}, I64, {});
}

TEST(Dtypes, NamesSizesAndCategories) {
  const char* names[] = {"bool", "i32", "i64", "f32", "f64"};
  const size_t sizes[] = {1, 4, 8, 4, 8};
  for (DType t : all_dtypes()) {
    EXPECT_STREQ(dtype_name(t), names[idx(t)]);
    EXPECT_EQ(dtype_size(t), sizes[idx(t)]);
  }
  EXPECT_TRUE(is_bool(B));
  EXPECT_TRUE(is_integer(I32) && is_integer(I64) && !is_integer(B));
  EXPECT_TRUE(is_float(F32) && is_float(F64) && !is_float(I64));
  EXPECT_EQ(to_float_type(I64), F32);
  EXPECT_EQ(to_float_type(F64), F64);
  // each C++ element type round-trips through from_vector/to_vector
  EXPECT_EQ(Tensor::from_vector<int32_t>({-3, 4}, {2}).to_vector<int32_t>(), (std::vector<int32_t>{-3, 4}));
  EXPECT_EQ(Tensor::from_vector<int64_t>({1LL << 40}, {1}).to_vector<int64_t>(), (std::vector<int64_t>{1LL << 40}));
  EXPECT_EQ(Tensor::from_vector<bool>({true, false}, {2}).to_vector<bool>(), (std::vector<bool>{true, false}));
  EXPECT_EQ(Tensor::from_vector<double>({0.1}, {1}).to_vector<double>(), (std::vector<double>{0.1}));
  EXPECT_EQ(Tensor::from_vector<float>({0.1f}, {1}).dtype(), F32);
}

}  // namespace
