#include "ir/widen_narrow.hpp"

#include <unordered_map>

namespace kfuse::ir {

namespace {

struct Widener {
  std::unordered_map<const Expr*, ExprRef> memo;
  bool changed = false;

  // `e` rewritten; its dtype is unchanged (a narrow Op becomes Cast(N, op in compute type)).
  ExprRef rewrite(const ExprRef& e) {
    auto it = memo.find(e.get());
    if (it != memo.end()) return it->second;
    ExprRef r = rewrite_uncached(e);
    if (r != e) changed = true;
    memo.emplace(e.get(), r);
    return r;
  }

  // `e` rewritten and in its compute type.
  ExprRef wide(const ExprRef& e) {
    ExprRef r = rewrite(e);
    return is_narrow(r->dtype) ? op(Op::Cast, compute_type(r->dtype), {r}) : r;
  }

  ExprRef rewrite_uncached(const ExprRef& e) {
    const DType dt = e->dtype;
    switch (e->kind) {
      case ExprKind::Const: return is_narrow(dt) ? op(Op::Cast, dt, {constant(e->value, compute_type(dt))}) : e;
      case ExprKind::Acc: return is_narrow(dt) ? op(Op::Cast, dt, {acc(e->index, compute_type(dt))}) : e;
      case ExprKind::Var:
      case ExprKind::Param: return e;
      default: break;
    }
    std::vector<ExprRef> args;
    bool same = true;
    for (const auto& a : e->args) {
      // Cast and Load take their operands as they are; every other op computes in the
      // compute type.
      args.push_back(e->kind == ExprKind::Op && e->op != Op::Cast ? wide(a) : rewrite(a));
      same = same && args.back() == a;
    }
    if (e->kind == ExprKind::Op && e->op == Op::Cast && args[0]->dtype == dt) return args[0];
    if (e->kind == ExprKind::Op && e->op != Op::Cast && is_narrow(dt))
      return op(Op::Cast, dt, {op(e->op, compute_type(dt), std::move(args))});
    if (same) return e;
    auto c = std::make_shared<Expr>(*e);
    c->args = std::move(args);
    return c;
  }
};

}  // namespace

bool widen_narrow(Kernel& k) {
  Widener w;
  for (auto& a : k.accs) {
    a.value = w.wide(a.value);
    if (is_narrow(a.dtype)) {
      a.dtype = compute_type(a.dtype);
      w.changed = true;
    }
  }
  for (auto& ph : k.phases)
    for (auto& s : ph.stores) {
      s.index = w.rewrite(s.index);
      s.value = w.rewrite(s.value);
    }
  return w.changed;
}

}  // namespace kfuse::ir
