// The executor: finds (or plans, compiles and caches) the program for the roots' graph, runs it
// over the leaves' data and publishes each root's value. See program.hpp for the plan cache.
#include "execute.hpp"

#include <cstring>

#include "kfuse/options.hpp"
#include "runtime/graph_signature.hpp"
#include "runtime/program.hpp"
#include "stats_impl.hpp"

namespace kfuse::detail {

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
  GraphSignature sig = graph_signature(roots);
  if (options().logging("fusion")) {
    std::vector<const Node*> raw;
    for (const auto& r : roots) raw.push_back(r.get());
    log("fusion", explain_plan(*make_plan(roots, false), raw).text());
  }
  std::shared_ptr<const Program> prog = get_program(roots, sig);
  std::vector<std::shared_ptr<Storage>> vals = run_program(*prog, sig);
  for (size_t i = 0; i < roots.size(); ++i) {
    std::shared_ptr<Storage> v = std::move(vals[i]);
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
  t.eval();
  std::shared_ptr<Storage> src = t.node()->realized();
  return Tensor(make_buffer_node(copy_storage(*src, to), t.shape()));
}

}  // namespace kfuse::detail
