// A fusion pattern plugin that supplies its OWN KERNEL: softmax over the last axis, written
// directly in kfuse's kernel IR through kfuse::KernelBuilder (three passes over each row: max,
// sum of exponentials, normalised store). kfuse runs this kernel instead of the one it would
// generate, on any backend (the IR is backend-neutral).
//
// Its benefit (20) is above the built-in patterns' (10), so it wins over the built-in "softmax"
// pattern, which is then reported as refused ("overlaps the match of row_softmax").
#include <kfuse/pattern.hpp>

namespace {

using kfuse::GraphView;
using kfuse::KExpr;
using kfuse::MatchResult;
using kfuse::Node;
using kfuse::Op;

// `n` seen through a broadcast back over the reduced axes.
const Node* unbroadcast(const Node* n, std::vector<const Node*>& nodes) {
  if (n->op != Op::Expand) return n;
  nodes.push_back(n);
  return n->inputs[0].get();
}

class RowSoftmax : public kfuse::Pattern {
 public:
  std::string name() const override { return "row_softmax"; }
  std::vector<Op> root_ops() const override { return {Op::Div}; }
  int benefit() const override { return 20; }

  MatchResult match(const Node& div, const GraphView& g) const override {
    // exp(x - max(x)) / sum(exp(x - max(x))), reductions over the last axis only.
    std::vector<const Node*> nodes{&div};
    const Node* e = div.inputs[0].get();
    if (e->op != Op::Exp) return MatchResult::fail("the numerator is not exp(...)");
    const Node* s = unbroadcast(div.inputs[1].get(), nodes);
    if (s->op != Op::ReduceSum || s->inputs[0].get() != e)
      return MatchResult::fail("the divisor is not sum(numerator)");
    const Node* d = e->inputs[0].get();
    if (d->op != Op::Sub) return MatchResult::fail("exp's argument is not x - max(x)");
    const Node* x = d->inputs[0].get();
    const Node* m = unbroadcast(d->inputs[1].get(), nodes);
    if (m->op != Op::ReduceMax || m->inputs[0].get() != x || m->attrs.ints != s->attrs.ints)
      return MatchResult::fail("exp's argument is not x - max(x) over the same axes");
    const int64_t last = x->ndim() - 1;
    if (x->ndim() == 0 || s->attrs.ints != std::vector<int64_t>{last})
      return MatchResult::fail("only softmax over the last axis is supported");
    if (x->dtype != kfuse::DType::F32) return MatchResult::fail("only f32 is supported");
    if (GraphView::is_inline_constant(*x)) return MatchResult::fail("x is a constant");
    nodes.insert(nodes.end(), {e, s, d, m});
    if (g.outputs_of(nodes) != std::vector<const Node*>{&div})
      return MatchResult::fail("an intermediate value is also used outside the softmax");

    // The kernel: outer = rows (run-time extent), reduce = the last axis (compile-time).
    const int64_t cols = x->shape.back(), rows = x->numel() / (cols ? cols : 1);
    const auto f32 = kfuse::DType::F32;
    kfuse::KernelBuilder b;
    int in = b.input(*x);
    int out = b.output(div);
    KExpr row = b.outer(rows), col = b.reduce(cols);
    KExpr at = b.add(b.mul(row, b.index(cols)), col);
    KExpr v = b.load(in, at);
    b.begin_phase(true);
    KExpr mx = b.accumulate(kfuse::KernelBuilder::Reduce::Max, v);
    b.begin_phase(true);
    KExpr ex = b.apply(Op::Exp, f32, {b.apply(Op::Sub, f32, {v, mx})});
    KExpr sum = b.accumulate(kfuse::KernelBuilder::Reduce::Sum, ex);
    b.begin_phase(true);
    b.store(out, at, b.apply(Op::Div, f32, {ex, sum}));
    return MatchResult::ok(nodes, std::make_shared<kfuse::CustomKernel>(b.build()));
  }
};

void register_patterns(kfuse::PluginRegistrar& r) { r.add(std::make_shared<RowSoftmax>()); }

}  // namespace

KFUSE_PLUGIN("row_softmax", register_patterns)
