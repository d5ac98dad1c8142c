// Golden tests of the fold_concat_split pass.
#include "passes/fold_concat_split.hpp"

#include "pass_test_util.hpp"

using namespace kfuse;
using namespace kfuse::passes_test;
using detail::fold_concat_split;

namespace {
std::string run(const std::vector<Tensor>& roots) { return run_checked(fold_concat_split, roots); }
void expect_unchanged(const std::vector<Tensor>& roots) { passes_test::expect_unchanged(fold_concat_split, roots); }
}  // namespace

TEST(FoldConcatSplit, SliceSelectingOnePartIsThatPart) {
  Tensor a = input({2, 3});
  Tensor b = input({4, 3});
  Tensor c = concat({a, b}, 0);
  EXPECT_EQ(run({exp(c.slice({Range{2, 6}})), c.slice({Range{0, 2}})}),
            "%0 = buffer f32[4, 3] in0\n"
            "%1 = exp f32[4, 3] %0\n"
            "%2 = buffer f32[2, 3] in1\n"
            "roots: %1, %2\n");
}

TEST(FoldConcatSplit, SliceInsideOnePartIsASliceOfThatPart) {
  Tensor a = input({3, 2});
  Tensor b = input({3, 5});
  Tensor c = concat({a, b}, 1);
  Tensor s = c.slice({Range{1, 3}, Range{3, 7, 2}});  // columns 3 and 5 are b's 1 and 3
  EXPECT_EQ(run({s}),
            "%0 = buffer f32[3, 5] in0\n"
            "%1 = slice f32[2, 2] %0 starts=[1, 1] steps=[1, 2]\n"
            "roots: %1\n");
}

TEST(FoldConcatSplit, SliceSpanningSomePartsConcatsThem) {
  Tensor a = input({2});
  Tensor b = input({3});
  Tensor c = input({4});
  Tensor s = concat({a, b, c}, 0).slice({Range{1, 5}});  // a[1:], all of b
  EXPECT_EQ(run({s}),
            "%0 = buffer f32[2] in0\n"
            "%1 = slice f32[1] %0 starts=[1] steps=[1]\n"
            "%2 = buffer f32[3] in1\n"
            "%3 = concat f32[4] %1, %2 axis=0\n"
            "roots: %3\n");
}

TEST(FoldConcatSplit, SlicesThatNeedEveryPartOrStepAcrossPartsStay) {
  Tensor a = input({2, 2});
  Tensor b = input({3, 2});
  Tensor c = concat({a, b}, 0);
  expect_unchanged({c.slice({Range{1, 4}}), c.slice({Range{0, 5, 2}}), c.slice({Range{}, Range{1}})});
}

TEST(FoldConcatSplit, RealizedConcatIsALeaf) {
  Tensor a = input({2});
  Tensor b = input({2});
  Tensor c = concat({a, b}, 0);
  c.eval();
  expect_unchanged({c.slice({Range{0, 2}})});
}

TEST(FoldConcatSplit, NothingToDoReturnsTheSameNodes) {
  Tensor x = input({4, 3});
  expect_unchanged({x.slice({Range{1, 3}}), concat({x, x}, 1), sum(x, 0)});
}
