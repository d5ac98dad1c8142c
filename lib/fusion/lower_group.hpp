// lower_group: the only bridge from the graph to the kernel IR.
#pragma once
#include <string>
#include <vector>

#include "fusion/partition.hpp"
#include "ir/kernel.hpp"

namespace kfuse::detail {

struct LoweredKernel {
  ir::Kernel kernel;
  /// Graph values bound to Kernel::buffers, in order (inputs then outputs).
  std::vector<const Node*> buffer_nodes;
  /// Which dimensions were specialised (compile-time) and why, for the cache entry.
  std::vector<std::string> specialised;
};

/// Lowers a Fused group. Throws InternalError (with the group printed) if the group violates the
/// partitioner's rules.
LoweredKernel lower_group(const FusionGroup& g);

/// The readable stem of a group's kernel, e.g. k_log_softmax_f32 (from the pattern or ops).
std::string kernel_stem(const FusionGroup& g);

}  // namespace kfuse::detail
