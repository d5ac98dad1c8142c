// Common-subexpression elimination by construction: the graph is hash-consed, so recording the
// same expression twice yields the same node; distinct buffers stay distinct; released tensors
// release their nodes.
#include "test_util.hpp"

using namespace kfuse;
using namespace kfuse::test;

namespace {

TEST(GraphCse, SameExpressionIsTheSameNode) {
  Tensor x = make_tensor(random_values(12, 131), {3, 4});
  Tensor w = make_tensor(random_values(4, 132), {4});
  auto build = [&] { return log_softmax(exp(x) * w + 1.0, -1); };
  Tensor a = build(), b = build();
  EXPECT_EQ(a.node(), b.node());
  EXPECT_EQ(exp(x).node(), exp(x).node());
  EXPECT_EQ((x + w).node(), add(x, w).node());
  EXPECT_EQ(sum(x, 1).node(), sum(x, Axes{-1}).node());  // normalised axes
  EXPECT_EQ(x.reshape({12}).node(), x.reshape({-1}).node());
  EXPECT_EQ(x.transpose().node(), x.permute({1, 0}).node());
  EXPECT_EQ(x.slice({Range{1}}).node(), x.slice({Range{1, 3}}).node());
  EXPECT_EQ(layer_norm(x, {4}, w).node(), layer_norm(x, {4}, w).node());
  EXPECT_EQ(matmul(x, x.transpose()).node(), matmul(x, x.transpose()).node());
  EXPECT_EQ(zeros({3}).node(), zeros({3}).node());
  EXPECT_EQ(rand({3}, 5).node(), rand({3}, 5).node());
  EXPECT_EQ(arange(4).node(), arange(4).node());
  // identity views and same-dtype casts record nothing
  EXPECT_EQ(x.reshape({3, 4}).node(), x.node());
  EXPECT_EQ(x.cast(DType::F32).node(), x.node());
  EXPECT_EQ(x.permute({0, 1}).node(), x.node());
  EXPECT_EQ(x.slice({Range::all()}).node(), x.node());
  EXPECT_EQ(pad(x, {{0, 0}}).node(), x.node());
}

TEST(GraphCse, DifferentInputsOrAttributesAreDifferentNodes) {
  auto v = random_values(6, 133);
  Tensor a = make_tensor(v, {6}), b = make_tensor(v, {6});  // equal data, two buffers
  EXPECT_NE(a.node(), b.node());
  EXPECT_NE(exp(a).node(), exp(b).node());
  EXPECT_NE((a + 1.0).node(), (a + 2.0).node());
  EXPECT_NE((a + 1.0).node(), (a - 1.0).node());
  EXPECT_NE(sum(a.reshape({2, 3}), 0).node(), sum(a.reshape({2, 3}), 1).node());
  EXPECT_NE(sum(a, 0, true).node(), sum(a, 0, false).node());
  EXPECT_NE(rand({3}, 5).node(), rand({3}, 6).node());
  EXPECT_NE(rand({3}, 5).node(), randn({3}, 5).node());
  EXPECT_NE(zeros({3}).node(), zeros({3}, DType::F64).node());
  EXPECT_NE(a.cast(DType::I32).node(), a.cast(DType::I64).node());
  EXPECT_NE(gelu(a).node(), gelu(a, true).node());
  // ... and they compute independently
  EXPECT_EQ(values(exp(a)), values(exp(b)));
}

TEST(GraphCse, EvaluationDoesNotChangeIdentity) {
  Tensor x = make_tensor(random_values(5, 134), {5});
  Tensor y = sigmoid(x) * 3.0;
  auto before = y.node();
  y.eval();
  Tensor z = sigmoid(x) * 3.0;  // recorded after the evaluation
  EXPECT_EQ(z.node(), before);
  EXPECT_NE(z.node()->realized(), nullptr);
  EXPECT_EQ(values(z), values(y));
}

TEST(GraphCse, ReleasedTensorsReleaseTheirNodes) {
  size_t base = interned_node_count();
  {
    Tensor x = make_tensor(random_values(8, 135), {2, 4});
    Tensor y = softmax(x * 2.0 + 1.0, -1);
    EXPECT_GT(interned_node_count(), base + 3);
    size_t with_y = interned_node_count();
    Tensor y2 = softmax(x * 2.0 + 1.0, -1);  // shares every node
    EXPECT_EQ(interned_node_count(), with_y);
    y.eval();
  }
  EXPECT_EQ(interned_node_count(), base);
  // a consumer keeps its inputs alive after their handles are gone
  Tensor r;
  {
    Tensor x = make_tensor({1, 2}, {2});
    r = exp(x);
  }
  size_t kept = interned_node_count();
  EXPECT_GE(kept, base + 2);
  expect_tensor(r, {2}, DType::F32, {std::exp(1.0), std::exp(2.0)}, 4e-7);
  r = Tensor();
  EXPECT_EQ(interned_node_count(), base);
}

}  // namespace
