// Golden tests of the canonical graph text (lib/graph/print_graph.cpp).
#include "pass_test_util.hpp"

using namespace kfuse;
using namespace kfuse::passes_test;

TEST(PrintGraph, NumbersNodesAndNamesBuffersByAppearance) {
  Tensor x = input({4, 3});
  Tensor w = input({3});
  Tensor y = sum(x * w + 1.5, 1, /*keepdim=*/true);
  EXPECT_EQ(text({y}),
            "%0 = buffer f32[4, 3] in0\n"
            "%1 = buffer f32[3] in1\n"
            "%2 = reshape f32[1, 3] %1\n"
            "%3 = expand f32[4, 3] %2\n"
            "%4 = mul f32[4, 3] %0, %3\n"
            "%5 = const f32[4, 3] 1.5\n"
            "%6 = add f32[4, 3] %4, %5\n"
            "%7 = sum f32[4, 1] %6 axes=[1]\n"
            "roots: %7\n");
}

TEST(PrintGraph, SameStructureGivesSameTextWhateverTheBufferIds) {
  auto build = [] {
    Tensor a = input({2, 2});
    Tensor b = input({2, 2});
    return text({exp(a - b), a});
  };
  std::string first = build();
  EXPECT_EQ(first, build());
  EXPECT_EQ(first,
            "%0 = buffer f32[2, 2] in0\n"
            "%1 = buffer f32[2, 2] in1\n"
            "%2 = sub f32[2, 2] %0, %1\n"
            "%3 = exp f32[2, 2] %2\n"
            "roots: %3, %0\n");
}

TEST(PrintGraph, PrintsTheAttributesOfEveryKind) {
  Tensor x = input({4, 6});
  Tensor s = x.slice({Range{1, 3}, Range{0, std::nullopt, 2}});
  Tensor p = pad(s, {{1, 0}, {0, 2}}, -0.5);
  Tensor t = x.transpose();
  Tensor c = concat({x, x}, 0);
  Tensor r = rand({3}, 7) + arange(0.0, 3.0, 0.5, DType::F32).slice({Range{0, 3}});
  Tensor m = argmax(x, {0, 1}, true);
  Tensor k = scalar(std::nan(""), DType::F64);
  EXPECT_EQ(text({p, t, c, r, m, k}),
            "%0 = buffer f32[4, 6] in0\n"
            "%1 = slice f32[2, 3] %0 starts=[1, 0] steps=[1, 2]\n"
            "%2 = pad f32[3, 5] %1 before=[1, 0] after=[0, 2] value=-0.5\n"
            "%3 = permute f32[6, 4] %0 perm=[1, 0]\n"
            "%4 = concat f32[8, 6] %0, %0 axis=0\n"
            "%5 = rand f32[3] seed=7 uniform\n"
            "%6 = iota f32[6] start=0 step=0.5\n"
            "%7 = slice f32[3] %6 starts=[0] steps=[1]\n"
            "%8 = add f32[3] %5, %7\n"
            "%9 = argmax i64[1, 1] %0 axes=[0, 1]\n"
            "%10 = const f64[] nan\n"
            "roots: %2, %3, %4, %8, %9, %10\n");
}

TEST(PrintGraph, RealizedNodesAreLeaves) {
  Tensor x = input({3});
  Tensor y = exp(x);
  y.eval();
  EXPECT_EQ(text({y + 1.0}),
            "%0 = realized f32[3] (exp)\n"
            "%1 = const f32[3] 1\n"
            "%2 = add f32[3] %0, %1\n"
            "roots: %2\n");
}

TEST(PrintGraph, NodeLabel) {
  Tensor x = input({4, 3});
  EXPECT_EQ(detail::node_label(*x.node()), "buffer f32[4, 3]");
  EXPECT_EQ(detail::node_label(*sum(x, 1, true).node()), "sum f32[4, 1] axes=[1]");
  EXPECT_EQ(detail::node_label(*full({}, -2.25, DType::F64).node()), "const f64[] -2.25");
  EXPECT_EQ(detail::node_label(*x.cast(DType::I32).node()), "cast i32[4, 3]");
}
