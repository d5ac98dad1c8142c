#include "fusion/traffic.hpp"

#include <algorithm>
#include <functional>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace kfuse::detail {

namespace {

using Box = std::vector<int64_t>;  // reachable extent per axis of a node's shape

Box full(const Node* n) { return Box(n->shape.begin(), n->shape.end()); }

int64_t count(const Box& b) {
  int64_t c = 1;
  for (int64_t e : b) c *= e;
  return c;
}

// The box of operand `o` of `m` reached from box `b` of `m` (full(o) where the op is not modelled).
Box operand_box(const Node* m, size_t operand, const Box& b) {
  const Node* o = m->inputs[operand].get();
  const size_t r = o->shape.size();
  auto clamp_to = [&](Box x) {
    for (size_t k = 0; k < r; ++k) x[k] = std::min(x[k], o->shape[k]);
    return x;
  };
  if (is_elementwise(m->op)) return o->shape == m->shape ? b : full(o);
  switch (m->op) {
    case Op::Expand: {  // o's axes align with m's last r axes; a broadcast axis reaches 1
      if (r > m->shape.size()) return full(o);
      const size_t lead = m->shape.size() - r;
      Box x(r);
      for (size_t k = 0; k < r; ++k) x[k] = o->shape[k] == 1 ? 1 : b[lead + k];
      return x;
    }
    case Op::Slice:
    case Op::Pad:
    case Op::Concat:  // (along their axes at most as many positions as the result's box)
      return r == m->shape.size() ? clamp_to(b) : full(o);
    case Op::Permute: {  // result axis i is operand axis perm[i]
      Box x(r, 1);
      const auto& perm = m->attrs.ints;
      if (perm.size() != r || b.size() != r) return full(o);
      for (size_t i = 0; i < r; ++i) {
        if (perm[i] < 0 || perm[i] >= static_cast<int64_t>(r)) return full(o);
        x[static_cast<size_t>(perm[i])] = b[i];
      }
      return clamp_to(x);
    }
    case Op::Reshape: {  // the leading axes both shapes share keep their extents
      Box x = full(o);
      for (size_t k = 0; k < r && k < m->shape.size() && o->shape[k] == m->shape[k]; ++k) x[k] = b[k];
      return x;
    }
    case Op::Gather:  // the index has the result's shape; x is reached at most there per fibre
      return r == m->shape.size() ? clamp_to(b) : full(o);
    case Op::SegmentSum:
    case Op::SegmentMax:  // values [N, D] under the result [B, 1, D]: every row, the result's columns
      if (operand == 0 && r == 2 && b.size() == 3) return {o->shape[0], std::min(o->shape[1], b[2])};
      return full(o);
    default: break;
  }
  if (is_reduction(m->op) && r == m->shape.size()) {  // reduced axes whole (kept with size 1)
    Box x = b;
    for (int64_t a : m->attrs.ints) {
      if (a < 0 || a >= static_cast<int64_t>(r)) return full(o);  // (axes are normalised at record time)
      x[static_cast<size_t>(a)] = o->shape[static_cast<size_t>(a)];
    }
    return x;
  }
  return full(o);
}

}  // namespace

Traffic min_traffic(const FusionGroup& g) {
  Traffic t;
  for (const Node* n : g.outputs) t.write_bytes += static_cast<int64_t>(n->numel() * dtype_size(n->dtype));
  const std::unordered_set<const Node*> members(g.nodes.begin(), g.nodes.end());
  std::unordered_map<const Node*, int64_t> reached;  // input -> elements, summed over paths
  // Paths from the outputs back to the inputs; a group is small (PartitionLimits::max_nodes), but
  // shared subexpressions multiply paths: past the budget every input counts whole.
  int64_t budget = 1 << 16;
  bool whole = false;
  std::function<void(const Node*, const Box&)> walk = [&](const Node* m, const Box& b) {
    if (whole || --budget < 0) {
      whole = true;
      return;
    }
    if (!members.count(m)) {
      int64_t& r = reached[m];
      r = std::min(m->numel(), r + count(b));  // (capped as it goes: many paths cannot overflow it)
      return;
    }
    for (size_t i = 0; i < m->inputs.size(); ++i) walk(m->inputs[i].get(), operand_box(m, i, b));
  };
  for (const Node* n : g.outputs) walk(n, full(n));
  for (const Node* n : g.inputs) {
    auto it = reached.find(n);
    const int64_t elems = whole || it == reached.end() ? n->numel() : it->second;
    t.read_bytes += static_cast<int64_t>(elems * dtype_size(n->dtype));
  }
  return t;
}

}  // namespace kfuse::detail
