// Memoised bottom-up rewriting of the node DAG (see rewrite.hpp).
#include "rewrite.hpp"

#include "../eval/reference_eval.hpp"
#include "../graph/node_map.hpp"

namespace kfuse::detail {

NodeRef with_inputs(const NodeRef& n, std::vector<NodeRef> inputs) {
  bool same = inputs.size() == n->inputs.size();
  for (size_t i = 0; same && i < inputs.size(); ++i) same = inputs[i] == n->inputs[i];
  if (same) return n;
  return make_node(n->op, n->dtype, n->shape, std::move(inputs), n->attrs, n->device);
}

std::vector<NodeRef> rewrite_bottom_up(const std::vector<NodeRef>& roots, const LocalRewrite& rule) {
  constexpr int kMaxLocalSteps = 16;
  // Memo: node -> index of its rewritten value (every pass walks the whole graph on every
  // evaluation that plans, so no hash-map node per entry).
  NodeMap memo;
  std::vector<NodeRef> done;
  auto rewritten = [&](const Node* n) -> const NodeRef& { return done[*memo.find(n)]; };
  // Iterative DFS (graphs can be deep); entries point into the roots or an input vector, both
  // stable while the walk runs.
  std::vector<std::pair<const NodeRef*, size_t>> stack;
  for (const NodeRef& root : roots) {
    if (memo.find(root.get())) continue;
    stack.emplace_back(&root, 0);
    while (!stack.empty()) {
      const NodeRef& ref = *stack.back().first;
      size_t& next = stack.back().second;
      const Node& n = *ref;
      if (is_open(n) && next < n.inputs.size()) {
        const NodeRef& in = n.inputs[next++];
        if (!memo.find(in.get())) stack.emplace_back(&in, 0);
        continue;
      }
      NodeRef cur = ref;
      if (is_open(n) && !n.inputs.empty()) {
        bool same = true;  // (no input vector to build when nothing below changed)
        for (const auto& in : n.inputs) same = same && rewritten(in.get()) == in;
        if (!same) {
          std::vector<NodeRef> ins;
          ins.reserve(n.inputs.size());
          for (const auto& in : n.inputs) ins.push_back(rewritten(in.get()));
          cur = with_inputs(ref, std::move(ins));
        }
        for (int step = 0; step < kMaxLocalSteps && is_open(*cur); ++step) {
          NodeRef r = rule(cur);
          if (!r || r == cur) break;
          cur = std::move(r);
        }
      }
      memo.insert_absent(&n, static_cast<uint32_t>(done.size()));
      done.push_back(std::move(cur));
      stack.pop_back();
    }
  }
  std::vector<NodeRef> out;
  out.reserve(roots.size());
  for (const auto& r : roots) out.push_back(rewritten(r.get()));
  return out;
}

std::optional<double> const_value(const Node& n) {
  const Node* p = &n;
  while (is_open(*p) && (p->op == Op::Reshape || p->op == Op::Permute || p->op == Op::Expand || p->op == Op::Slice))
    p = p->inputs[0].get();
  if (p->op != Op::Const) return std::nullopt;
  return p->attrs.reals.at(0);
}

NodeRef make_const_like(const Node& like, double value) {
  Attrs a;
  a.reals.push_back(round_to_dtype(value, like.dtype));
  return make_node(Op::Const, like.dtype, like.shape, {}, std::move(a), like.device);
}

size_t graph_size(const std::vector<NodeRef>& roots) {
  std::vector<const Node*> rs;
  for (const auto& r : roots) rs.push_back(r.get());
  return topo_order(rs, true).size();
}

}  // namespace kfuse::detail
