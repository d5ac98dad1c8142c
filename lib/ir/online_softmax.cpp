// Online softmax matcher (see online_softmax.hpp).
#include "online_softmax.hpp"

namespace kfuse::ir {

namespace {

// The phase folds exactly one accumulator and stores nothing; returns it, or -1.
int sole_acc(const Phase& p) { return p.over_reduce && p.accs.size() == 1 && p.stores.empty() ? p.accs[0] : -1; }

}  // namespace

OnlineExpSum find_online_exp_sum(const Kernel& k) {
  for (size_t p = 0; p + 1 < k.phases.size(); ++p) {
    const int m = sole_acc(k.phases[p]), s = sole_acc(k.phases[p + 1]);
    if (m < 0 || s < 0) continue;
    const Accumulator &am = k.accs[m], &as = k.accs[s];
    if (am.kind != AccKind::Max || am.dtype != DType::F32 || as.kind != AccKind::Sum || as.dtype != DType::F32)
      continue;
    const Expr* e = as.value.get();
    if (e->kind != ExprKind::Op || e->op != Op::Exp || e->dtype != DType::F32) continue;
    const Expr* d = e->args[0].get();
    if (d->kind != ExprKind::Op || d->op != Op::Sub || d->dtype != DType::F32) continue;
    const Expr* mref = d->args[1].get();
    if (mref->kind != ExprKind::Acc || mref->index != m) continue;
    if (!same_expr(d->args[0].get(), am.value.get())) continue;
    return {static_cast<int>(p), m, s, am.value};
  }
  return {};
}

}  // namespace kfuse::ir
