#include "ir/flops.hpp"

#include <unordered_set>

namespace kfuse::ir {

namespace {

// Distinct float Op nodes under `e` (shared subexpressions are computed once by every backend).
void count_ops(const ExprRef& e, std::unordered_set<const Expr*>& seen, int64_t& n) {
  if (!e || !seen.insert(e.get()).second) return;
  if (e->kind == ExprKind::Load) return;  // its index and mask are integer/bool work
  if (e->kind == ExprKind::Op && is_float(e->dtype) && e->op != Op::Cast) n += e->op == Op::Fma ? 2 : 1;
  for (const ExprRef& a : e->args) count_ops(a, seen, n);
}

}  // namespace

double kernel_flops(const Kernel& k, const std::vector<int64_t>& params) {
  const double outer = static_cast<double>(outer_points(k, params));
  const double reduce = static_cast<double>(k.reduce_numel());
  double per_point = 0;
  for (const Phase& ph : k.phases) {
    std::unordered_set<const Expr*> seen;
    int64_t n = 0;
    for (const Store& s : ph.stores) count_ops(s.value, seen, n);
    for (int a : ph.accs) {
      const ExprRef& v = k.accs[static_cast<size_t>(a)].value;
      count_ops(v, seen, n);
      ++n;  // the fold itself (+, *, max, min, compare)
      // an integer contraction's product (u8 x i8 into i32: the work of its dot products)
      if (k.kind == KernelKind::Contraction && !is_float(v->dtype)) ++n;
    }
    per_point += static_cast<double>(n) * (ph.over_reduce ? reduce : 1.0);
  }
  return per_point * outer;
}

}  // namespace kfuse::ir
