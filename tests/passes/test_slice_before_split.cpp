// Golden tests of the slice_before_split pass.
#include "passes/slice_before_split.hpp"

#include "pass_test_util.hpp"

using namespace kfuse;
using namespace kfuse::passes_test;
using detail::slice_before_split;

namespace {
std::string run(const std::vector<Tensor>& roots) { return run_checked(slice_before_split, roots); }
void expect_unchanged(const std::vector<Tensor>& roots) { passes_test::expect_unchanged(slice_before_split, roots); }
}  // namespace

// Attention's q / k / v split: [B, S, 3*H*D] viewed as [B, S, 3, H, D], one of the three taken.
TEST(SliceBeforeSplit, ASliceOfTheOuterSplitDimIsOneRangeOfTheSource) {
  Tensor x = input({2, 3, 12});
  Tensor r = x.reshape({2, 3, 3, 2, 2});
  Tensor k = r.slice({Range::all(), Range::all(), Range{1, 2}});
  EXPECT_EQ(run({k}),
            "%0 = buffer f32[2, 3, 12] in0\n"
            "%1 = slice f32[2, 3, 4] %0 starts=[0, 0, 4] steps=[1, 1, 1]\n"
            "%2 = reshape f32[2, 3, 1, 2, 2] %1\n"
            "roots: %2\n");
}

// Three consumers of one reshape each get their own chain (the reshape is no longer shared).
TEST(SliceBeforeSplit, SlicesThatSharedAReshapeEachReadTheSource) {
  Tensor x = input({4, 6});
  Tensor r = x.reshape({4, 3, 2});
  std::vector<Tensor> parts;
  for (int64_t i = 0; i < 3; ++i) parts.push_back(r.slice({Range::all(), Range{i, i + 1}}));
  EXPECT_EQ(run(parts),
            "%0 = buffer f32[4, 6] in0\n"
            "%1 = slice f32[4, 2] %0 starts=[0, 0] steps=[1, 1]\n"
            "%2 = reshape f32[4, 1, 2] %1\n"
            "%3 = slice f32[4, 2] %0 starts=[0, 2] steps=[1, 1]\n"
            "%4 = reshape f32[4, 1, 2] %3\n"
            "%5 = slice f32[4, 2] %0 starts=[0, 4] steps=[1, 1]\n"
            "%6 = reshape f32[4, 1, 2] %5\n"
            "roots: %2, %4, %6\n");
}

// A dim the reshape does not split takes the slice as it is, step included; size-1 dims the
// reshape adds or drops are whole either way.
TEST(SliceBeforeSplit, UnsplitDimsKeepTheirStepAndSizeOneDimsAreWhole) {
  Tensor x = input({5, 1, 6});
  Tensor r = x.reshape({5, 2, 3});  // drops the 1, splits 6
  Tensor s = r.slice({Range{0, 5, 2}, Range{1, 2}});
  EXPECT_EQ(run({s}),
            "%0 = buffer f32[5, 1, 6] in0\n"
            "%1 = slice f32[3, 1, 3] %0 starts=[0, 0, 3] steps=[2, 1, 1]\n"
            "%2 = reshape f32[3, 1, 3] %1\n"
            "roots: %2\n");
  Tensor y = input({6, 4});
  Tensor u = y.reshape({1, 6, 4}).slice({Range::all(), Range{1, 6, 2}});  // adds a 1
  EXPECT_EQ(run({u}),
            "%0 = buffer f32[6, 4] in0\n"
            "%1 = slice f32[3, 4] %0 starts=[1, 0] steps=[2, 1]\n"
            "%2 = reshape f32[1, 3, 4] %1\n"
            "roots: %2\n");
}

TEST(SliceBeforeSplit, SlicesThatAreNotOneRangeOfTheSourceStay) {
  Tensor x = input({4, 6});
  Tensor split = x.reshape({4, 3, 2});
  expect_unchanged({
      split.slice({Range::all(), Range::all(), Range{0, 1}}),  // an inner split dim narrowed
      split.slice({Range::all(), Range{0, 3, 2}}),             // a step over blocks of 2
      x.reshape({24}).slice({Range{2, 10}}),                   // a merge
      x.reshape({2, 12}).slice({Range{0, 1}}),                 // dims regrouped (4*6 -> 2*12)
      split.slice({Range::all(), Range{1, 1}}),                // empty
  });
}

TEST(SliceBeforeSplit, RealizedReshapeIsALeaf) {
  Tensor x = input({4, 6});
  Tensor r = x.reshape({4, 3, 2});
  r.eval();
  expect_unchanged({r.slice({Range::all(), Range{1, 2}})});
}
