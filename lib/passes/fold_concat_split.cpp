// Pass: slice-of-concat folding (see fold_concat_split.hpp).
#include "fold_concat_split.hpp"

#include <algorithm>

#include "rewrite.hpp"

namespace kfuse::detail {

namespace {

// `part` sliced like `s` on every axis but `axis`, where it takes [start, start+step*count).
NodeRef slice_part(const Node& s, const NodeRef& part, int64_t axis, int64_t start, int64_t step, int64_t count) {
  Attrs a = s.attrs;
  a.ints[2 * axis] = start;
  a.ints[2 * axis + 1] = step;
  Shape shape = s.shape;
  shape[axis] = count;
  if (shape == part->shape && start == 0 && step == 1) {
    bool full = true;  // the other axes too
    for (size_t d = 0; d < shape.size(); ++d) full &= a.ints[2 * d] == 0 && a.ints[2 * d + 1] == 1;
    if (full) return part;
  }
  return make_node(Op::Slice, s.dtype, std::move(shape), {part}, std::move(a), s.device);
}

NodeRef slice_of_concat_rule(const NodeRef& n) {
  if (n->op != Op::Slice) return nullptr;
  const Node& cat = *n->inputs[0];
  if (cat.op != Op::Concat || !is_open(cat)) return nullptr;
  const int64_t axis = cat.attrs.ints.at(0);
  const int64_t start = n->attrs.ints[2 * axis], step = n->attrs.ints[2 * axis + 1], count = n->shape[axis];
  if (count == 0) return nullptr;
  const int64_t last = start + step * (count - 1);  // the last element read along the axis
  // Parts [first_part, last_part] hold elements start and last.
  size_t first_part = 0, last_part = 0;
  std::vector<int64_t> offset;
  int64_t off = 0;
  for (size_t k = 0; k < cat.inputs.size(); ++k) {
    offset.push_back(off);
    int64_t end = off + cat.inputs[k]->shape[axis];
    if (start >= off && start < end) first_part = k;
    if (last >= off && last < end) last_part = k;
    off = end;
  }
  if (first_part == last_part)
    return slice_part(*n, cat.inputs[first_part], axis, start - offset[first_part], step, count);
  if (step != 1 || (first_part == 0 && last_part == cat.inputs.size() - 1)) return nullptr;
  std::vector<NodeRef> parts;
  Shape shape = n->shape;
  shape[axis] = 0;
  for (size_t k = first_part; k <= last_part; ++k) {
    int64_t size = cat.inputs[k]->shape[axis];
    int64_t lo = std::max(start - offset[k], int64_t{0});
    int64_t hi = std::min(last - offset[k] + 1, size);
    parts.push_back(slice_part(*n, cat.inputs[k], axis, lo, 1, hi - lo));
    shape[axis] += hi - lo;
  }
  return make_node(Op::Concat, n->dtype, std::move(shape), std::move(parts), cat.attrs, n->device);
}

}  // namespace

std::vector<NodeRef> fold_concat_split(const std::vector<NodeRef>& roots) {
  return rewrite_bottom_up(roots, slice_of_concat_rule);
}

}  // namespace kfuse::detail
