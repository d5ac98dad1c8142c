// The process-wide pattern registry (DESIGN rule 8: a documented, thread-safe registry) and the
// engine side of the pattern phase: which patterns to try at a node, running them with every
// exception caught, and turning a partition's pattern attempts into PatternTraces.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

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

/// Bumped whenever the set of registered patterns changes (register, unregister, plugin load).
/// Such a change also calls set_options(options()), so that options_generation() moves and
/// cached plans are dropped.
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

/// What the pattern phase needs from the partitioner.
struct PatternPhaseHooks {
  std::function<int(const Node*)> position;  ///< topological position; -1 when not in the graph
  /// The fusion rules on a set of members in topological order: "" when legal, else the rule.
  std::function<std::string(const std::vector<const Node*>&)> check;
  /// Makes the (legal, disjoint) set one group named `pattern`, closed when `kernel` is set.
  std::function<void(const std::vector<const Node*>&, const std::string& pattern,
                     std::shared_ptr<const CustomKernel> kernel)>
      commit;
};

/// The pattern phase (see pattern.hpp): tries the active patterns at each of `candidates` (in
/// topological order), then commits their matches highest benefit first (ties: registration
/// order, then root position) through `hooks`. Logs on the `patterns` channel. Returns every
/// attempt with its outcome.
std::vector<PatternAttempt> run_pattern_phase(const std::vector<const Node*>& candidates, const GraphView& view,
                                              const PatternPhaseHooks& hooks);

/// The built-in patterns, in registration order (builtin_patterns.cpp).
std::vector<std::shared_ptr<Pattern>> builtin_patterns();

}  // namespace kfuse::detail
