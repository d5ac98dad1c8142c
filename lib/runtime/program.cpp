#include "program.hpp"

#include <cstring>
#include <mutex>
#include <unordered_map>

#include "../eval/reference_eval.hpp"
#include "backend/thread_pool.hpp"
#include "fusion/pattern_registry.hpp"
#include "fusion/traffic.hpp"
#include "ir/in_place.hpp"
#include "kfuse/error.hpp"
#include "graph/spin_lock.hpp"
#include "stats_impl.hpp"

namespace kfuse::detail {

namespace {

// The profiler's view of a step, fixed with the program: bytes from the plan's minimum traffic,
// FLOPs from the kernel IR with this program's launch parameters.
std::shared_ptr<const prof::StepInfo> step_info(const FusionGroup& g, const PlannedKernel& pk) {
  auto info = std::make_shared<prof::StepInfo>();
  if (g.kind == GroupKind::Fused) {
    info->kernel = pk.lowered.kernel.name;
    info->kind = ir::kernel_kind_name(pk.lowered.kernel.kind);
    info->flops = pk.flops();
  } else {
    info->kernel = std::string("k_") + op_name(g.nodes.at(0)->op);
    info->kind = "host";
  }
  for (const Node* o : g.outputs) {
    if (!info->shape.empty()) info->shape += ' ';
    info->shape += dtype_name(o->dtype);
    info->shape += shape_str(o->shape);
  }
  if (!g.outputs.empty()) {
    info->dev = g.outputs[0]->device;
    info->dt = g.outputs[0]->dtype;
  }
  Traffic t = min_traffic(g);
  info->read_bytes = static_cast<double>(t.read_bytes);
  info->write_bytes = static_cast<double>(t.write_bytes);
  return info;
}

// Output 0 of step `s` takes the memory of an input temporary that dies there when the kernel
// may write over it. The stores then hit lines the kernel has just read (no read for ownership
// of cold ones) and nothing is allocated: the MLP block's layer_norm [512, 4096] f32 over the
// GEMM's output, 1 thread, Intel Xeon, 0.54-0.67 ms against 1.48-1.65 ms into a new buffer
// (docs/performance.md, "Outputs in place").
// Host memory only: GPU kernels read their inputs through read-only caches.
void choose_in_place(Program& prog, size_t s, const PlannedKernel& pk) {
  Step& st = prog.steps[s];
  if (!st.kernel || !st.kernel->in_order_writes || st.outputs.size() != 1) return;
  const Program::Temp& out = prog.temps[st.outputs[0]];
  if (out.device != Device::cpu()) return;
  const ir::Kernel& k = pk.lowered.kernel;
  for (uint32_t t : st.release) {
    const Program::Temp& in = prog.temps[t];
    if (in.dtype != out.dtype || in.numel != out.numel || in.device != out.device) continue;
    int slot = -1, uses = 0;
    for (size_t i = 0; i < st.inputs.size(); ++i)
      if (!st.inputs[i].leaf && st.inputs[i].index == t) {
        slot = static_cast<int>(i);
        ++uses;
      }
    if (uses != 1 || !ir::may_write_in_place(k, slot, static_cast<int>(st.inputs.size()))) continue;
    st.in_place = t;
    return;
  }
}

}  // namespace

std::shared_ptr<const Program> make_program(const Plan& plan, const GraphSignature& sig) {
  auto prog = std::make_shared<Program>();
  std::unordered_map<const Node*, ValueRef> where;
  for (size_t i = 0; i < sig.leaves.size(); ++i) where[sig.leaves[i]] = {true, static_cast<uint32_t>(i)};
  auto ref_of = [&](const Node* n) {
    auto it = where.find(n);
    if (it == where.end()) {
      // A graph pass can rewrite a node into one computed earlier that the recorded graph did
      // not contain (exp(x + 0) -> exp(x) after exp(x) was evaluated): a leaf the signature
      // does not list. Its value is taken from the node itself; such a program belongs to this
      // graph instance only (get_program does not cache it).
      if (!n->is_realized())
        throw InternalError(std::string("program: value of ") + op_name(n->op) + " has no producer");
      ValueRef v{true, static_cast<uint32_t>(sig.leaves.size() + prog->extra_leaves.size())};
      prog->extra_leaves.push_back(n);
      where[n] = v;
      return v;
    }
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
    st.info = step_info(g, plan.kernels[gi]);
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
  for (const Step& st : prog->steps) prog->fused_steps += st.kind == GroupKind::Fused;
  // Liveness: release each temporary after its last reader (roots are never released).
  std::vector<int> last(prog->temps.size(), -1);
  for (size_t s = 0; s < prog->steps.size(); ++s)
    for (const ValueRef& v : prog->steps[s].inputs)
      if (!v.leaf) last[v.index] = static_cast<int>(s);
  for (const ValueRef& r : prog->roots)
    if (!r.leaf) last[r.index] = -2;
  for (size_t t = 0; t < last.size(); ++t)
    if (last[t] >= 0) prog->steps[last[t]].release.push_back(static_cast<uint32_t>(t));
  for (size_t gi = 0; gi < prog->steps.size(); ++gi)
    if (plan.partition.groups[gi].kind == GroupKind::Fused) choose_in_place(*prog, gi, plan.kernels[gi]);
  return prog;
}

namespace {

// Programs by graph signature. Keyed by the signature's hash; each entry keeps the full
// encoding and a hit compares it, so a hash collision costs a miss, never a wrong program.
// A spin lock rather than a shared_mutex: the critical section is a probe and a compare, and
// every tiny evaluation goes through it.
class ProgramCache {
 public:
  std::shared_ptr<const Program> find(const GraphSignature& sig) {
    std::lock_guard<SpinLock> lk(mu_);
    if (generation_ != generation()) return nullptr;
    auto range = map_.equal_range(sig.hash);
    for (auto it = range.first; it != range.second; ++it)
      if (it->second.words == sig.words) return it->second.program;
    return nullptr;
  }
  void insert(const GraphSignature& sig, std::shared_ptr<const Program> p) {
    Map dropped;  // destroyed after the lock is released: programs free compiled kernels
    std::lock_guard<SpinLock> lk(mu_);
    // Programs hold kernels compiled under the options of their time (backends, cache) and
    // groups formed by the patterns of their time.
    Generation gen = generation();
    if (generation_ != gen) {
      dropped.swap(map_);
      generation_ = gen;
    }
    // Bounded: a program pins its compiled kernels, so an unbounded table would defeat the
    // kernel cache's eviction. Past the bound the table starts over (cheap to refill).
    if (map_.size() >= kMaxPrograms) dropped.swap(map_);
    auto range = map_.equal_range(sig.hash);
    for (auto it = range.first; it != range.second; ++it)
      if (it->second.words == sig.words) {  // planned by two threads at once: keep one
        it->second.program.swap(p);
        return;
      }
    map_.emplace(sig.hash, Entry{sig.words, std::move(p)});
  }
  static constexpr size_t kMaxPrograms = 1024;

 private:
  struct Entry {
    std::vector<uint64_t> words;
    std::shared_ptr<const Program> program;
  };
  using Map = std::unordered_multimap<uint64_t, Entry>;
  using Generation = std::pair<uint64_t, uint64_t>;
  static Generation generation() { return {options_generation(), pattern_generation()}; }
  SpinLock mu_;
  Generation generation_{0, 0};
  Map map_;
};

ProgramCache& program_cache() {
  static auto* c = new ProgramCache();
  return *c;
}

}  // namespace

std::shared_ptr<const Program> find_program(const GraphSignature& sig) {
  return sig.cacheable ? program_cache().find(sig) : nullptr;
}

std::shared_ptr<const Program> get_program(const NodeRef* roots, size_t n, const GraphSignature& sig,
                                           const Options& opts) {
  bool use_cache = sig.cacheable && opts.cache_mode != "off";
  if (use_cache)
    if (auto p = program_cache().find(sig)) {
      // A program hit is a memory-cache hit for each of its kernels.
      bump(global_counters().cache_hits, p->fused_steps);
      return p;
    }
  std::vector<NodeRef> rs(roots, roots + n);
  std::shared_ptr<const Plan> plan = make_plan(rs, /*compile=*/true, opts);
  // KFUSE_LOG=fusion: the report of the plan just made (a graph found in the cache was logged
  // when it was planned).
  if (opts.logging("fusion")) {
    std::vector<const Node*> raw;
    for (const auto& r : rs) raw.push_back(r.get());
    log("fusion", explain_plan(*plan, raw).text());
  }
  // Which nodes are realized is the one part of the structure that can change while it is
  // planned: another thread may finish evaluating a node of this graph. The planner then saw
  // leaves the signature does not list, and the program could not find their values. Realizing
  // is one-way, so an unchanged signature now means the planner saw what the signature saw.
  GraphSignature now;
  graph_signature(roots, n, now);
  if (now.words != sig.words) return nullptr;
  auto prog = make_program(*plan, sig);
  if (use_cache && prog->extra_leaves.empty()) {
    program_cache().insert(sig, prog);
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

namespace {

// A vector with its first N elements inline: the values of a small program live on the stack.
template <typename T, size_t N>
class InlineVec {
 public:
  explicit InlineVec(size_t n) : size_(n) {
    if (n > N) heap_.resize(n);
  }
  T& operator[](size_t i) { return size_ > N ? heap_[i] : inline_[i]; }

 private:
  size_t size_;
  T inline_[N];
  std::vector<T> heap_;
};

}  // namespace

void run_program(const Program& p, const GraphSignature& sig, std::shared_ptr<Storage>* out) {
  InlineVec<std::shared_ptr<Storage>, 16> temps(p.temps.size());
  // A leaf's value lives as long as its node (a realized value is never replaced), and the
  // caller's roots keep the graph alive: raw pointers, no reference counting per leaf.
  const size_t nsig = sig.leaves.size();
  auto leaf_node = [&](size_t i) { return i < nsig ? sig.leaves[i] : p.extra_leaves[i - nsig]; };
  auto leaf_value = [&](uint32_t i) -> std::shared_ptr<Storage> {
    const Node* n = leaf_node(i);
    auto r = n->realized();
    return r ? r : n->storage;
  };
  InlineVec<Storage*, 8> leaves(nsig + p.extra_leaves.size());
  for (size_t i = 0; i < nsig + p.extra_leaves.size(); ++i) {
    const Node* n = leaf_node(i);
    leaves[i] = n->is_realized() ? n->realized().get() : n->storage.get();
  }
  auto value = [&](const ValueRef& v) -> Storage* { return v.leaf ? leaves[v.index] : temps[v.index].get(); };
  // The launch arguments' vectors keep their capacity between runs on this thread: nothing
  // that runs a kernel evaluates another program on the same thread, and a nested run (should
  // one ever happen) uses its own.
  thread_local ir::LaunchArgs tl_args;
  thread_local bool tl_busy = false;
  ir::LaunchArgs local_args;
  bool own = !tl_busy;
  ir::LaunchArgs& args = own ? tl_args : local_args;
  struct Release {
    bool own;
    ~Release() {
      if (own) tl_busy = false;
    }
  } release{own};
  if (own) tl_busy = true;
  for (const Step& st : p.steps) {
    if (st.kind == GroupKind::Fused) {
      args.buffers.clear();
      for (const ValueRef& v : st.inputs) args.buffers.push_back(value(v)->data);
      for (uint32_t t : st.outputs) {
        const Program::Temp& tp = p.temps[t];
        if (st.in_place >= 0 && t == st.outputs[0]) {
          temps[t] = temps[st.in_place];  // (released after the step: the output keeps it)
          bump(global_counters().outputs_in_place);
        } else {
          temps[t] = tp.device == Device::cpu() ? Storage::allocate(tp.dtype, tp.numel)
                                                : memory_backend(tp.device)->allocate(tp.dtype, tp.numel);
        }
        args.buffers.push_back(temps[t]->data);
      }
      args.params.assign(st.params.begin(), st.params.end());
      if (prof::on()) [[unlikely]] {
        double t0 = prof::now_s();
        double s = st.kernel->run_timed(args);
        prof::record_launch(*st.info, st.backend, t0, s, num_threads());
      } else {
        st.kernel->run(args);
      }
    } else {
      const bool timed = prof::on();
      const double t0 = timed ? prof::now_s() : 0;
      std::vector<Values> in_vals;
      std::vector<const Values*> ins;
      for (const ValueRef& v : st.inputs) in_vals.push_back(storage_values(*value(v)));
      for (const auto& v : in_vals) ins.push_back(&v);
      // Opaque ops run on the host; their result moves to the node's device.
      const Program::Temp& tp = p.temps[st.outputs[0]];
      auto host = values_storage(evaluate_node(*st.host_node, ins), tp.dtype);
      temps[st.outputs[0]] = tp.device == Device::cpu() ? host : copy_storage(*host, tp.device);
      if (timed) prof::record_launch(*st.info, st.backend, t0, prof::now_s() - t0, num_threads());
    }
    bump(global_counters().kernels_launched);
    for (uint32_t t : st.release) temps[t].reset();
  }
  for (size_t i = 0; i < p.roots.size(); ++i)
    out[i] = p.roots[i].leaf ? leaf_value(p.roots[i].index) : temps[p.roots[i].index];
}

}  // namespace kfuse::detail
