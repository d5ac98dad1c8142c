#include "in_place.hpp"

#include "expr_util.hpp"

namespace kfuse::ir {

namespace {

// Every load of buffer `in` in `e` reads `at` (its mask and the index's own loads included).
bool loads_only_at(const Expr* e, int in, const Expr* at) {
  if (e->kind == ExprKind::Load && e->index == in && !same_expr(e->args[0].get(), at)) return false;
  for (const auto& a : e->args)
    if (!loads_only_at(a.get(), in, at)) return false;
  return true;
}

// The index names each point's own element: affine in the loop variables, no gather.
bool one_element_per_point(const Expr* index, size_t outer_dims, size_t reduce_dims) {
  if (contains(index, ExprKind::Load) || contains(index, ExprKind::IDiv) || contains(index, ExprKind::IMod))
    return false;
  for (size_t d = 0; d < outer_dims; ++d)
    if (!depends_on(index, Space::Outer, static_cast<int>(d))) return false;
  for (size_t d = 0; d < reduce_dims; ++d)
    if (!depends_on(index, Space::Reduce, static_cast<int>(d))) return false;
  return true;
}

}  // namespace

bool may_write_in_place(const Kernel& k, int in, int out) {
  if (k.kind != KernelKind::Pointwise && k.kind != KernelKind::Row) return false;
  if (k.dynamic_reduce() || k.phases.empty()) return false;
  if (in < 0 || out < 0 || static_cast<size_t>(in) >= k.buffers.size() || static_cast<size_t>(out) >= k.buffers.size())
    return false;
  if (k.buffers[in].output || !k.buffers[out].output || k.buffers[in].dtype != k.buffers[out].dtype) return false;
  size_t stores = 0;
  for (const Phase& ph : k.phases) stores += ph.stores.size();
  const Phase& last = k.phases.back();
  if (stores != 1 || last.stores.size() != 1 || last.stores[0].buffer != out) return false;
  const Store& st = last.stores[0];
  const Expr* at = st.index.get();
  if (!one_element_per_point(at, k.outer.size(), last.over_reduce ? k.reduce.size() : 0)) return false;
  // Loads of `in` in an earlier phase run over the same reduce domain with the same variables,
  // so "the same index" is the same element there too; a phase that does not loop over it
  // cannot name the reduce variables the store's index needs.
  for (const Phase& ph : k.phases)
    for (const Store& s : ph.stores)
      if (!loads_only_at(s.index.get(), in, at) || !loads_only_at(s.value.get(), in, at)) return false;
  for (const Accumulator& a : k.accs)
    if (!loads_only_at(a.value.get(), in, at)) return false;
  for (const ExprRef& e : k.outer)
    if (!loads_only_at(e.get(), in, at)) return false;
  return true;
}

}  // namespace kfuse::ir
