// Golden tests of the pass driver (run_passes): the ordered list, the fixed point, the dumps and
// the `passes` log channel.
#include "passes/pass_manager.hpp"

#include "pass_test_util.hpp"

using namespace kfuse;
using namespace kfuse::passes_test;
using detail::run_passes;

TEST(PassManager, PassListIsOrdered) {
  std::vector<std::string> names;
  for (const auto& p : detail::graph_passes()) names.push_back(p.name);
  EXPECT_EQ(names, (std::vector<std::string>{"remove_noop_views", "slice_before_split", "fold_concat_split",
                                             "fold_constants", "simplify_algebra"}));
}

TEST(PassManager, RunsEveryPassToAFixedPoint) {
  Tensor x = input({4, 3});
  // reshape(x) to x's own shape, times (2 - 1), plus a slice of a concat of zeros.
  Tensor zero = concat({full({4, 3}, 0.0), full({2, 3}, 5.0)}, 0).slice({Range{0, 4}});
  Tensor y = exp(x.reshape({12}).reshape({4, 3}) * (full({4, 3}, 2.0) - 1.0) + zero);
  auto before = nodes({y});
  auto res = run_passes(before, /*dump=*/false);
  expect_same_values(before, res.roots);
  EXPECT_EQ(text(res.roots),
            "%0 = buffer f32[4, 3] in0\n"
            "%1 = exp f32[4, 3] %0\n"
            "roots: %1\n");
  EXPECT_EQ(res.iterations, 2);  // one sweep that changes, one that confirms
  EXPECT_TRUE(res.dumps.empty());
}

TEST(PassManager, LaterPassesEnableEarlierOnesAcrossSweeps) {
  // simplify_algebra (last) removes a same-dtype cast between two reshapes; only then can
  // remove_noop_views (first) merge them, and the merged reshape is to x's own shape.
  Tensor x = input({4, 3});
  Tensor flat = x.reshape({12});
  Tensor cast(make_node(Op::Cast, DType::F32, {12}, {flat.node()}));
  Tensor y = exp(cast.reshape({4, 3}));
  auto before = nodes({y});
  auto res = run_passes(before, false);
  expect_same_values(before, res.roots);
  EXPECT_EQ(text(res.roots),
            "%0 = buffer f32[4, 3] in0\n"
            "%1 = exp f32[4, 3] %0\n"
            "roots: %1\n");
  EXPECT_EQ(res.iterations, 3);
}

namespace {
// A pass that never settles: it wraps each root in a reshape, or unwraps one.
std::vector<NodeRef> toggle_reshape(const std::vector<NodeRef>& roots) {
  std::vector<NodeRef> out;
  for (const auto& r : roots)
    out.push_back(r->op == Op::Reshape ? r->inputs[0] : make_node(Op::Reshape, r->dtype, r->shape, {r}));
  return out;
}
}  // namespace

TEST(PassManager, StopsAtTheIterationCap) {
  Tensor x = input({2, 2});
  auto res = run_passes(nodes({x}), true, {{"toggle_reshape", toggle_reshape}});
  EXPECT_EQ(res.iterations, detail::kMaxPassIterations);
  EXPECT_EQ(res.dumps.size(), 1u + detail::kMaxPassIterations);
  EXPECT_EQ(res.roots[0], x.node());  // an even number of toggles
}

TEST(PassManager, DumpsTheGraphAfterEveryStep) {
  Tensor x = input({3});
  Tensor y = x * 1.0;
  auto res = run_passes(nodes({y}), /*dump=*/true);
  ASSERT_EQ(res.iterations, 2);
  ASSERT_EQ(res.dumps.size(), 1u + 2u * detail::graph_passes().size());
  EXPECT_EQ(res.dumps[0].first, "input");
  EXPECT_EQ(res.dumps[0].second,
            "%0 = buffer f32[3] in0\n"
            "%1 = const f32[3] 1\n"
            "%2 = mul f32[3] %0, %1\n"
            "roots: %2\n");
  EXPECT_EQ(res.dumps[5].first, "1.simplify_algebra");
  EXPECT_EQ(res.dumps[5].second,
            "%0 = buffer f32[3] in0\n"
            "roots: %0\n");
  EXPECT_EQ(res.dumps.back().first, "2.simplify_algebra");
}

TEST(PassManager, NothingToDoIsOneSweepAndTheSameNodes) {
  Tensor x = input({4, 3});
  auto before = nodes({log_softmax(x, -1), x});
  auto res = run_passes(before, false);
  EXPECT_EQ(res.roots, before);
  EXPECT_EQ(res.iterations, 1);
}

TEST(PassManager, LogsChangingStepsOnThePassesChannel) {
  Options saved = options();
  Options o = saved;
  o.log = {"passes"};
  set_options(o);
  Tensor x = input({3});
  testing::internal::CaptureStderr();
  run_passes(nodes({x + 0.0}), false);
  std::string err = testing::internal::GetCapturedStderr();
  set_options(saved);
  EXPECT_NE(err.find("[kfuse:passes] input: 3 nodes"), std::string::npos) << err;
  EXPECT_NE(err.find("[kfuse:passes] 1.simplify_algebra: 3 -> 1 nodes\n%0 = buffer f32[3] in0\nroots: %0\n"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("[kfuse:passes] done after 2 iteration(s)"), std::string::npos) << err;
  EXPECT_EQ(err.find("remove_noop_views"), std::string::npos) << "unchanged steps are not logged\n" << err;
}
