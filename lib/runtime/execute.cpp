// The executor: plans (passes, partition, lowering), compiles through the backend chain and the
// kernel cache, allocates intermediates, runs the kernels in dependency order, frees each
// intermediate after its last reader, and publishes the requested results.
#include "execute.hpp"

#include <chrono>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include "../eval/reference_eval.hpp"
#include "backend/backend.hpp"
#include "fusion/lower_group.hpp"
#include "fusion/partition.hpp"
#include "kfuse/options.hpp"
#include "runtime/kernel_cache.hpp"
#include "runtime/plan.hpp"
#include "stats_impl.hpp"

namespace kfuse::detail {

namespace {

// Values of one evaluation, with reader counts so intermediates are freed after their last use.
class ValueTable {
 public:
  void put(const Node* n, std::shared_ptr<Storage> s) { vals_[n] = std::move(s); }
  std::shared_ptr<Storage> get(const Node* n) {
    auto it = vals_.find(n);
    if (it != vals_.end()) return it->second;
    if (auto r = n->realized()) return r;
    if (n->op == Op::Buffer) return n->storage;
    throw InternalError(std::string("executor: value of ") + op_name(n->op) + " is not available");
  }
  void add_reader(const Node* n) { ++readers_[n]; }
  void release(const Node* n, bool keep) {
    if (--readers_[n] == 0 && !keep) vals_.erase(n);
  }

 private:
  std::unordered_map<const Node*, std::shared_ptr<Storage>> vals_;
  std::unordered_map<const Node*, int> readers_;
};

void run_host_group(const FusionGroup& g, ValueTable& vt) {
  // Source (rand) and opaque (matmul) groups: one node each, computed on the host.
  const Node* n = g.nodes.at(0);
  std::vector<std::vector<double>> in_vals;
  std::vector<const std::vector<double>*> ins;
  for (const auto& i : n->inputs) in_vals.push_back(storage_to_double(*vt.get(i.get())));
  for (const auto& v : in_vals) ins.push_back(&v);
  vt.put(n, double_to_storage(evaluate_node(*n, ins), n->dtype));
  bump(global_counters().kernels_launched);
}

void run_fused_group(const FusionGroup& g, const PlannedKernel& pk, ValueTable& vt) {
  ir::LaunchArgs args;
  args.params = pk.lowered.kernel.param_values();
  std::vector<std::shared_ptr<Storage>> keep;
  for (const Node* b : pk.lowered.buffer_nodes) {
    bool is_out = std::find(g.outputs.begin(), g.outputs.end(), b) != g.outputs.end();
    std::shared_ptr<Storage> s = is_out ? Storage::allocate(b->dtype, b->numel()) : vt.get(b);
    if (is_out) vt.put(b, s);
    args.buffers.push_back(s->data);
    keep.push_back(std::move(s));
  }
  pk.compiled->run(args);
  bump(global_counters().kernels_launched);
}

}  // namespace

void execute(const std::vector<NodeRef>& all_roots) {
  std::vector<NodeRef> roots;
  for (const NodeRef& r : all_roots) {
    if (r->realized()) continue;
    if (r->op == Op::Buffer) {
      r->set_realized(r->storage);
      continue;
    }
    roots.push_back(r);
  }
  if (roots.empty()) return;
  bump(global_counters().evaluations);
  std::shared_ptr<const Plan> plan = get_plan(roots);
  if (options().logging("fusion")) {
    std::vector<const Node*> raw;
    for (const auto& r : roots) raw.push_back(r.get());
    log("fusion", explain_plan(*plan, raw).text());
  }
  ValueTable vt;
  for (const auto& g : plan->partition.groups)
    for (const Node* in : g.inputs) vt.add_reader(in);
  std::unordered_map<const Node*, bool> is_root;
  for (const Node* r : plan->roots) is_root[r] = true;
  for (size_t gi = 0; gi < plan->partition.groups.size(); ++gi) {
    const FusionGroup& g = plan->partition.groups[gi];
    if (g.kind == GroupKind::Fused) run_fused_group(g, plan->kernels[gi], vt);
    else run_host_group(g, vt);
    for (const Node* in : g.inputs) vt.release(in, is_root.count(in) > 0);
  }
  for (size_t i = 0; i < roots.size(); ++i) {
    std::shared_ptr<Storage> v = vt.get(plan->roots[i]);
    // A result that simplified to a borrowed input must not alias the caller's memory.
    if (!v->owner && v->device == Device::cpu()) {
      auto copy = Storage::allocate(v->dtype, v->numel);
      if (v->bytes()) std::memcpy(copy->data, v->data, v->bytes());
      v = copy;
    }
    roots[i]->set_realized(std::move(v));
  }
}

Tensor transfer(const Tensor& t, Device to) {
  throw UserError("to(" + to.str() + "): no backend for this device is available in this build");
}

}  // namespace kfuse::detail
