// The structural signature of the graph under a set of roots: two graphs with the same
// signature differ only in the data of their leaves (buffers and realized values), so one
// evaluation program serves both. This is what makes a repeated expression cost a hash and a
// lookup instead of passes, partitioning, lowering and a kernel-cache probe.
#pragma once
#include <string>
#include <vector>

#include "kfuse/node.hpp"

namespace kfuse::detail {

struct GraphSignature {
  std::string bytes;                 ///< canonical encoding (the plan-cache key)
  std::vector<const Node*> leaves;   ///< leaf values in first-visit order
  bool cacheable = true;             ///< false when a node's plan may not be shared (see .cpp)
};

GraphSignature graph_signature(const std::vector<NodeRef>& roots);

}  // namespace kfuse::detail
