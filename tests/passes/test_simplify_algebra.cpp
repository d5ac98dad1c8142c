// Golden tests of the simplify_algebra pass.
#include "passes/simplify_algebra.hpp"

#include "pass_test_util.hpp"

using namespace kfuse;
using namespace kfuse::passes_test;
using detail::simplify_algebra;

namespace {
std::string run(const std::vector<Tensor>& roots) { return run_checked(simplify_algebra, roots); }
void expect_unchanged(const std::vector<Tensor>& roots) { passes_test::expect_unchanged(simplify_algebra, roots); }
}  // namespace

TEST(SimplifyAlgebra, IdentityElementsDisappear) {
  Tensor x = input({4, 3});
  Tensor y = exp(((1.0 * (x * 1.0) + 0.0) - 0.0) / 1.0);
  Tensor z = 0.0 + pow(x, 1.0);
  EXPECT_EQ(run({y, z}),
            "%0 = buffer f32[4, 3] in0\n"
            "%1 = exp f32[4, 3] %0\n"
            "roots: %1, %0\n");
}

TEST(SimplifyAlgebra, SquaresAndReciprocalsOfPow) {
  Tensor x = input({4, 3});
  EXPECT_EQ(run({pow(x, 2.0), pow(x, -1.0)}),
            "%0 = buffer f32[4, 3] in0\n"
            "%1 = square f32[4, 3] %0\n"
            "%2 = reciprocal f32[4, 3] %0\n"
            "roots: %1, %2\n");
  // other exponents stay: x*x*x rounds twice; sqrt(-0) is -0 where pow(-0, 0.5) is +0
  expect_unchanged({pow(x, 3.0), pow(x, 0.5), pow(x, -2.0), pow(x, x)});
}

TEST(SimplifyAlgebra, ConstantsAreSeenThroughViews) {
  Tensor x = input({4, 3});
  Tensor one = scalar(1.0).reshape({1, 1}).expand({4, 3});
  EXPECT_EQ(run({x * one}),
            "%0 = buffer f32[4, 3] in0\n"
            "roots: %0\n");
}

TEST(SimplifyAlgebra, IntegerIdentities) {
  Tensor i = input({5}, DType::I32);
  EXPECT_EQ(run({(i + 0.0) * 1.0, -(-i)}),
            "%0 = buffer i32[5] in0\n"
            "roots: %0, %0\n");
}

TEST(SimplifyAlgebra, IdentityThatWouldChangeTheDtypeStays) {
  // i32 * f32 one: the API casts i to f32 first, so the mul goes and the cast stays.
  Tensor i = input({3}, DType::I32);
  Tensor y = i * full({3}, 1.0, DType::F32);
  EXPECT_EQ(run({y}),
            "%0 = buffer i32[3] in0\n"
            "%1 = cast f32[3] %0\n"
            "roots: %1\n");
  Tensor b = input({3}, DType::I32);
  Tensor typed(make_node(Op::Add, DType::I64, {3}, {b.node(), full({3}, 0.0, DType::I64).node()}));
  expect_unchanged({typed});  // an i64 add of an i32 operand: replacing it would change the dtype
}

TEST(SimplifyAlgebra, MultiplyByZeroStays) {
  Tensor x = input({4});
  expect_unchanged({x * 0.0, 0.0 * x, x * 2.0, x + 1.0, 1.0 / x, 0.0 - x});
}

TEST(SimplifyAlgebra, NaNConstantsAreNotIdentities) {
  Tensor x = input({4});
  expect_unchanged({x * std::nan(""), x + std::nan(""), x / std::numeric_limits<double>::infinity()});
}

TEST(SimplifyAlgebra, NegNegAndIdempotentUnaries) {
  Tensor x = input({6});
  EXPECT_EQ(run({-(-x), abs(abs(x)), relu(relu(x)), floor(floor(x))}),
            "%0 = buffer f32[6] in0\n"
            "%1 = abs f32[6] %0\n"
            "%2 = relu f32[6] %0\n"
            "%3 = floor f32[6] %0\n"
            "roots: %0, %1, %2, %3\n");
}

TEST(SimplifyAlgebra, TripleNegIsOneNeg) {
  Tensor x = input({6});
  EXPECT_EQ(run({-(-(-x))}),
            "%0 = buffer f32[6] in0\n"
            "%1 = neg f32[6] %0\n"
            "roots: %1\n");
}

TEST(SimplifyAlgebra, CastToTheSameDtypeDisappears) {
  Tensor x = input({3});
  Tensor c(make_node(Op::Cast, DType::F32, {3}, {x.node()}));
  EXPECT_EQ(run({exp(c)}),
            "%0 = buffer f32[3] in0\n"
            "%1 = exp f32[3] %0\n"
            "roots: %1\n");
}

TEST(SimplifyAlgebra, LosslessCastChainsCollapse) {
  Tensor i = input({3}, DType::I32);
  Tensor f = input({3}, DType::F32);
  Tensor a = i.cast(DType::F64).cast(DType::F32);  // i32 -> f64 is exact: one cast
  Tensor b = i.cast(DType::I64).cast(DType::I32);  // back to the start: nothing
  Tensor c = f.cast(DType::F64).cast(DType::I64);  // f32 -> f64 is exact
  EXPECT_EQ(run({a, b, c}),
            "%0 = buffer i32[3] in0\n"
            "%1 = cast f32[3] %0\n"
            "%2 = buffer f32[3] in1\n"
            "%3 = cast i64[3] %2\n"
            "roots: %1, %0, %3\n");
}

TEST(SimplifyAlgebra, LossyCastChainsStay) {
  Tensor f = input({3}, DType::F32);
  Tensor l = input({3}, DType::I64);
  Tensor d = input({3}, DType::F64);
  expect_unchanged({f.cast(DType::I32).cast(DType::F32), l.cast(DType::F64).cast(DType::I64),
                    d.cast(DType::F32).cast(DType::F64), input({3}, DType::I32).cast(DType::F32).cast(DType::I32)});
}

TEST(SimplifyAlgebra, SameOperands) {
  Tensor x = input({4});
  Tensor c = x > 0.0;
  EXPECT_EQ(run({where(c, x, x), maximum(x, x), minimum(x, x), logical_and(c, c)}),
            "%0 = buffer f32[4] in0\n"
            "%1 = const f32[4] 0\n"
            "%2 = gt bool[4] %0, %1\n"
            "roots: %0, %0, %0, %2\n");
}

TEST(SimplifyAlgebra, NothingToDoReturnsTheSameNodes) {
  Tensor x = input({4, 3});
  Tensor w = input({3});
  expect_unchanged({log_softmax(x * w, -1), maximum(x, exp(x)), where(x > 0.0, x, -x)});
}
