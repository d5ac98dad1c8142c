// The pattern phase: built-in patterns name the row-reduction families without changing the
// lattice's groups; code-registered patterns fire, are ordered by benefit, are refused with the
// fusion rule that failed, never break eval() when they throw; custom kernels run end to end.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <set>

#include <kfuse/kfuse.hpp>
#include <kfuse/pattern.hpp>
#include <kfuse/pattern_testkit.hpp>

#include "fusion/lower_group.hpp"
#include "fusion/partition.hpp"
#include "test_util.hpp"

namespace kfuse {
namespace {

using detail::Partition;
using detail::PartitionLimits;

Tensor input(Shape s, uint64_t seed = 1) {
  std::vector<double> v = test::random_values(static_cast<size_t>(shape_numel(s)), seed);
  return test::make_tensor(v, s);
}

Partition plan_of(const std::vector<Tensor>& ts, bool patterns = true) {
  std::vector<const Node*> roots;
  for (const auto& t : ts) roots.push_back(t.node().get());
  PartitionLimits lim;
  lim.use_patterns = patterns;
  return detail::partition_graph(roots, lim);
}

// Groups as sets of members (comparable across runs).
std::set<std::set<const Node*>> groups_of(const Partition& p) {
  std::set<std::set<const Node*>> out;
  for (const auto& g : p.groups) out.insert(std::set<const Node*>(g.nodes.begin(), g.nodes.end()));
  return out;
}

std::vector<std::string> fused_stems(const Partition& p) {
  std::vector<std::string> out;
  for (const auto& g : p.groups)
    if (g.kind == detail::GroupKind::Fused) out.push_back(detail::kernel_stem(g));
  return out;
}

struct Family {
  std::string pattern;
  std::function<Tensor(const Tensor&)> fn;
};

std::vector<Family> families() {
  Tensor w = input({16}, 7), b = input({16}, 8);
  return {
      {"softmax", [](const Tensor& x) { return softmax(x, -1); }},
      {"log_softmax", [](const Tensor& x) { return log_softmax(x, -1); }},
      {"layer_norm", [](const Tensor& x) { return layer_norm(x, {16}); }},
      {"layer_norm", [w, b](const Tensor& x) { return layer_norm(x, {16}, w, b); }},
      {"rms_norm", [](const Tensor& x) { return rms_norm(x); }},
      {"rms_norm", [w](const Tensor& x) { return rms_norm(x, w); }},
      {"softmax", [](const Tensor& x) { return softmax(x, 0); }},
      {"log_softmax", [](const Tensor& x) { return log_softmax(x * 2.0, -1) + 1.0; }},
  };
}

TEST(BuiltinPatterns, NameTheRowReductionFamiliesWithTheLatticeGroups) {
  for (const auto& f : families()) {
    Tensor y = f.fn(input({8, 16}));
    Partition with = plan_of({y}), without = plan_of({y}, false);
    EXPECT_EQ(groups_of(with), groups_of(without)) << f.pattern;
    ASSERT_EQ(fused_stems(with).size(), 1u) << f.pattern;
    EXPECT_EQ(fused_stems(with)[0], "k_" + f.pattern + "_f32");
    EXPECT_TRUE(testkit::fires(f.pattern, {y}));
  }
}

TEST(BuiltinPatterns, AgreeWithTheReference) {
  for (const auto& f : families())
    EXPECT_TRUE(testkit::check_against_reference(
        f.pattern, {{{8, 16}}, {{1, 16}}, {{33, 16}}},
        [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{f.fn(in[0])}; }))
        << f.pattern;
}

TEST(BuiltinPatterns, ReportWhyTheyDoNotMatch) {
  Tensor x = input({4, 8});
  Tensor y = exp(x) / sum(exp(x) * 2.0, -1, true);
  EXPECT_TRUE(testkit::does_not_fire("softmax", {y}, "the divisor is not sum(numerator) broadcast back"));
  Tensor z = x * rsqrt(sum(square(x), -1, true));  // sum, not mean: not rms_norm
  EXPECT_TRUE(testkit::does_not_fire("rms_norm", {z}, "the scale is not rsqrt(mean(square(v)) + eps)"));
  EXPECT_TRUE(testkit::does_not_fire("rms_norm", {layer_norm(x, {8})}, "that is layer_norm"));
}

MatchResult match_scaled_add(const Node& add, const GraphView& g) {
  const Node* m = add.inputs[1].get();
  if (m->op != Op::Mul) return MatchResult::fail("the second operand is not a product");
  return MatchResult::ok({&add, m});
}

TEST(CodePatterns, FireNameTheKernelAndAgreeWithTheReference) {
  testkit::ScopedPattern reg(make_pattern("scaled_add", {Op::Add}, 3, match_scaled_add));
  Tensor a = input({4, 8}, 1), b = input({4, 8}, 2);
  Tensor y = a + b * 3.0;
  EXPECT_TRUE(testkit::fires("scaled_add", {y}));
  EXPECT_EQ(fused_stems(plan_of({y})), std::vector<std::string>{"k_scaled_add_f32"});
  EXPECT_TRUE(testkit::does_not_fire("scaled_add", {b * 3.0 + a}, "the second operand is not a product"));
  EXPECT_TRUE(testkit::check_against_reference(
      "scaled_add", {{{4, 8}, {4, 8}}, {{1}, {1}}, {{3, 5, 7}, {3, 5, 7}}},
      [](const std::vector<Tensor>& in) { return std::vector<Tensor>{in[0] + in[1] * 3.0}; }));
  // The group stays open: an element-wise epilogue joins it, keeping the name.
  EXPECT_EQ(fused_stems(plan_of({tanh(a + b * 3.0)})), std::vector<std::string>{"k_scaled_add_f32"});
}

TEST(CodePatterns, MatchPatternTriesOnePatternWithoutRegistering) {
  auto p = make_pattern("probe", {Op::Add}, 1, match_scaled_add);
  Tensor a = input({4}), b = input({4}, 2);
  MatchResult r = match_pattern(*p, a + b * 2.0);
  EXPECT_TRUE(r.matched);
  EXPECT_EQ(r.match.nodes.size(), 2u);
  EXPECT_EQ(match_pattern(*p, a + b).reason, "the second operand is not a product");
}

// The softmax group's nodes as a pattern (any benefit), for ordering tests.
std::shared_ptr<Pattern> softmax_like(const std::string& name, int benefit) {
  return make_pattern(name, {Op::Div}, benefit, [](const Node& div, const GraphView& g) {
    std::vector<const Node*> nodes{&div};
    std::vector<const Node*> stack{&div};
    while (!stack.empty()) {  // everything above the div down to the input of the max
      const Node* n = stack.back();
      stack.pop_back();
      for (const auto& i : n->inputs)
        if (!GraphView::is_input(*i) && !GraphView::is_inline_constant(*i) &&
            std::find(nodes.begin(), nodes.end(), i.get()) == nodes.end()) {
          nodes.push_back(i.get());
          stack.push_back(i.get());
        }
    }
    return MatchResult::ok(nodes);
  });
}

PatternTrace trace(const std::string& pattern, const std::vector<Tensor>& ts) {
  auto t = testkit::traces_of(pattern, ts);
  return t.empty() ? PatternTrace{} : t.front();
}

TEST(CodePatterns, HigherBenefitWinsTiesGoToTheEarlierRegistration) {
  Tensor y = softmax(input({4, 8}), -1);
  {
    testkit::ScopedPattern low(softmax_like("low_softmax", 5));
    EXPECT_TRUE(testkit::fires("softmax", {y}));
    PatternTrace t = trace("low_softmax", {y});
    EXPECT_FALSE(t.matched);
    EXPECT_EQ(t.reason.rfind("refused: overlaps the match of softmax at div f32[4, 8]", 0), 0u) << t.reason;
  }
  {
    testkit::ScopedPattern tie(softmax_like("tie_softmax", 10));  // same benefit, registered after the built-in
    EXPECT_TRUE(testkit::fires("softmax", {y}));
    EXPECT_TRUE(testkit::does_not_fire("tie_softmax", {y}, "overlaps the match of softmax"));
  }
  {
    testkit::ScopedPattern high(softmax_like("high_softmax", 50));
    EXPECT_TRUE(testkit::fires("high_softmax", {y}));
    EXPECT_TRUE(testkit::does_not_fire("softmax", {y}, "refused: overlaps the match of high_softmax"));
    EXPECT_EQ(fused_stems(plan_of({y})), std::vector<std::string>{"k_high_softmax_f32"});
  }
}

TEST(CodePatterns, IllegalMatchesAreRefusedWithTheFusionRule) {
  Tensor x = input({4, 8});
  Tensor r = sum(x, 0, true), c = sum(x, 1, true);
  Tensor y = r.expand({4, 8}) + c.expand({4, 8});
  testkit::ScopedPattern reg(make_pattern("both_sums", {Op::Add}, 1, [](const Node& add, const GraphView&) {
    std::vector<const Node*> n{&add};
    for (const auto& e : add.inputs) {
      n.push_back(e.get());
      n.push_back(e->inputs[0].get());
    }
    return MatchResult::ok(n);
  }));
  EXPECT_TRUE(testkit::does_not_fire("both_sums", {y}, "refused: reduction domains differ"));
  EXPECT_TRUE(test::all_close(test::values(y), reference_values(y), 1e-5, 1e-5));

  testkit::ScopedPattern leaf(make_pattern("takes_input", {Op::Neg}, 1, [](const Node& n, const GraphView&) {
    return MatchResult::ok({&n, n.inputs[0].get()});
  }));
  EXPECT_TRUE(testkit::does_not_fire("takes_input", {-x}, "an input (a buffer or an already computed value)"));
  testkit::ScopedPattern noroot(make_pattern("no_root", {Op::Exp}, 1, [](const Node& n, const GraphView& g) {
    return MatchResult::ok({g.consumers(n).at(0)});
  }));
  EXPECT_TRUE(testkit::does_not_fire("no_root", {exp(x) * 2.0}, "does not contain its root"));
}

TEST(CodePatterns, AThrowingPatternIsDisabledAndEvalCarriesOn) {
  testkit::ScopedPattern reg(make_pattern("explodes", {Op::Mul}, 1, [](const Node&, const GraphView&) -> MatchResult {
    throw std::runtime_error("boom");
  }));
  Tensor x = input({4, 8});
  Tensor y = x * 2.0 + 1.0;
  testing::internal::CaptureStderr();
  auto traces = testkit::traces_of("explodes", {y});
  std::string err = testing::internal::GetCapturedStderr();
  ASSERT_EQ(traces.size(), 1u);
  EXPECT_EQ(traces[0].reason, "match() threw: boom (pattern disabled)");
  EXPECT_NE(err.find("pattern 'explodes' (from code) disabled: match() threw: boom"), std::string::npos) << err;
  bool found = false;
  for (const auto& s : pattern_status())
    if (s.name == "explodes") {
      found = true;
      EXPECT_FALSE(s.enabled);
      EXPECT_EQ(s.disabled_reason, "match() threw: boom");
    }
  EXPECT_TRUE(found);
  EXPECT_TRUE(testkit::traces_of("explodes", {y}).empty());  // no longer tried
  EXPECT_TRUE(test::all_close(test::values(y), reference_values(y), 1e-6, 1e-6));
}

TEST(CodePatterns, RegistrationRefusesDuplicateNames) {
  EXPECT_USER_ERROR(register_pattern(make_pattern("softmax", {}, 1, match_scaled_add)),
                    "register_pattern: a pattern named 'softmax' is already registered (from builtin)");
  EXPECT_FALSE(unregister_pattern("no_such_pattern"));
}

// A custom pointwise kernel: y = x * 2 + 1 computed as fma-free (x + x) + 1.
MatchResult custom_affine(const Node& add, const GraphView& g, bool write_output) {
  const Node* mul = add.inputs[0].get();
  if (mul->op != Op::Mul) return MatchResult::fail("not (x * c) + c");
  const Node* x = mul->inputs[0].get();
  KernelBuilder b;
  int in = b.input(*x);
  int out = b.output(write_output ? add : *mul);
  KExpr i = b.outer(add.numel());
  b.begin_phase(false);
  KExpr v = b.load(in, i);
  b.store(out, i, b.apply(Op::Add, DType::F32, {b.apply(Op::Add, DType::F32, {v, v}), b.constant(1, DType::F32)}));
  return MatchResult::ok({&add, mul}, std::make_shared<CustomKernel>(b.build()));
}

TEST(CustomKernels, RunInsteadOfTheGeneratedKernel) {
  testkit::ScopedPattern reg(make_pattern("affine", {Op::Add}, 1,
                                          [](const Node& n, const GraphView& g) { return custom_affine(n, g, true); }));
  Tensor x = input({5, 7});
  Tensor y = x * 2.0 + 1.0;
  Partition p = plan_of({y});
  ASSERT_EQ(p.groups.size(), 1u);
  ASSERT_TRUE(p.groups[0].custom_kernel);
  auto lowered = detail::lower_group(p.groups[0]);
  EXPECT_EQ(lowered.kernel.name, "k_affine_f32");
  EXPECT_NE(ir::print_kernel(lowered.kernel).find("store out0[o0] = (add.f32 (add.f32 t0 t0) 1)"), std::string::npos)
      << ir::print_kernel(lowered.kernel);
  EXPECT_TRUE(testkit::check_against_reference(
      "affine", {{{5, 7}}, {{1}}, {{2, 3, 4}}},
      [](const std::vector<Tensor>& in) { return std::vector<Tensor>{in[0] * 2.0 + 1.0}; }));
  // Closed group: the epilogue does not join it.
  EXPECT_EQ(plan_of({tanh(x * 2.0 + 1.0)}).groups.size(), 2u);
}

TEST(CustomKernels, EvalRunsTheSuppliedKernel) {
  // A kernel that computes x + 100 for x * 3: eval() must show the kernel's values, and
  // registering or removing it must not reuse plans made before (the plan cache).
  auto times3 = [](uint64_t seed) {
    Tensor x = input({3, 4}, seed);
    std::vector<double> xv = test::values(x), want(xv.size());
    for (size_t i = 0; i < xv.size(); ++i) want[i] = xv[i] * 3.0;
    return test::all_close(test::values(x * 3.0), want, 1e-6, 0);
  };
  EXPECT_TRUE(times3(1));
  auto reg = std::make_unique<testkit::ScopedPattern>(
      make_pattern("liar", {Op::Mul}, 1, [](const Node& mul, const GraphView& g) {
        KernelBuilder b;
        int in = b.input(*mul.inputs[0]);
        int out = b.output(mul);
        KExpr i = b.outer(mul.numel());
        b.begin_phase(false);
        b.store(out, i, b.apply(Op::Add, DType::F32, {b.load(in, i), b.constant(100, DType::F32)}));
        return MatchResult::ok({&mul}, std::make_shared<CustomKernel>(b.build()));
      }));
  Tensor x = input({3, 4}, 2);
  std::vector<double> xv = test::values(x), got = test::values(x * 3.0);
  for (size_t i = 0; i < xv.size(); ++i) EXPECT_FLOAT_EQ(got[i], xv[i] + 100);
  reg.reset();
  EXPECT_TRUE(times3(3));
}

TEST(CustomKernels, AKernelThatDoesNotBindTheGroupIsRefused) {
  testkit::ScopedPattern reg(make_pattern(
      "affine_bad", {Op::Add}, 1, [](const Node& n, const GraphView& g) { return custom_affine(n, g, false); }));
  Tensor x = input({5, 7});
  Tensor y = x * 2.0 + 1.0;
  EXPECT_TRUE(testkit::does_not_fire("affine_bad", {y},
                                     "its kernel does not write add f32[5, 7], which is needed outside the match"));
  EXPECT_TRUE(test::all_close(test::values(y), reference_values(y), 1e-6, 1e-6));
}

TEST(CustomKernels, TheBuilderNamesMistakes) {
  Tensor x = input({4});
  KernelBuilder b;
  int out = b.output(*x.node());
  EXPECT_USER_ERROR(b.input(*x.node()), "KernelBuilder: input() after output(): declare every input first");
  KExpr i = b.outer(4);
  EXPECT_USER_ERROR(b.store(out, i, b.constant(1, DType::F32)), "KernelBuilder: store(): call begin_phase() first");
  b.begin_phase(false);
  EXPECT_USER_ERROR(b.store(out, i, b.constant(1, DType::F64)),
                    "KernelBuilder: store(): the value is f64 but buffer out0 is f32 (apply Op::Cast)");
  EXPECT_USER_ERROR(
      b.accumulate(KernelBuilder::Reduce::Sum, i),
      "KernelBuilder: accumulate(): call begin_phase(true) first (accumulators fold over the reduce domain)");
  EXPECT_USER_ERROR(b.apply(Op::ReduceSum, DType::F32, {i}), "KernelBuilder: apply(sum): not an element-wise op");
}

TEST(PatternLog, ListsEveryPatternTriedPerNode) {
  Options saved = options();
  Options o = saved;
  o.log = {"patterns"};
  set_options(o);
  Tensor y = softmax(input({4, 8}), -1) - 1.0;
  testing::internal::CaptureStderr();
  plan_of({y});
  std::string err = testing::internal::GetCapturedStderr();
  set_options(saved);
  EXPECT_NE(err.find("[kfuse:patterns] %"), std::string::npos) << err;
  EXPECT_NE(err.find("div f32[4, 8]: [softmax: matched]"), std::string::npos) << err;
  EXPECT_NE(err.find("[log_softmax: the minuend is not x - max(x)]"), std::string::npos) << err;
}

TEST(PatternTraces, NameNodesAsExplainDoes) {
  Tensor x = input({4, 8});
  Tensor y = log_softmax(x, -1);
  auto ts = pattern_traces({y});
  bool matched = false;
  for (const auto& t : ts)
    if (t.pattern == "log_softmax" && t.matched) {
      matched = true;
      EXPECT_EQ(t.node.front(), '%');
      EXPECT_NE(t.node.find(" sub"), std::string::npos) << t.node;
    }
  EXPECT_TRUE(matched);
}

}  // namespace
}  // namespace kfuse
