// Pass: removal of no-op views and exact merging of view chains (see remove_noop_views.hpp).
// A table of rules, one per view op, each looking at the node and (when open) its input.
#include "remove_noop_views.hpp"

#include <utility>

#include "rewrite.hpp"

namespace kfuse::detail {

namespace {

// The input of `n` when it is an open node of kind `op`, else null.
const Node* open_input_of_kind(const Node& n, Op op) {
  const Node& x = *n.inputs[0];
  return x.op == op && is_open(x) ? &x : nullptr;
}

// Reshape and expand: a view to the input's own shape is the input; two in a row are one
// (reshapes reinterpret the same row-major order; the dims an inner expand grew are no longer 1,
// so the outer expand keeps them).
NodeRef shape_view_rule(const NodeRef& n) {
  const NodeRef& x = n->inputs[0];
  if (n->shape == x->shape) return x;
  if (open_input_of_kind(*n, n->op)) return make_node(n->op, n->dtype, n->shape, {x->inputs[0]}, {}, n->device);
  return nullptr;
}

// True when `perm` keeps the relative order of the axes of `in` whose size is not 1.
bool moves_only_unit_axes(const std::vector<int64_t>& perm, const Shape& in) {
  int64_t last = -1;
  for (int64_t a : perm) {
    if (in[a] == 1) continue;
    if (a < last) return false;
    last = a;
  }
  return true;
}

NodeRef permute_rule(const NodeRef& n) {
  const NodeRef& x = n->inputs[0];
  const auto& perm = n->attrs.ints;
  if (const Node* inner = open_input_of_kind(*n, Op::Permute)) {
    // out[i] = x[perm[i]] and x[j] = y[inner_perm[j]], so out[i] = y[inner_perm[perm[i]]].
    Attrs a;
    for (int64_t p : perm) a.ints.push_back(inner->attrs.ints[p]);
    return make_node(Op::Permute, n->dtype, n->shape, {inner->inputs[0]}, std::move(a), n->device);
  }
  // Covers the identity permute too (a reshape to the same shape, removed on the next step).
  if (moves_only_unit_axes(perm, x->shape)) return make_node(Op::Reshape, n->dtype, n->shape, {x}, {}, n->device);
  return nullptr;
}

NodeRef slice_rule(const NodeRef& n) {
  const NodeRef& x = n->inputs[0];
  const auto& s = n->attrs.ints;  // (start, step) per axis
  bool full = n->shape == x->shape;
  for (size_t d = 0; full && d < n->shape.size(); ++d) full = s[2 * d] == 0 && s[2 * d + 1] == 1;
  if (full) return x;
  if (const Node* inner = open_input_of_kind(*n, Op::Slice)) {
    // element i of the outer slice is element start + i*step of x, which is element
    // inner_start + (start + i*step) * inner_step of x's input.
    const auto& t = inner->attrs.ints;
    Attrs a;
    for (size_t d = 0; d < n->shape.size(); ++d) {
      a.ints.push_back(t[2 * d] + s[2 * d] * t[2 * d + 1]);
      a.ints.push_back(s[2 * d + 1] * t[2 * d + 1]);
    }
    return make_node(Op::Slice, n->dtype, n->shape, {inner->inputs[0]}, std::move(a), n->device);
  }
  return nullptr;
}

NodeRef pad_rule(const NodeRef& n) {
  for (int64_t p : n->attrs.ints)
    if (p != 0) return nullptr;
  return n->inputs[0];
}

NodeRef concat_rule(const NodeRef& n) { return n->inputs.size() == 1 ? n->inputs[0] : nullptr; }

struct ViewRule {
  Op op;
  NodeRef (*apply)(const NodeRef&);
};

constexpr ViewRule kRules[] = {
    {Op::Reshape, shape_view_rule}, {Op::Permute, permute_rule}, {Op::Expand, shape_view_rule},
    {Op::Slice, slice_rule},        {Op::Pad, pad_rule},         {Op::Concat, concat_rule},
};

}  // namespace

std::vector<NodeRef> remove_noop_views(const std::vector<NodeRef>& roots) {
  return rewrite_bottom_up(roots, [](const NodeRef& n) -> NodeRef {
    for (const auto& r : kRules)
      if (r.op == n->op) return r.apply(n);
    return nullptr;
  });
}

}  // namespace kfuse::detail
