// The structural signature of the graph under a set of roots: two graphs with the same
// signature differ only in the data of their leaves (buffers and realized values), so one
// evaluation program serves both. This is what makes a repeated expression cost a walk, a hash
// and a lookup instead of passes, partitioning, lowering and a kernel-cache probe.
//
// The key is the exact canonical encoding (words), not only its hash: two different structures
// can never share a program, whatever the hash does. Computing it is one walk over the graph
// with no allocation once a GraphSignature's buffers have grown (the executor reuses one per
// thread).
#pragma once
#include <cstdint>
#include <vector>

#include "kfuse/node.hpp"

namespace kfuse::detail {

struct GraphSignature {
  std::vector<uint64_t> words;      ///< canonical encoding (the plan-cache key)
  uint64_t hash = 0;                ///< hash of `words`
  std::vector<const Node*> leaves;  ///< leaf values in first-visit order
  bool cacheable = true;            ///< false when a node's plan may not be shared (see .cpp)
};

/// Fills `sig` (clearing it first, keeping its capacity) for the graph under roots[0, n).
void graph_signature(const NodeRef* roots, size_t n, GraphSignature& sig);
GraphSignature graph_signature(const std::vector<NodeRef>& roots);

}  // namespace kfuse::detail
