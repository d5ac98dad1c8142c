#include "program.hpp"

#include <cstring>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>

#include "../eval/reference_eval.hpp"
#include "kfuse/error.hpp"
#include "kfuse/options.hpp"
#include "stats_impl.hpp"

namespace kfuse::detail {

std::shared_ptr<const Program> make_program(const Plan& plan, const GraphSignature& sig) {
  auto prog = std::make_shared<Program>();
  std::unordered_map<const Node*, ValueRef> where;
  for (size_t i = 0; i < sig.leaves.size(); ++i) where[sig.leaves[i]] = {true, static_cast<uint32_t>(i)};
  auto ref_of = [&](const Node* n) {
    auto it = where.find(n);
    if (it == where.end()) throw InternalError(std::string("program: value of ") + op_name(n->op) + " has no producer");
    return it->second;
  };
  auto new_temp = [&](const Node* n) {
    uint32_t t = static_cast<uint32_t>(prog->temps.size());
    prog->temps.push_back({n->dtype, n->numel(), n->device});
    where[n] = {false, t};
    return t;
  };
  for (size_t gi = 0; gi < plan.partition.groups.size(); ++gi) {
    const FusionGroup& g = plan.partition.groups[gi];
    Step st;
    st.kind = g.kind;
    if (g.kind == GroupKind::Fused) {
      const PlannedKernel& pk = plan.kernels[gi];
      st.kernel = pk.compiled;
      st.backend = pk.backend;
      st.params = pk.lowered.kernel.param_values();
      size_t n_in = static_cast<size_t>(pk.lowered.kernel.num_inputs());
      for (size_t b = 0; b < pk.lowered.buffer_nodes.size(); ++b) {
        const Node* n = pk.lowered.buffer_nodes[b];
        if (b < n_in) st.inputs.push_back(ref_of(n));
        else st.outputs.push_back(new_temp(n));
      }
    } else {
      const Node* n = g.nodes.at(0);
      st.host_node = n;
      st.backend = "host";
      for (const auto& in : n->inputs) st.inputs.push_back(ref_of(in.get()));
      st.outputs.push_back(new_temp(n));
    }
    prog->steps.push_back(std::move(st));
  }
  for (const Node* r : plan.roots) prog->roots.push_back(ref_of(r));
  // Liveness: release each temporary after its last reader (roots are never released).
  std::vector<int> last(prog->temps.size(), -1);
  for (size_t s = 0; s < prog->steps.size(); ++s)
    for (const ValueRef& v : prog->steps[s].inputs)
      if (!v.leaf) last[v.index] = static_cast<int>(s);
  for (const ValueRef& r : prog->roots)
    if (!r.leaf) last[r.index] = -2;
  for (size_t t = 0; t < last.size(); ++t)
    if (last[t] >= 0) prog->steps[last[t]].release.push_back(static_cast<uint32_t>(t));
  return prog;
}

namespace {

class PlanCache {
 public:
  std::shared_ptr<const Program> find(const std::string& key) {
    std::shared_lock<std::shared_mutex> lk(mu_);
    if (generation_ != options_generation()) return nullptr;
    auto it = map_.find(key);
    return it == map_.end() ? nullptr : it->second;
  }
  void insert(const std::string& key, std::shared_ptr<const Program> p) {
    std::unique_lock<std::shared_mutex> lk(mu_);
    // Programs hold kernels compiled under the options of their time (backends, cache).
    uint64_t gen = options_generation();
    if (generation_ != gen) {
      map_.clear();
      generation_ = gen;
    }
    // Bounded: a program pins its compiled kernels, so an unbounded table would defeat the
    // kernel cache's eviction. Past the bound the table starts over (cheap to refill).
    if (map_.size() >= kMaxPrograms) map_.clear();
    map_.emplace(key, std::move(p));
  }
  static constexpr size_t kMaxPrograms = 1024;

 private:
  std::shared_mutex mu_;
  uint64_t generation_ = 0;
  std::unordered_map<std::string, std::shared_ptr<const Program>> map_;
};

PlanCache& plan_cache() {
  static auto* c = new PlanCache();
  return *c;
}

}  // namespace

std::shared_ptr<const Program> find_program(const GraphSignature& sig) {
  return sig.cacheable ? plan_cache().find(sig.bytes) : nullptr;
}

std::shared_ptr<const Program> get_program(const std::vector<NodeRef>& roots, const GraphSignature& sig) {
  bool use_cache = sig.cacheable && options().cache_mode != "off";
  if (use_cache)
    if (auto p = plan_cache().find(sig.bytes)) {
      // A program hit is a memory-cache hit for each of its kernels.
      uint64_t kernels = 0;
      for (const Step& s : p->steps) kernels += s.kind == GroupKind::Fused;
      bump(global_counters().cache_hits, kernels);
      return p;
    }
  std::shared_ptr<const Plan> plan = get_plan(roots);
  auto prog = make_program(*plan, sig);
  if (use_cache) {
    plan_cache().insert(sig.bytes, prog);
  } else {
    // Host steps point into the plan's graph: keep it alive with the program.
    std::const_pointer_cast<Program>(prog)->plan = plan;
  }
  return prog;
}

std::shared_ptr<Storage> copy_storage(const Storage& s, Device to) {
  std::shared_ptr<Storage> host;
  if (s.device == Device::cpu()) {
    host = std::make_shared<Storage>(s);
  } else {
    host = Storage::allocate(s.dtype, s.numel);
    memory_backend(s.device)->copy_to_host(s, host->data);
  }
  if (to == Device::cpu()) {
    if (host->owner && s.device != Device::cpu()) return host;
    auto copy = Storage::allocate(s.dtype, s.numel);
    if (s.bytes()) std::memcpy(copy->data, host->data, s.bytes());
    return copy;
  }
  auto be = memory_backend(to);
  auto dev = be->allocate(s.dtype, s.numel);
  be->copy_to_device(*dev, host->data);
  return dev;
}

std::vector<std::shared_ptr<Storage>> run_program(const Program& p, const GraphSignature& sig) {
  std::vector<std::shared_ptr<Storage>> temps(p.temps.size());
  auto value = [&](const ValueRef& v) -> std::shared_ptr<Storage> {
    if (!v.leaf) return temps[v.index];
    const Node* n = sig.leaves[v.index];
    auto r = n->realized();
    return r ? r : n->storage;
  };
  ir::LaunchArgs args;
  for (const Step& st : p.steps) {
    if (st.kind == GroupKind::Fused) {
      args.buffers.clear();
      for (const ValueRef& v : st.inputs) args.buffers.push_back(value(v)->data);
      for (uint32_t t : st.outputs) {
        const Program::Temp& tp = p.temps[t];
        temps[t] = tp.device == Device::cpu() ? Storage::allocate(tp.dtype, tp.numel)
                                              : memory_backend(tp.device)->allocate(tp.dtype, tp.numel);
        args.buffers.push_back(temps[t]->data);
      }
      args.params = st.params;
      st.kernel->run(args);
    } else {
      std::vector<std::vector<double>> in_vals;
      std::vector<const std::vector<double>*> ins;
      for (const ValueRef& v : st.inputs) in_vals.push_back(storage_to_double(*value(v)));
      for (const auto& v : in_vals) ins.push_back(&v);
      // Source and opaque ops run on the host; their result moves to the node's device.
      const Program::Temp& tp = p.temps[st.outputs[0]];
      auto host = double_to_storage(evaluate_node(*st.host_node, ins), tp.dtype);
      temps[st.outputs[0]] = tp.device == Device::cpu() ? host : copy_storage(*host, tp.device);
    }
    bump(global_counters().kernels_launched);
    for (uint32_t t : st.release) temps[t].reset();
  }
  std::vector<std::shared_ptr<Storage>> out;
  for (const ValueRef& r : p.roots) out.push_back(r.leaf ? value(r) : temps[r.index]);
  return out;
}

}  // namespace kfuse::detail
