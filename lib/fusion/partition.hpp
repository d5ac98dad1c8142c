// The fusion partitioner: splits the graph into FusionGroups, each of which becomes one kernel.
#pragma once
#include <string>
#include <unordered_map>
#include <vector>

#include "kfuse/node.hpp"
#include "fusion/pattern_registry.hpp"

namespace kfuse::detail {

enum class GroupKind : uint8_t { Fused, Opaque };

struct FusionGroup {
  int id = 0;
  GroupKind kind = GroupKind::Fused;
  std::string pattern = "lattice";    ///< what formed the group
  std::vector<const Node*> nodes;     ///< members in topological order
  std::vector<const Node*> inputs;    ///< values read from outside (leaves, realized, other groups)
  std::vector<const Node*> outputs;   ///< members needed outside the group or requested
  OpKind lattice = OpKind::ElemWise;  ///< join of the members' kinds
  /// Set when a pattern supplied the kernel (lib/plugin): used instead of lower_group's, and the
  /// group is closed (exactly the matched nodes; outputs = the kernel's outputs).
  std::shared_ptr<const CustomKernel> custom_kernel;
};

struct Boundary {
  const Node* producer;
  const Node* consumer;
  std::string reason;
};

struct Partition {
  std::vector<FusionGroup> groups;  ///< in an order that respects dependencies
  std::vector<Boundary> boundaries;
  std::unordered_map<const Node*, int> group_of;  ///< member -> group index
  std::vector<PatternAttempt> pattern_attempts;   ///< the pattern phase, per node (explain, logs)
};

/// Limits of the partitioner (documented in README "Fusion").
struct PartitionLimits {
  size_t max_nodes = 256;        ///< nodes per kernel
  double recompute_budget = 40;  ///< per-element cost a group may spend recomputing values
  bool use_patterns = true;      ///< run the pattern phase (off: lattice only, for tests)
};

/// Partitions the graph under `roots` (realized nodes are inputs). Pure: does not run anything.
Partition partition_graph(const std::vector<const Node*>& roots, const PartitionLimits& limits = {});

/// Nodes inlined into every kernel that reads them rather than read from memory (constants and
/// ranges): they never need a kernel of their own unless requested as a result.
bool is_inlined_source(const Node& n);

/// The reduction signature of a fused group: the full shape S the reductions iterate and the
/// reduced axes A (all reductions of one group share it). Empty axes = no reduction.
struct ReduceSig {
  Shape full;
  std::vector<int64_t> axes;
  bool operator==(const ReduceSig& o) const { return full == o.full && axes == o.axes; }
};
ReduceSig reduce_signature(const FusionGroup& g);
/// The full shape a reduction node iterates: its input's shape, or for a segment reduction the
/// virtual [B, N, D] (bags x ids x row) whose axis 1 has a per-bag dynamic range.
Shape reduce_full_shape(const Node& n);
Shape kept_shape(const ReduceSig& s);
/// True when the shapes differ only by size-1 dims (a squeeze/unsqueeze: same row-major layout).
bool same_squeezed(const Shape& a, const Shape& b);

}  // namespace kfuse::detail
