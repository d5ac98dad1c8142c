// Built-in patterns: the row-reduction families, recognised from the decompositions the
// composites record (lib/api/composites.cpp). They only NAME their group (k_softmax_f32, ...):
// the lattice would form the same group, and their epilogues (weight, bias, a following
// element-wise op) still join it. They use the public Pattern interface, like any plugin.
#include <algorithm>

#include "fusion/pattern_registry.hpp"

namespace kfuse::detail {

namespace {

constexpr int kBuiltinBenefit = 10;

// Collects the nodes of a match while walking it; each step says what it expected.
class Walk {
 public:
  std::vector<const Node*> nodes;
  std::string failure;

  bool fail(const std::string& why) {
    if (failure.empty()) failure = why;
    return false;
  }
  bool is(const Node* n, Op op) const { return n && n->op == op && !GraphView::is_input(*n); }
  void take(const Node* n) {
    if (std::find(nodes.begin(), nodes.end(), n) == nodes.end()) nodes.push_back(n);
  }
  /// `n` without a broadcast back over reduced axes (Expand of a kept-shape value).
  const Node* unbroadcast(const Node* n) {
    if (is(n, Op::Expand)) {
      take(n);
      return n->inputs[0].get();
    }
    return n;
  }
  /// reduce_op(x): `n` is that reduction of `x` (over `axes` when given). Takes it.
  bool reduction_of(const Node* n, Op reduce_op, const Node* x, const std::vector<int64_t>* axes = nullptr) {
    if (!is(n, reduce_op) || n->inputs[0].get() != x) return false;
    if (axes && n->attrs.ints != *axes) return false;
    take(n);
    return true;
  }
  /// mean(x) as recorded: sum(x) * (1/n) with a constant. Returns the sum or null.
  const Node* mean_of(const Node* n, const Node* x) {
    if (!is(n, Op::Mul)) return nullptr;
    for (int k = 0; k < 2; ++k) {
      const Node* s = n->inputs[k].get();
      const Node* c = n->inputs[1 - k].get();
      if (GraphView::is_inline_constant(*c) && is(s, Op::ReduceSum) && (!x || s->inputs[0].get() == x)) {
        take(n);
        take(s);
        return s;
      }
    }
    return nullptr;
  }
};

// softmax: exp(x - max(x)) / sum(exp(x - max(x)))
MatchResult match_softmax(const Node& root, const GraphView&) {
  Walk w;
  w.take(&root);
  const Node* e = root.inputs[0].get();
  if (!w.is(e, Op::Exp)) return MatchResult::fail("the numerator is not exp(...)");
  const Node* s = w.unbroadcast(root.inputs[1].get());
  if (!w.reduction_of(s, Op::ReduceSum, e))
    return MatchResult::fail("the divisor is not sum(numerator) broadcast back");
  w.take(e);
  const Node* d = e->inputs[0].get();
  if (!w.is(d, Op::Sub)) return MatchResult::fail("exp's argument is not x - max(x)");
  const Node* x = d->inputs[0].get();
  const Node* m = w.unbroadcast(d->inputs[1].get());
  if (!w.reduction_of(m, Op::ReduceMax, x, &s->attrs.ints))
    return MatchResult::fail("exp's argument is not x - max(x) over the axes of the sum");
  w.take(d);
  return MatchResult::ok(w.nodes);
}

// log_softmax: (x - max(x)) - log(sum(exp(x - max(x))))
MatchResult match_log_softmax(const Node& root, const GraphView&) {
  Walk w;
  w.take(&root);
  const Node* d = root.inputs[0].get();
  if (!w.is(d, Op::Sub)) return MatchResult::fail("the minuend is not x - max(x)");
  const Node* l = w.unbroadcast(root.inputs[1].get());
  if (!w.is(l, Op::Log)) return MatchResult::fail("the subtrahend is not log(sum(exp(.))) broadcast back");
  w.take(l);
  const Node* s = l->inputs[0].get();
  if (!w.is(s, Op::ReduceSum) || !w.is(s->inputs[0].get(), Op::Exp) || s->inputs[0]->inputs[0].get() != d)
    return MatchResult::fail("the subtrahend is not log(sum(exp(minuend)))");
  w.take(s);
  w.take(s->inputs[0].get());
  const Node* x = d->inputs[0].get();
  const Node* m = w.unbroadcast(d->inputs[1].get());
  if (!w.reduction_of(m, Op::ReduceMax, x, &s->attrs.ints))
    return MatchResult::fail("the minuend is not x - max(x) over the axes of the sum");
  w.take(d);
  return MatchResult::ok(w.nodes);
}

// The scale of a normalisation: y = v * rsqrt(mean(square(v)) + eps), broadcast back. Fills the
// walk and returns v, or null with w.failure set.
const Node* match_rsqrt_scale(const Node& root, Walk& w) {
  w.take(&root);
  for (int k = 0; k < 2; ++k) {
    Walk t = w;
    const Node* v = root.inputs[k].get();
    const Node* r = t.unbroadcast(root.inputs[1 - k].get());
    if (!t.is(r, Op::Rsqrt)) continue;
    t.take(r);
    const Node* a = r->inputs[0].get();
    const Node* ms = a;
    if (t.is(a, Op::Add)) {  // + eps
      for (int j = 0; j < 2; ++j)
        if (GraphView::is_inline_constant(*a->inputs[j])) ms = a->inputs[1 - j].get();
      t.take(a);
    }
    const Node* sq = nullptr;
    if (t.is(ms, Op::Mul))
      for (int j = 0; j < 2 && !sq; ++j)
        if (t.is(ms->inputs[j].get(), Op::ReduceSum) && t.is(ms->inputs[j]->inputs[0].get(), Op::Square))
          sq = ms->inputs[j]->inputs[0].get();
    if (!sq || !t.mean_of(ms, sq)) {
      w.fail("the scale is not rsqrt(mean(square(v)) + eps)");
      continue;
    }
    if (sq->inputs[0].get() != v) {
      w.fail("the scale normalises another value than the one it multiplies");
      continue;
    }
    t.take(sq);
    w = t;
    return v;
  }
  if (w.failure.empty()) w.fail("neither operand is rsqrt(...) broadcast back");
  return nullptr;
}

// layer_norm: xc * rsqrt(mean(square(xc)) + eps) with xc = x - mean(x) (weight and bias join
// through the lattice)
MatchResult match_layer_norm(const Node& root, const GraphView&) {
  Walk w;
  const Node* xc = match_rsqrt_scale(root, w);
  if (!xc) return MatchResult::fail(w.failure);
  if (!w.is(xc, Op::Sub)) return MatchResult::fail("the normalised value is not centred (x - mean(x))");
  const Node* x = xc->inputs[0].get();
  const Node* m = w.unbroadcast(xc->inputs[1].get());
  const Node* s = w.mean_of(m, x);
  if (!s) return MatchResult::fail("the normalised value is not x - mean(x)");
  // Both means must reduce the same axes.
  for (const Node* n : w.nodes)
    if (n->op == Op::ReduceSum && n->attrs.ints != s->attrs.ints)
      return MatchResult::fail("the two means reduce different axes");
  w.take(xc);
  return MatchResult::ok(w.nodes);
}

// rms_norm: x * rsqrt(mean(square(x)) + eps) (x not centred)
MatchResult match_rms_norm(const Node& root, const GraphView&) {
  Walk w;
  const Node* v = match_rsqrt_scale(root, w);
  if (!v) return MatchResult::fail(w.failure);
  if (w.is(v, Op::Sub)) {
    Walk t;
    const Node* m = t.unbroadcast(v->inputs[1].get());
    if (t.mean_of(m, v->inputs[0].get()))
      return MatchResult::fail("the value is centred (x - mean(x)): that is layer_norm");
  }
  return MatchResult::ok(w.nodes);
}

}  // namespace

std::vector<std::shared_ptr<Pattern>> builtin_patterns() {
  // Registration order is the tie-break between equal benefits.
  return {
      make_pattern("softmax", {Op::Div}, kBuiltinBenefit, match_softmax),
      make_pattern("log_softmax", {Op::Sub}, kBuiltinBenefit, match_log_softmax),
      make_pattern("layer_norm", {Op::Mul}, kBuiltinBenefit, match_layer_norm),
      make_pattern("rms_norm", {Op::Mul}, kBuiltinBenefit, match_rms_norm),
  };
}

}  // namespace kfuse::detail
