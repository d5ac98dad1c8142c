// A Plan: everything needed to run an evaluation, computed before anything runs (and all that
// explain() reports): the graph after passes, its partition, and per fused group its kernel IR
// and compiled kernel.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "fusion/lower_group.hpp"
#include "fusion/partition.hpp"
#include "ir/flops.hpp"
#include "kfuse/explain.hpp"

namespace kfuse::detail {

struct PlannedKernel {
  LoweredKernel lowered;                     ///< empty for host groups
  std::shared_ptr<CompiledKernel> compiled;  ///< null for host groups, or when not compiled
  std::string backend;
  /// FLOPs of one launch, counted from its kernel IR with its parameters: what explain() reports
  /// and the profiler records (0 for host groups).
  double flops() const {
    return lowered.kernel.name.empty() ? 0 : ir::kernel_flops(lowered.kernel, lowered.kernel.param_values());
  }
};

struct Plan {
  std::vector<NodeRef> keepalive;  ///< the rewritten graph's roots (owns the nodes)
  std::vector<const Node*> roots;  ///< value to publish for each requested root, in order
  Partition partition;
  std::vector<PlannedKernel> kernels;  ///< one per partition group
  std::vector<std::pair<std::string, std::string>> pass_dumps;
};

/// Plans the evaluation of `roots` under `opts` (passed down from the API entry that started it);
/// compiles the kernels when `compile` (explain() does not).
std::shared_ptr<const Plan> make_plan(const std::vector<NodeRef>& roots, bool compile, const Options& opts);

/// The report of a plan (original_roots: the roots as recorded, for the unfused count).
Explanation explain_plan(const Plan& plan, const std::vector<const Node*>& original_roots);

}  // namespace kfuse::detail
