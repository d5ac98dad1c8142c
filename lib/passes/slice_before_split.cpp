// Pass: slices move before the reshapes that split dims (see slice_before_split.hpp).
#include "slice_before_split.hpp"

#include "core/reshape_runs.hpp"
#include "rewrite.hpp"

namespace kfuse::detail {

namespace {

NodeRef slice_of_split_rule(const NodeRef& n) {
  if (n->op != Op::Slice) return nullptr;
  const Node& r = *n->inputs[0];
  if (r.op != Op::Reshape || !is_open(r)) return nullptr;
  const NodeRef& x = r.inputs[0];
  const Shape &ys = r.shape, &xs = x->shape;
  for (int64_t e : n->shape)
    if (e == 0) return nullptr;  // an empty slice: nothing to read either way
  if (!reshape_only_splits(ys, xs)) return nullptr;
  const auto& s = n->attrs.ints;  // (start, step) per axis of the reshape's output
  // The slice of x: whole on every dim, then each run's range.
  Attrs a;
  for (size_t j = 0; j < xs.size(); ++j) a.ints.insert(a.ints.end(), {0, 1});
  Shape shape = xs;
  size_t i0 = 0, j0 = 0;
  for (const auto& [i1, j1] : reshape_runs(ys, xs)) {
    // The run's dims of y, outermost first: size-1 dims, then the first dim the slice may
    // narrow (`lead`), then dims the slice must keep whole.
    size_t lead = i0;
    while (lead + 1 < i1 && ys[lead] == 1) ++lead;
    int64_t inner = 1;
    for (size_t i = lead + 1; i < i1; ++i) {
      if (s[2 * i] != 0 || s[2 * i + 1] != 1 || n->shape[i] != ys[i]) return nullptr;
      inner *= ys[i];
    }
    // (every run holds at least one dim of y and one of x: reshape_runs)
    size_t jx = j0;  // the run's one dim of x other than 1 (any, when all are 1)
    while (jx + 1 < j1 && xs[jx] == 1) ++jx;
    const int64_t start = s[2 * lead], step = s[2 * lead + 1], count = n->shape[lead];
    if (step != 1 && inner != 1) return nullptr;  // every step-th block: not one range of x
    a.ints[2 * jx] = start * inner;
    a.ints[2 * jx + 1] = step;
    shape[jx] = count * inner;
    i0 = i1;
    j0 = j1;
  }
  NodeRef sliced = make_node(Op::Slice, x->dtype, std::move(shape), {x}, std::move(a), x->device);
  return make_node(Op::Reshape, n->dtype, n->shape, {sliced}, {}, n->device);
}

}  // namespace

std::vector<NodeRef> slice_before_split(const std::vector<NodeRef>& roots) {
  return rewrite_bottom_up(roots, slice_of_split_rule);
}

}  // namespace kfuse::detail
