// Golden tests of the remove_noop_views pass.
#include "passes/remove_noop_views.hpp"

#include "pass_test_util.hpp"

using namespace kfuse;
using namespace kfuse::passes_test;
using detail::remove_noop_views;

namespace {
std::string run(const std::vector<Tensor>& roots) { return run_checked(remove_noop_views, roots); }
void expect_unchanged(const std::vector<Tensor>& roots) { passes_test::expect_unchanged(remove_noop_views, roots); }
}  // namespace

TEST(RemoveNoopViews, ReshapeOfReshapeIsOneReshape) {
  Tensor x = input({4, 3});
  Tensor r1 = raw(Op::Reshape, {12}, {x});
  Tensor r2 = raw(Op::Reshape, {2, 6}, {r1});
  EXPECT_EQ(run({r2}),
            "%0 = buffer f32[4, 3] in0\n"
            "%1 = reshape f32[2, 6] %0\n"
            "roots: %1\n");
}

TEST(RemoveNoopViews, ViewsToTheSameShapeAreRemoved) {
  Tensor x = input({2, 3});
  Tensor a = raw(Op::Reshape, {2, 3}, {x});
  Tensor b = raw(Op::Expand, {2, 3}, {a});
  Tensor c = raw(Op::Slice, {2, 3}, {b}, {0, 1, 0, 1});
  Tensor d = raw(Op::Permute, {2, 3}, {c}, {0, 1});
  Tensor e = raw(Op::Pad, {2, 3}, {d}, {0, 0, 0, 0}, {0.0});
  EXPECT_EQ(run({exp(e)}),
            "%0 = buffer f32[2, 3] in0\n"
            "%1 = exp f32[2, 3] %0\n"
            "roots: %1\n");
}

TEST(RemoveNoopViews, ReshapeBackToTheOriginalShapeDisappears) {
  Tensor x = input({4, 3});
  Tensor y = x.reshape({12}).reshape({4, 3});  // the API makes this reshape(x) to x's own shape
  EXPECT_EQ(text({y}),
            "%0 = buffer f32[4, 3] in0\n"
            "%1 = reshape f32[4, 3] %0\n"
            "roots: %1\n");
  EXPECT_EQ(run({y}),
            "%0 = buffer f32[4, 3] in0\n"
            "roots: %0\n");
}

TEST(RemoveNoopViews, PermuteOfPermuteIsComposed) {
  Tensor x = input({2, 3, 4});
  Tensor y = x.permute({1, 0, 2}).permute({0, 2, 1});
  EXPECT_EQ(run({y}),
            "%0 = buffer f32[2, 3, 4] in0\n"
            "%1 = permute f32[3, 4, 2] %0 perm=[1, 2, 0]\n"
            "roots: %1\n");
}

TEST(RemoveNoopViews, PermutesComposingToTheIdentityDisappear) {
  Tensor x = input({2, 3, 4});
  Tensor y = x.permute({1, 2, 0}).permute({2, 0, 1});
  EXPECT_EQ(run({y * 2.0}),
            "%0 = buffer f32[2, 3, 4] in0\n"
            "%1 = const f32[2, 3, 4] 2\n"
            "%2 = mul f32[2, 3, 4] %0, %1\n"
            "roots: %2\n");
}

TEST(RemoveNoopViews, PermuteOfUnitAxesBecomesAReshapeAndMerges) {
  Tensor x = input({4, 1, 3});
  Tensor y = x.permute({1, 0, 2}).reshape({4, 3});
  EXPECT_EQ(run({y}),
            "%0 = buffer f32[4, 1, 3] in0\n"
            "%1 = reshape f32[4, 3] %0\n"
            "roots: %1\n");
}

TEST(RemoveNoopViews, ExpandOfExpandIsOneExpand) {
  Tensor x = input({1, 1, 3});
  Tensor a = raw(Op::Expand, {1, 2, 3}, {x});
  Tensor b = raw(Op::Expand, {5, 2, 3}, {a});
  EXPECT_EQ(run({b}),
            "%0 = buffer f32[1, 1, 3] in0\n"
            "%1 = expand f32[5, 2, 3] %0\n"
            "roots: %1\n");
}

TEST(RemoveNoopViews, SliceOfSliceIsOneSlice) {
  Tensor x = input({10, 4});
  Tensor y = x.slice({Range{2, 10, 2}, Range{1}}).slice({Range{1, 3}, Range{0, std::nullopt, 2}});
  EXPECT_EQ(run({y}),
            "%0 = buffer f32[10, 4] in0\n"
            "%1 = slice f32[2, 2] %0 starts=[4, 1] steps=[2, 2]\n"
            "roots: %1\n");
}

TEST(RemoveNoopViews, ChainsOfDifferentKindsStay) {
  Tensor x = input({2, 3});
  Tensor y = x.transpose().reshape({6});
  Tensor z = x.slice({Range{0, 1}}).expand({4, 3}).slice({Range{1, 3}});
  auto before = nodes({y, z});
  EXPECT_EQ(remove_noop_views(before), before);
  EXPECT_EQ(text(before),
            "%0 = buffer f32[2, 3] in0\n"
            "%1 = permute f32[3, 2] %0 perm=[1, 0]\n"
            "%2 = reshape f32[6] %1\n"
            "%3 = slice f32[1, 3] %0 starts=[0, 0] steps=[1, 1]\n"
            "%4 = expand f32[4, 3] %3\n"
            "%5 = slice f32[2, 3] %4 starts=[1, 0] steps=[1, 1]\n"
            "roots: %2, %5\n");
}

TEST(RemoveNoopViews, RealizedViewsAreNotLookedThrough) {
  Tensor x = input({4, 3});
  Tensor r1 = raw(Op::Reshape, {12}, {x});
  r1.eval();
  Tensor r2 = raw(Op::Reshape, {2, 6}, {r1});
  EXPECT_EQ(run({r2}),
            "%0 = realized f32[12] (reshape)\n"
            "%1 = reshape f32[2, 6] %0\n"
            "roots: %1\n");
}

TEST(RemoveNoopViews, SharedSubgraphsStayShared) {
  Tensor x = input({4, 3});
  Tensor r = raw(Op::Reshape, {3, 4}, {raw(Op::Reshape, {12}, {x})});
  Tensor a = exp(r);
  Tensor b = r + a;
  auto after = remove_noop_views(nodes({a, b}));
  EXPECT_EQ(after[1]->inputs[1], after[0]);
  EXPECT_EQ(text(after),
            "%0 = buffer f32[4, 3] in0\n"
            "%1 = reshape f32[3, 4] %0\n"
            "%2 = exp f32[3, 4] %1\n"
            "%3 = add f32[3, 4] %1, %2\n"
            "roots: %2, %3\n");
}

TEST(RemoveNoopViews, NothingToDoReturnsTheSameNodes) {
  Tensor x = input({4, 3});
  Tensor y = sum(exp(x.transpose()), 0);
  expect_unchanged({y, x});
}
