// The graph-pass driver (see pass_manager.hpp). Reads like a table of contents: the pass list,
// then a fixed-point loop over it.
#include "pass_manager.hpp"

#include "../graph/print_graph.hpp"
#include "fold_concat_split.hpp"
#include "fold_constants.hpp"
#include "kfuse/options.hpp"
#include "remove_noop_views.hpp"
#include "rewrite.hpp"
#include "simplify_algebra.hpp"
#include "slice_before_split.hpp"

namespace kfuse::detail {

const std::vector<NamedPass>& graph_passes() {
  // Views first (they expose constants and concats; slices move before the reshapes that split
  // dims, so views that shared a reshape each read the source on their own), then slices of
  // concats, then folding, then algebra on what is left (folded constants make more identities
  // visible).
  static const std::vector<NamedPass> passes = {
      {"remove_noop_views", remove_noop_views}, {"slice_before_split", slice_before_split},
      {"fold_concat_split", fold_concat_split}, {"fold_constants", fold_constants},
      {"simplify_algebra", simplify_algebra},
  };
  return passes;
}

PassResult run_passes(const std::vector<NodeRef>& roots, bool dump) { return run_passes(roots, dump, graph_passes()); }

PassResult run_passes(const std::vector<NodeRef>& roots, bool dump, const std::vector<NamedPass>& passes) {
  const bool logging = log_enabled("passes");
  PassResult res;
  res.roots = roots;
  if (dump) res.dumps.emplace_back("input", print_graph(roots));
  if (logging) log("passes", "input: " + std::to_string(graph_size(roots)) + " nodes");
  for (int it = 1; it <= kMaxPassIterations; ++it) {
    res.iterations = it;
    bool changed = false;
    for (const auto& pass : passes) {
      std::vector<NodeRef> next = pass.run(res.roots);
      bool step_changed = next != res.roots;  // element-wise pointer comparison
      std::string step = std::to_string(it) + "." + pass.name;
      if (dump) res.dumps.emplace_back(step, print_graph(next));
      if (logging && step_changed)
        log("passes", step + ": " + std::to_string(graph_size(res.roots)) + " -> " + std::to_string(graph_size(next)) +
                          " nodes\n" + print_graph(next));
      changed |= step_changed;
      res.roots = std::move(next);
    }
    if (!changed) break;
    if (it == kMaxPassIterations && logging)
      log("passes", "stopped at the iteration cap (" + std::to_string(it) + ") before a fixed point");
  }
  if (logging) log("passes", "done after " + std::to_string(res.iterations) + " iteration(s)");
  return res;
}

}  // namespace kfuse::detail
