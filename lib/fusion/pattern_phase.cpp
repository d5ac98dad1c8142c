// The pattern phase of the partitioner: collect every match of every active pattern, then
// commit them in benefit order. Each refusal keeps its reason for KFUSE_LOG=patterns and
// pattern_traces().
#include <algorithm>
#include <unordered_map>

#include "fusion/partition.hpp"
#include "kfuse/options.hpp"
#include "fusion/pattern_registry.hpp"

namespace kfuse::detail {

namespace {

std::string describe(const Node& n) { return std::string(op_name(n.op)) + " " + dtype_name(n.dtype) + shape_str(n.shape); }

struct Candidate {
  size_t pattern;   // index into the active list
  const Node* root;
  Match match;
  size_t attempt;   // index into the attempts
};

// Normalises a match's node list and checks what does not need the partitioner. "" when fine.
std::string validate_nodes(const Candidate& c, const ActivePattern& p, const PatternPhaseHooks& hooks,
                           std::vector<const Node*>& u) {
  bool custom = c.match.kernel != nullptr;
  for (const Node* n : c.match.nodes) {
    if (!n) return "the match lists a null node";
    if (GraphView::is_inline_constant(*n)) continue;  // constants are inlined wherever they are read
    if (hooks.position(n) < 0) return "the match lists " + describe(*n) + ", which is not in this graph";
    if (GraphView::is_input(*n))
      return "the match lists " + describe(*n) + ", an input (a buffer or an already computed value), which is read, not fused";
    OpKind k = op_kind(n->op);  // rand is a generator member like any element-wise op
    if (k == OpKind::Opaque && !custom)
      return "the match lists " + describe(*n) + ", which is opaque: only a pattern with its own kernel may fuse it";
    if (std::find(u.begin(), u.end(), n) == u.end()) u.push_back(n);
  }
  if (std::find(u.begin(), u.end(), c.root) == u.end()) return "the match does not contain its root " + describe(*c.root);
  std::sort(u.begin(), u.end(), [&](const Node* a, const Node* b) { return hooks.position(a) < hooks.position(b); });
  return {};
}

// The custom kernel must bind exactly what a kernel for the group `u` reads and writes.
std::string validate_kernel(const CustomKernel& k, const std::vector<const Node*>& u, const GraphView& view) {
  std::vector<const Node*> need_out = view.outputs_of(u), may_in = view.inputs_of(u);
  for (const Node* n : need_out)
    if (std::find(k.outputs().begin(), k.outputs().end(), n) == k.outputs().end())
      return "its kernel does not write " + describe(*n) + ", which is needed outside the match";
  for (const Node* n : k.outputs())
    if (std::find(u.begin(), u.end(), n) == u.end())
      return "its kernel writes " + describe(*n) + ", which is not a matched node";
  for (const Node* n : k.inputs())
    if (std::find(may_in.begin(), may_in.end(), n) == may_in.end())
      return "its kernel reads " + describe(*n) +
             (GraphView::is_inline_constant(*n) ? ", a constant (use KernelBuilder::constant)"
                                                : ", which is not a value the matched nodes read from outside");
  return {};
}

void log_attempts(const std::vector<PatternAttempt>& attempts, const PatternPhaseHooks& hooks) {
  if (!options().logging("patterns")) return;
  for (size_t i = 0; i < attempts.size();) {
    const Node* n = attempts[i].node;
    std::string line = "%";
    line.append(std::to_string(hooks.position(n))).append(" ").append(describe(*n)).append(":");
    for (; i < attempts.size() && attempts[i].node == n; ++i) {
      const auto& a = attempts[i];
      line += " [" + a.pattern + (a.matched ? ": matched]" : ": " + a.reason + "]");
    }
    log("patterns", line);
  }
}

}  // namespace

std::vector<PatternAttempt> run_pattern_phase(const std::vector<const Node*>& candidates, const GraphView& view,
                                              const PatternPhaseHooks& hooks) {
  std::vector<ActivePattern> pats = active_patterns();
  std::vector<PatternAttempt> attempts;
  std::vector<Candidate> cands;
  std::vector<bool> disabled(pats.size(), false);
  for (const Node* n : candidates) {
    for (size_t p = 0; p < pats.size(); ++p) {
      const auto& ops = pats[p].root_ops;
      if (disabled[p] || (!ops.empty() && std::find(ops.begin(), ops.end(), n->op) == ops.end())) continue;
      MatchResult r = run_match(pats[p], *n, view);
      if (!r.matched && r.reason.find("(pattern disabled)") != std::string::npos) disabled[p] = true;
      attempts.push_back({n, pats[p].name, false, r.matched ? std::string() : r.reason});
      if (r.matched) cands.push_back({p, n, std::move(r.match), attempts.size() - 1});
    }
  }
  // Highest benefit first; ties: registration order, then the earlier root.
  std::stable_sort(cands.begin(), cands.end(), [&](const Candidate& a, const Candidate& b) {
    const ActivePattern &pa = pats[a.pattern], &pb = pats[b.pattern];
    if (pa.benefit != pb.benefit) return pa.benefit > pb.benefit;
    if (pa.order != pb.order) return pa.order < pb.order;
    return hooks.position(a.root) < hooks.position(b.root);
  });
  std::unordered_map<const Node*, std::string> taken;  // member -> the match that took it
  for (const Candidate& c : cands) {
    const ActivePattern& p = pats[c.pattern];
    std::vector<const Node*> u;
    std::string why = validate_nodes(c, p, hooks, u);
    for (size_t i = 0; why.empty() && i < u.size(); ++i) {
      auto it = taken.find(u[i]);
      if (it != taken.end()) why = "overlaps " + it->second + " (committed first: higher benefit or registered earlier)";
    }
    if (why.empty()) why = hooks.check(u);
    if (why.empty() && c.match.kernel) why = validate_kernel(*c.match.kernel, u, view);
    PatternAttempt& a = attempts[c.attempt];
    if (!why.empty()) {
      a.reason = "refused: " + why;
      continue;
    }
    a.matched = true;
    a.reason.clear();
    for (const Node* n : u) taken[n] = "the match of " + p.name + " at " + describe(*c.root);
    hooks.commit(u, p.name, c.match.kernel);
  }
  log_attempts(attempts, hooks);
  return attempts;
}

}  // namespace kfuse::detail
