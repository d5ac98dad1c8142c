// The executor: finds (or plans, compiles and caches) the program for the roots' graph, runs it
// over the leaves' data and publishes each root's value. See program.hpp for the plan cache.
#include "execute.hpp"

#include <cstring>

#include "kfuse/options.hpp"
#include "runtime/graph_signature.hpp"
#include "prof/recorder.hpp"
#include "runtime/program.hpp"
#include "stats_impl.hpp"

namespace kfuse::detail {

void execute(const NodeRef* all_roots, size_t count) {
  // The API boundary: the process-wide options are read here, once, and passed down.
  const Options& opts = options();
  bool counted = false;
  // One signature per thread, reused so that its buffers keep their capacity. Planning may run
  // user code (pattern plugins); should that evaluate something, the nested call gets its own.
  thread_local GraphSignature tl_sig;
  thread_local int depth = 0;
  GraphSignature local_sig;
  GraphSignature& sig = depth == 0 ? tl_sig : local_sig;
  // Profiled: a top-level evaluation's wall time, from here to the published values.
  struct Depth {
    double t0 = depth == 0 && prof::on() ? prof::now_s() : 0;
    Depth() { ++depth; }
    ~Depth() {
      --depth;
      if (t0 != 0) prof::record_eval(t0, prof::now_s());
    }
  } in_execute;
  std::vector<NodeRef> kept;
  for (;;) {
    // The common call (one unrealized root) passes its array through; otherwise the roots
    // left to compute are gathered.
    size_t pending = 0;
    for (size_t i = 0; i < count; ++i) {
      const NodeRef& r = all_roots[i];
      if (r->is_realized()) continue;
      if (r->op == Op::Buffer) {
        r->set_realized(r->storage);
        continue;
      }
      ++pending;
    }
    if (pending == 0) return;
    const NodeRef* roots = all_roots;
    if (pending != count) {
      kept.clear();
      for (size_t i = 0; i < count; ++i)
        if (!all_roots[i]->is_realized()) kept.push_back(all_roots[i]);
      roots = kept.data();
      pending = kept.size();
      if (pending == 0) return;  // realized meanwhile by another thread
    }
    if (!counted) bump(global_counters().evaluations);
    counted = true;
    graph_signature(roots, pending, sig);
    std::shared_ptr<const Program> prog = get_program(roots, pending, sig, opts);
    if (!prog) continue;  // another thread computed part of the graph while it was planned
    std::shared_ptr<Storage> one;
    std::vector<std::shared_ptr<Storage>> many;
    if (pending > 1) many.resize(pending);
    std::shared_ptr<Storage>* vals = pending > 1 ? many.data() : &one;
    run_program(*prog, sig, vals);
    for (size_t i = 0; i < pending; ++i) {
      std::shared_ptr<Storage> v = std::move(vals[i]);
      // A result that simplified to a borrowed input must not alias the caller's memory.
      if (!v->owner && v->device == Device::cpu()) {
        auto copy = Storage::allocate(v->dtype, v->numel);
        if (v->bytes()) std::memcpy(copy->data, v->data, v->bytes());
        v = copy;
      }
      roots[i]->set_realized(std::move(v));
    }
    return;
  }
}

Tensor transfer(const Tensor& t, Device to) {
  t.eval();
  std::shared_ptr<Storage> src = t.node()->realized();
  return Tensor(make_buffer_node(copy_storage(*src, to), t.shape()));
}

}  // namespace kfuse::detail
