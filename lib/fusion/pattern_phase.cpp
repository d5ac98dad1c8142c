// The pattern phase's matching half: collect every match of every active pattern and order
// them by benefit; the partitioner commits them (partition.cpp, Partitioner::run_patterns).
// Each refusal keeps its reason for KFUSE_LOG=patterns and pattern_traces().
#include <algorithm>

#include "fusion/pattern_registry.hpp"
#include "kfuse/options.hpp"

namespace kfuse::detail {

namespace {

int position(const NodeMap& positions, const Node* n) {
  const uint32_t* p = positions.find(n);
  return p ? static_cast<int>(*p) : -1;
}

}  // namespace

std::string describe_node(const Node& n) {
  return std::string(op_name(n.op)) + " " + dtype_name(n.dtype) + shape_str(n.shape);
}

std::string match_members(const PatternCandidate& c, const NodeMap& positions, std::vector<const Node*>& u) {
  bool custom = c.match.kernel != nullptr;
  for (const Node* n : c.match.nodes) {
    if (!n) return "the match lists a null node";
    if (GraphView::is_inline_constant(*n)) continue;  // constants are inlined wherever they are read
    if (position(positions, n) < 0) return "the match lists " + describe_node(*n) + ", which is not in this graph";
    if (GraphView::is_input(*n))
      return "the match lists " + describe_node(*n) +
             ", an input (a buffer or an already computed value), which is read, not fused";
    OpKind k = op_kind(n->op);  // rand is a generator member like any element-wise op
    if (k == OpKind::Opaque && !custom)
      return "the match lists " + describe_node(*n) +
             ", which is opaque: only a pattern with its own kernel may fuse it";
    if (std::find(u.begin(), u.end(), n) == u.end()) u.push_back(n);
  }
  if (std::find(u.begin(), u.end(), c.root) == u.end())
    return "the match does not contain its root " + describe_node(*c.root);
  std::sort(u.begin(), u.end(),
            [&](const Node* a, const Node* b) { return position(positions, a) < position(positions, b); });
  return {};
}

std::string validate_custom_kernel(const CustomKernel& k, const std::vector<const Node*>& u, const GraphView& view) {
  std::vector<const Node*> need_out = view.outputs_of(u), may_in = view.inputs_of(u);
  for (const Node* n : need_out)
    if (std::find(k.outputs().begin(), k.outputs().end(), n) == k.outputs().end())
      return "its kernel does not write " + describe_node(*n) + ", which is needed outside the match";
  for (const Node* n : k.outputs())
    if (std::find(u.begin(), u.end(), n) == u.end())
      return "its kernel writes " + describe_node(*n) + ", which is not a matched node";
  for (const Node* n : k.inputs())
    if (std::find(may_in.begin(), may_in.end(), n) == may_in.end())
      return "its kernel reads " + describe_node(*n) +
             (GraphView::is_inline_constant(*n) ? ", a constant (use KernelBuilder::constant)"
                                                : ", which is not a value the matched nodes read from outside");
  return {};
}

PatternMatches find_pattern_matches(const std::vector<const Node*>& candidates, const GraphView& view,
                                    const NodeMap& positions) {
  std::vector<ActivePattern> pats = active_patterns();
  PatternMatches out;
  std::vector<std::pair<size_t, PatternCandidate>> found;  // (active pattern, match)
  std::vector<bool> disabled(pats.size(), false);
  for (const Node* n : candidates) {
    for (size_t p = 0; p < pats.size(); ++p) {
      const auto& ops = pats[p].root_ops;
      if (disabled[p] || (!ops.empty() && std::find(ops.begin(), ops.end(), n->op) == ops.end())) continue;
      MatchResult r = run_match(pats[p], *n, view);
      if (!r.matched && r.reason.find("(pattern disabled)") != std::string::npos) disabled[p] = true;
      out.attempts.push_back({n, pats[p].name, false, r.matched ? std::string() : r.reason});
      if (r.matched) found.push_back({p, {pats[p].name, n, std::move(r.match), out.attempts.size() - 1}});
    }
  }
  // Highest benefit first; ties: registration order, then the earlier root.
  std::stable_sort(found.begin(), found.end(), [&](const auto& a, const auto& b) {
    const ActivePattern &pa = pats[a.first], &pb = pats[b.first];
    if (pa.benefit != pb.benefit) return pa.benefit > pb.benefit;
    if (pa.order != pb.order) return pa.order < pb.order;
    return position(positions, a.second.root) < position(positions, b.second.root);
  });
  for (auto& f : found) out.ordered.push_back(std::move(f.second));
  return out;
}

void log_pattern_attempts(const std::vector<PatternAttempt>& attempts, const NodeMap& positions) {
  if (!log_enabled("patterns")) return;
  for (size_t i = 0; i < attempts.size();) {
    const Node* n = attempts[i].node;
    std::string line = "%";
    line.append(std::to_string(position(positions, n))).append(" ").append(describe_node(*n)).append(":");
    for (; i < attempts.size() && attempts[i].node == n; ++i) {
      const auto& a = attempts[i];
      line += " [" + a.pattern + (a.matched ? ": matched]" : ": " + a.reason + "]");
    }
    log("patterns", line);
  }
}

}  // namespace kfuse::detail
