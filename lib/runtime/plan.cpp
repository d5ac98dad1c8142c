#include "plan.hpp"

#include "kernel_cache.hpp"
#include "kfuse/options.hpp"

namespace kfuse::detail {

std::shared_ptr<const Plan> make_plan(const std::vector<const Node*>& roots, bool compile) {
  auto plan = std::make_shared<Plan>();
  for (const Node* r : roots) {
    // Tensors own their nodes; the plan keeps the (possibly rewritten) roots alive.
    plan->roots.push_back(r);
  }
  plan->partition = partition_graph(plan->roots);
  plan->kernels.resize(plan->partition.groups.size());
  for (size_t i = 0; i < plan->partition.groups.size(); ++i) {
    const FusionGroup& g = plan->partition.groups[i];
    if (g.kind != GroupKind::Fused) continue;
    PlannedKernel& pk = plan->kernels[i];
    pk.lowered = lower_group(g);
    if (compile) {
      Device dev = g.outputs.empty() ? Device::cpu() : g.outputs[0]->device;
      CompiledRef c = compile_kernel(pk.lowered.kernel, dev);
      pk.compiled = c.kernel;
      pk.backend = c.backend;
    }
  }
  return plan;
}

std::shared_ptr<const Plan> get_plan(const std::vector<const Node*>& roots) { return make_plan(roots, true); }

}  // namespace kfuse::detail
