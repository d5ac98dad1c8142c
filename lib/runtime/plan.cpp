#include "plan.hpp"

#include "kernel_cache.hpp"
#include "kfuse/options.hpp"
#include "passes/pass_manager.hpp"

namespace kfuse::detail {

std::shared_ptr<const Plan> make_plan(const std::vector<NodeRef>& roots, bool compile, const Options& opts) {
  auto plan = std::make_shared<Plan>();
  PassResult passes = run_passes(roots, opts.logging("fusion"));
  plan->keepalive = passes.roots;  // the plan owns the rewritten graph
  plan->pass_dumps = std::move(passes.dumps);
  std::vector<const Node*> to_compute;
  for (const NodeRef& r : plan->keepalive) {
    plan->roots.push_back(r.get());
    if (r->op != Op::Buffer && !r->realized()) to_compute.push_back(r.get());
  }
  plan->partition = partition_graph(to_compute);
  plan->kernels.resize(plan->partition.groups.size());
  for (size_t i = 0; i < plan->partition.groups.size(); ++i) {
    const FusionGroup& g = plan->partition.groups[i];
    if (g.kind != GroupKind::Fused) continue;
    PlannedKernel& pk = plan->kernels[i];
    pk.lowered = lower_group(g);
    if (compile) {
      Device dev = g.outputs.empty() ? Device::cpu() : g.outputs[0]->device;
      KernelProvenance prov = provenance_of(g, pk.lowered);
      CompiledRef c = compile_kernel(pk.lowered.kernel, dev, opts, &prov);
      pk.compiled = c.kernel;
      pk.backend = c.backend;
    }
  }
  return plan;
}

}  // namespace kfuse::detail
