// Golden tests of the fold_constants pass.
#include "passes/fold_constants.hpp"

#include "pass_test_util.hpp"

using namespace kfuse;
using namespace kfuse::passes_test;
using detail::fold_constants;

namespace {
// Folded f32 constants are stored in f32; the oracle keeps the unrounded double.
constexpr double kF32 = 1e-7;
std::string run(const std::vector<Tensor>& roots, double rel = 0) { return run_checked(fold_constants, roots, rel); }
void expect_unchanged(const std::vector<Tensor>& roots) { passes_test::expect_unchanged(fold_constants, roots); }
}  // namespace

TEST(FoldConstants, ElementwiseChainOfConstants) {
  Tensor y = full({4, 3}, 2.0) * full({4, 3}, 3.0) + 1.0;
  EXPECT_EQ(run({y}),
            "%0 = const f32[4, 3] 7\n"
            "roots: %0\n");
}

TEST(FoldConstants, UsesTheReferenceFunctionsAndRoundsToTheDtype) {
  Tensor e = exp(scalar(1.0));
  Tensor d = exp(scalar(1.0, DType::F64));
  Tensor g = gelu(scalar(0.5, DType::F64), true);
  EXPECT_EQ(run({e, d, g}, kF32),
            "%0 = const f32[] 2.7182817\n"
            "%1 = const f64[] 2.718281828459045\n"
            "%2 = const f64[] 0.34571400982514394\n"
            "roots: %0, %1, %2\n");
}

TEST(FoldConstants, IntegerArithmeticWraps) {
  Tensor a = full({2}, 2147483647.0, DType::I32) + full({2}, 1.0, DType::I32);
  EXPECT_EQ(run({a}),
            "%0 = const i32[2] -2147483648\n"
            "roots: %0\n");
}

TEST(FoldConstants, CastsWhereAndComparisons) {
  Tensor c = full({3}, 2.7).cast(DType::I32);
  Tensor w = where(full({3}, 1.0) > 0.5, full({3}, 4.0), full({3}, 5.0));
  EXPECT_EQ(run({c, w}),
            "%0 = const i32[3] 2\n"
            "%1 = const f32[3] 4\n"
            "roots: %0, %1\n");
}

TEST(FoldConstants, ViewsOfAConstant) {
  Tensor y = scalar(2.5).reshape({1, 1}).expand({3, 4}).transpose().slice({Range{1, 3}});
  EXPECT_EQ(run({y}),
            "%0 = const f32[2, 3] 2.5\n"
            "roots: %0\n");
}

TEST(FoldConstants, PadAndConcatOfEqualConstants) {
  Tensor p = pad(full({2}, 3.0), {{1, 1}}, 3.0);
  Tensor q = pad(full({2}, 3.0), {{1, 1}}, 0.0);  // a different pad value: stays
  Tensor c = concat({full({2}, 3.0), full({1}, 3.0)}, 0);
  EXPECT_EQ(run({p, q, c}),
            "%0 = const f32[4] 3\n"
            "%1 = const f32[2] 3\n"
            "%2 = pad f32[4] %1 before=[1] after=[1] value=0\n"
            "%3 = const f32[3] 3\n"
            "roots: %0, %2, %3\n");
}

TEST(FoldConstants, ExactReductions) {
  Tensor c = full({4, 3}, 1.5);
  Tensor s = sum(c, 1);
  Tensor m = max(c, {0, 1}, true);
  Tensor a = argmin(c, {1});
  Tensor p = prod(full({5}, -1.0), {0});
  Tensor i = sum(full({1000}, 7.0, DType::I32));  // integer sums accumulate in i64
  EXPECT_EQ(run({s, m, a, p, i}),
            "%0 = const f32[4] 4.5\n"
            "%1 = const f32[1, 1] 1.5\n"
            "%2 = const i64[4] 0\n"
            "%3 = const f32[] -1\n"
            "%4 = const i64[] 7000\n"
            "roots: %0, %1, %2, %3, %4\n");
}

TEST(FoldConstants, InexactReductionsStay) {
  expect_unchanged({sum(full({3}, 0.1, DType::F64)), prod(full({4}, 2.0))});
}

TEST(FoldConstants, NaNConstantsFoldToNaN) {
  Tensor n = full({3}, std::nan(""));
  EXPECT_EQ(run({n + 1.0, sum(n), maximum(n, full({3}, 1.0))}),
            "%0 = const f32[3] nan\n"
            "%1 = const f32[] nan\n"
            "roots: %0, %1, %0\n");
}

TEST(FoldConstants, RandIotaAndBuffersAreNotFolded) {
  Tensor r = rand({3}, 1) * 2.0;
  Tensor i = arange(3) + 1.0;
  Tensor x = input({3}) * 2.0;
  expect_unchanged({r, i, x, matmul(full({2, 2}, 1.0), full({2, 2}, 1.0))});
}

TEST(FoldConstants, FoldsInsideALargerGraph) {
  Tensor x = input({2, 3});
  Tensor y = x * (full({2, 3}, 2.0) - 1.5);
  EXPECT_EQ(run({y}),
            "%0 = buffer f32[2, 3] in0\n"
            "%1 = const f32[2, 3] 0.5\n"
            "%2 = mul f32[2, 3] %0, %1\n"
            "roots: %2\n");
}
