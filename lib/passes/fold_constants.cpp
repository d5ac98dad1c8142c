// Pass: constant folding (see fold_constants.hpp). One rule per op kind, chosen by a table.
#include "fold_constants.hpp"

#include <cmath>
#include <cstring>
#include <optional>

#include "../eval/reference_eval.hpp"
#include "rewrite.hpp"

namespace kfuse::detail {

namespace {

std::optional<double> const_of(const NodeRef& n) {
  if (n->op != Op::Const || !is_open(*n)) return std::nullopt;
  return n->attrs.reals.at(0);
}

// One element of `n` from one element of each input, with the evaluator's own code. An integer
// result a double cannot hold exactly (beyond 2^53) stays unfolded: constants hold doubles.
NodeRef fold_elementwise(const NodeRef& n) {
  std::vector<Values> vals;
  for (const auto& in : n->inputs) {
    auto c = const_of(in);
    if (!c) return nullptr;
    vals.push_back({num_from_double(*c, in->dtype)});
  }
  Node one;  // a one-element copy of n (evaluate_node reads op, dtype, shape and input dtypes)
  one.op = n->op;
  one.dtype = n->dtype;
  one.inputs = n->inputs;
  std::vector<const Values*> ins;
  for (const auto& v : vals) ins.push_back(&v);
  Num r = evaluate_node(one, ins).at(0);
  if (!is_float(n->dtype) && (r.i > (int64_t{1} << 53) || r.i < -(int64_t{1} << 53))) return nullptr;
  return make_const_like(*n, num_to_double(r, n->dtype));
}

// Views select elements of their input: every element of a constant is the constant.
NodeRef fold_view(const NodeRef& n) {
  auto c = const_of(n->inputs[0]);
  return c ? make_const_like(*n, *c) : nullptr;
}

NodeRef fold_pad(const NodeRef& n) {
  auto c = const_of(n->inputs[0]);
  if (!c || round_to_dtype(n->attrs.reals.at(0), n->dtype) != *c) return nullptr;  // NaN never matches
  return make_const_like(*n, *c);
}

NodeRef fold_concat(const NodeRef& n) {
  std::optional<double> first;
  for (const auto& in : n->inputs) {
    auto c = const_of(in);
    if (!c) return nullptr;
    if (!first) first = c;
    else if (std::memcmp(&*first, &*c, sizeof(double)) != 0) return nullptr;  // bitwise: NaN, -0
  }
  return make_const_like(*n, *first);
}

// c*n exactly, when every partial sum c*k (k <= n) is an exact double.
std::optional<double> exact_repeated_sum(double c, int64_t n) {
  if (std::isnan(c) || std::isinf(c)) return c;
  if (c == 0.0) return 0.0;
  int exp2 = 0;
  double m = std::frexp(std::fabs(c), &exp2);  // |c| = m * 2^exp2, m in [0.5, 1)
  while (m != std::floor(m)) m *= 2;           // now |c| = m * 2^e with m an integer below 2^53
  if (m * static_cast<double>(n) >= 0x1p53) return std::nullopt;
  return c * static_cast<double>(n);
}

NodeRef fold_reduction(const NodeRef& n) {
  if (is_segment_reduction(n->op)) return nullptr;  // its extents are data
  auto c = const_of(n->inputs[0]);
  if (!c) return nullptr;
  int64_t count = n->numel() ? n->inputs[0]->numel() / n->numel() : 0;
  if (count == 0 && n->numel() != 0) {
    if (n->op != Op::ReduceSum && n->op != Op::ReduceProd) return nullptr;  // no max of nothing
    return make_const_like(*n, n->op == Op::ReduceSum ? 0.0 : 1.0);
  }
  std::optional<double> v;
  switch (n->op) {
    case Op::ReduceSum: v = exact_repeated_sum(*c, count); break;
    case Op::ReduceProd:
      if (*c == 1.0 || (*c == 0.0 && !std::signbit(*c)) || std::isnan(*c)) v = *c;
      else if (*c == -1.0) v = count % 2 ? -1.0 : 1.0;
      break;
    case Op::ReduceMax:
    case Op::ReduceMin: v = *c; break;
    case Op::ArgMax:
    case Op::ArgMin: v = 0.0; break;  // the first of equal elements
    default: break;
  }
  return v ? make_const_like(*n, *v) : nullptr;
}

struct FoldRule {
  bool (*matches)(Op);
  NodeRef (*apply)(const NodeRef&);
};

bool is_selecting_view(Op op) { return op == Op::Reshape || op == Op::Permute || op == Op::Expand || op == Op::Slice; }
bool is_pad(Op op) { return op == Op::Pad; }
bool is_concat(Op op) { return op == Op::Concat; }

constexpr FoldRule kRules[] = {
    {is_elementwise, fold_elementwise}, {is_selecting_view, fold_view}, {is_pad, fold_pad},
    {is_concat, fold_concat},           {is_reduction, fold_reduction},
};

}  // namespace

std::vector<NodeRef> fold_constants(const std::vector<NodeRef>& roots) {
  return rewrite_bottom_up(roots, [](const NodeRef& n) -> NodeRef {
    for (const auto& r : kRules)
      if (r.matches(n->op)) return r.apply(n);
    return nullptr;
  });
}

}  // namespace kfuse::detail
