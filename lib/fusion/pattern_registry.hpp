// The process-wide pattern registry (DESIGN rule 8: a documented, thread-safe registry) and the
// engine side of the pattern phase: which patterns to try at a node, running them with every
// exception caught, and turning a partition's pattern attempts into PatternTraces.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "graph/node_map.hpp"
#include "kfuse/pattern.hpp"

namespace kfuse::detail {

struct Partition;

/// A registered, enabled pattern as seen by one partition run (a snapshot: registration while
/// planning does not affect a running plan).
struct ActivePattern {
  std::shared_ptr<Pattern> pattern;
  std::string name;
  int benefit = 0;
  int order = 0;  ///< registration order (ties of benefit go to the lower)
  std::vector<Op> root_ops;
};

/// The enabled patterns in registration order (loads KFUSE_PLUGINS on first call).
std::vector<ActivePattern> active_patterns();

/// Bumped whenever the set of registered patterns changes (register, unregister, plugin load):
/// the plan cache drops its programs when it (or options_generation()) moves.
uint64_t pattern_generation();

/// Runs `p.match(root, view)`, catching everything: an exception disables the pattern in the
/// registry (reported on stderr and in pattern_status()) and comes back as a failure.
MatchResult run_match(const ActivePattern& p, const Node& root, const GraphView& view);

/// One pattern tried at one node (the partitioner records these; explain() reports them).
struct PatternAttempt {
  const Node* node = nullptr;
  std::string pattern;
  bool matched = false;  ///< committed
  std::string reason;    ///< why not
};

/// The attempts of a partition as PatternTraces, nodes named "%k op" by their position in
/// topo_order(roots, true) (explain()'s numbering when `roots` are the plan's roots).
std::vector<PatternTrace> pattern_traces(const std::vector<PatternAttempt>& attempts,
                                         const std::vector<const Node*>& roots);
/// Partitions the graph under `roots` and returns its traces.
std::vector<PatternTrace> pattern_traces(const std::vector<const Node*>& roots);

/// A match of the pattern phase, waiting for the partitioner's fusion rules.
struct PatternCandidate {
  std::string pattern;  ///< its name
  const Node* root = nullptr;
  Match match;
  size_t attempt = 0;  ///< index into PatternMatches::attempts
};

/// The first half of the pattern phase (see pattern.hpp), which needs nothing of the partitioner
/// but the nodes' topological positions: every active pattern tried at each of `candidates`
/// (in topological order), and the matches highest benefit first (ties: registration order,
/// then root position). The partitioner then commits them in that order (partition.cpp).
struct PatternMatches {
  std::vector<PatternAttempt> attempts;
  std::vector<PatternCandidate> ordered;
};
PatternMatches find_pattern_matches(const std::vector<const Node*>& candidates, const GraphView& view,
                                    const NodeMap& positions);
/// The members of a match in topological order (`u`), or why they cannot form a group whatever
/// the fusion rules say: a node not in this graph, an input, an opaque node without the
/// pattern's own kernel, a match without its root.
std::string match_members(const PatternCandidate& c, const NodeMap& positions, std::vector<const Node*>& u);
/// Whether a pattern's own kernel binds exactly what a kernel for the group `u` reads and writes.
std::string validate_custom_kernel(const CustomKernel& k, const std::vector<const Node*>& u, const GraphView& view);
/// "op dtype[shape]": how pattern attempts and refusals name a node.
std::string describe_node(const Node& n);
/// Logs the attempts on the `patterns` channel, one line per node.
void log_pattern_attempts(const std::vector<PatternAttempt>& attempts, const NodeMap& positions);

/// The built-in patterns, in registration order (builtin_patterns.cpp).
std::vector<std::shared_ptr<Pattern>> builtin_patterns();

}  // namespace kfuse::detail
