/** \file pass_manager.hpp
 * The graph-pass driver: the ordered pass list, run to a fixed point.
 */
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "kfuse/node.hpp"

namespace kfuse::detail {

using GraphPass = std::vector<NodeRef> (*)(const std::vector<NodeRef>&);

struct NamedPass {
  const char* name;
  GraphPass run;
};

/// The passes, in the order run_passes applies them.
const std::vector<NamedPass>& graph_passes();

struct PassResult {
  std::vector<NodeRef> roots;  ///< the rewritten roots, in the order given
  /// (step, graph text): "input" first, then "<iteration>.<pass>" after every pass step.
  std::vector<std::pair<std::string, std::string>> dumps;
  int iterations = 0;  ///< sweeps over the pass list, including the last (unchanged) one
};

/// Runs graph_passes() in order, sweep after sweep, until a whole sweep returns the same root
/// nodes (exact thanks to hash-consing) or kMaxPassIterations sweeps ran. Records the graph
/// text after each step when `dump`; logs each changing step, with the new graph, on the
/// `passes` channel (KFUSE_LOG=passes).
PassResult run_passes(const std::vector<NodeRef>& roots, bool dump);
/// The same with another pass list (tests, tools that run a subset).
PassResult run_passes(const std::vector<NodeRef>& roots, bool dump, const std::vector<NamedPass>& passes);

constexpr int kMaxPassIterations = 8;

}  // namespace kfuse::detail
