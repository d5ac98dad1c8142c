// Structural analyses of kernel-IR expressions (see expr_util.hpp).
#include "expr_util.hpp"

#include <cmath>
#include <cstring>
#include <functional>
#include <set>
#include <unordered_map>
#include <unordered_set>

namespace kfuse::ir {

namespace {
bool same_const(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return a == b && std::signbit(a) == std::signbit(b);
}
size_t mix(size_t h, uint64_t v) {
  return (h ^ (v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2))) * 0xff51afd7ed558ccdULL;
}
}  // namespace

bool same_expr(const Expr* a, const Expr* b) {
  if (a == b) return true;
  if (a->kind != b->kind || a->dtype != b->dtype || a->args.size() != b->args.size()) return false;
  switch (a->kind) {
    case ExprKind::Const:
      if (!same_const(a->value, b->value)) return false;
      break;
    case ExprKind::Var:
      if (a->space != b->space || a->index != b->index) return false;
      break;
    case ExprKind::Op:
      if (a->op != b->op) return false;
      break;
    case ExprKind::Param:
    case ExprKind::Load:
    case ExprKind::Acc:
      if (a->index != b->index) return false;
      break;
    case ExprKind::IDiv:
    case ExprKind::IMod:
    case ExprKind::Rand: break;
  }
  for (size_t i = 0; i < a->args.size(); ++i)
    if (!same_expr(a->args[i].get(), b->args[i].get())) return false;
  return true;
}

size_t expr_hash(const Expr* e) {
  size_t h = mix(static_cast<size_t>(e->kind), static_cast<uint64_t>(e->dtype));
  switch (e->kind) {
    case ExprKind::Const: {
      double v = std::isnan(e->value) ? NAN : e->value;  // every NaN alike, as same_expr
      uint64_t bits;
      std::memcpy(&bits, &v, sizeof bits);
      h = mix(h, bits);
      break;
    }
    case ExprKind::Var: h = mix(mix(h, static_cast<uint64_t>(e->space)), static_cast<uint64_t>(e->index)); break;
    case ExprKind::Op: h = mix(h, static_cast<uint64_t>(e->op)); break;
    case ExprKind::Param:
    case ExprKind::Load:
    case ExprKind::Acc: h = mix(h, static_cast<uint64_t>(e->index)); break;
    default: break;
  }
  for (const auto& a : e->args) h = mix(h, expr_hash(a.get()));
  return h;
}

bool depends_on(const Expr* e, Space s, int dim) {
  if (e->kind == ExprKind::Var) return e->space == s && e->index == dim;
  for (const auto& a : e->args)
    if (depends_on(a.get(), s, dim)) return true;
  return false;
}

bool contains(const Expr* e, ExprKind k) {
  if (e->kind == k) return true;
  for (const auto& a : e->args)
    if (contains(a.get(), k)) return true;
  return false;
}

std::optional<int64_t> clamped_rows(const Expr* root) {
  std::optional<int64_t> best;
  std::unordered_set<const Expr*> seen;  // (a DAG: shared subexpressions once)
  std::function<void(const Expr*)> visit = [&](const Expr* e) {
    if (!seen.insert(e).second) return;
    if (e->kind == ExprKind::Op && e->op == Op::Minimum && e->args.size() == 2 && e->args[1]->kind == ExprKind::Const &&
        e->args[0]->kind == ExprKind::Op && e->args[0]->op == Op::Maximum && e->args[0]->args.size() == 2 &&
        is_const(e->args[0]->args[1], 0) && e->args[1]->value >= 0 && e->args[1]->value < 0x1p62) {
      const auto rows = static_cast<int64_t>(e->args[1]->value) + 1;
      if (!best || rows > *best) best = rows;
    }
    for (const auto& a : e->args) visit(a.get());
  };
  visit(root);
  return best;
}

namespace {

// Steps of affine_split/affine_step: a step that does not fit an int64 (an index holding a
// sentinel such as INT64_MIN, scaled) makes the expression not affine rather than overflow.
std::optional<int64_t> step_combine(Op op, int64_t a, int64_t b) {
  int64_t r = 0;
  if (op == Op::Add ? __builtin_add_overflow(a, b, &r) : __builtin_sub_overflow(a, b, &r)) return std::nullopt;
  return r;
}
std::optional<int64_t> step_scale(int64_t step, double c) {
  if (!(c >= -9.2e18 && c <= 9.2e18)) return std::nullopt;  // (also NaN): not an int64 constant
  int64_t r = 0;
  if (__builtin_mul_overflow(step, static_cast<int64_t>(c), &r)) return std::nullopt;
  return r;
}

}  // namespace

std::optional<AffineSplit> affine_split(const ExprRef& e, Space s, int dim) {
  if (!depends_on(e.get(), s, dim)) return AffineSplit{e, 0};
  if (e->kind == ExprKind::Var) return AffineSplit{nullptr, 1};
  if (e->kind != ExprKind::Op || e->dtype != DType::I64) return std::nullopt;
  if (e->op == Op::Add || e->op == Op::Sub) {
    auto a = affine_split(e->args[0], s, dim), b = affine_split(e->args[1], s, dim);
    if (!a || !b) return std::nullopt;
    const std::optional<int64_t> st = step_combine(e->op, a->step, b->step);
    if (!st) return std::nullopt;
    if (e->op == Op::Add)
      return AffineSplit{a->base && b->base ? iadd(a->base, b->base) : (a->base ? a->base : b->base), *st};
    return AffineSplit{b->base ? isub(a->base ? a->base : iconst(0), b->base) : a->base, *st};
  }
  if (e->op == Op::Mul)
    for (int side = 0; side < 2; ++side) {
      const ExprRef& c = e->args[side];
      if (c->kind != ExprKind::Const) continue;
      auto o = affine_split(e->args[1 - side], s, dim);
      if (!o) return std::nullopt;
      const std::optional<int64_t> st = step_scale(o->step, c->value);
      if (!st) return std::nullopt;
      return AffineSplit{o->base ? imul(o->base, c) : nullptr, *st};
    }
  return std::nullopt;
}

std::optional<int64_t> affine_step(const Expr* e, Space s, int dim) {
  if (!depends_on(e, s, dim)) return 0;
  if (e->kind == ExprKind::Var) return 1;
  if (e->kind != ExprKind::Op || e->dtype != DType::I64) return std::nullopt;
  if (e->op == Op::Add || e->op == Op::Sub) {
    auto a = affine_step(e->args[0].get(), s, dim), b = affine_step(e->args[1].get(), s, dim);
    if (!a || !b) return std::nullopt;
    return step_combine(e->op, *a, *b);
  }
  if (e->op == Op::Mul)
    for (int side = 0; side < 2; ++side)
      if (e->args[side]->kind == ExprKind::Const) {
        auto o = affine_step(e->args[1 - side].get(), s, dim);
        if (!o) return std::nullopt;
        return step_scale(*o, e->args[side]->value);
      }
  return std::nullopt;
}

std::optional<ExprRef> symbolic_step(const ExprRef& e, Space s, int dim) {
  if (!depends_on(e.get(), s, dim)) return iconst(0);
  if (e->kind == ExprKind::Var) return iconst(1);
  if (e->kind != ExprKind::Op || e->dtype != DType::I64) return std::nullopt;
  if (e->op == Op::Add || e->op == Op::Sub) {
    auto a = symbolic_step(e->args[0], s, dim), b = symbolic_step(e->args[1], s, dim);
    if (!a || !b) return std::nullopt;
    return e->op == Op::Add ? iadd(*a, *b) : isub(*a, *b);
  }
  if (e->op == Op::Mul)
    for (int side = 0; side < 2; ++side)
      if (!depends_on(e->args[side].get(), s, dim)) {
        auto o = symbolic_step(e->args[1 - side], s, dim);
        if (!o) return std::nullopt;
        return imul(*o, e->args[side]);
      }
  return std::nullopt;
}

namespace {

bool is_var(const Expr* e, int dim) { return e->kind == ExprKind::Var && e->space == Space::Outer && e->index == dim; }
// An integer constant well inside int64 (the cuts add 1 to it; shapes are far smaller).
bool is_int_const(const Expr* e) {
  return e->kind == ExprKind::Const && is_integer(e->dtype) && std::nearbyint(e->value) == e->value &&
         std::fabs(e->value) < 0x1p62;
}

// A comparison of the bare variable with an integer constant, as (op, c) with the variable on the
// left (c < o is o > c); nullopt for anything else.
std::optional<std::pair<Op, int64_t>> var_compare(const Expr* e, int dim) {
  if (e->kind != ExprKind::Op || e->args.size() != 2) return std::nullopt;
  Op o = e->op;
  if (o != Op::Lt && o != Op::Le && o != Op::Gt && o != Op::Ge && o != Op::Eq && o != Op::Ne) return std::nullopt;
  const Expr *a = e->args[0].get(), *b = e->args[1].get();
  if (is_var(b, dim) && is_int_const(a)) {
    std::swap(a, b);
    o = o == Op::Lt ? Op::Gt : o == Op::Le ? Op::Ge : o == Op::Gt ? Op::Lt : o == Op::Ge ? Op::Le : o;
  }
  if (!is_var(a, dim) || !is_int_const(b)) return std::nullopt;
  return std::pair<Op, int64_t>{o, static_cast<int64_t>(b->value)};
}

}  // namespace

std::vector<int64_t> var_range_cuts(const Expr* e, int dim) {
  std::set<int64_t> cuts;
  std::unordered_set<const Expr*> seen;
  std::function<void(const Expr*)> visit = [&](const Expr* x) {
    if (!seen.insert(x).second) return;
    if (auto c = var_compare(x, dim)) {
      const auto [o, v] = *c;
      // (v + 1 cannot overflow: is_int_const bounds v by 2^62)
      if (o == Op::Lt || o == Op::Ge || o == Op::Eq || o == Op::Ne) cuts.insert(v);
      if (o == Op::Le || o == Op::Gt || o == Op::Eq || o == Op::Ne) cuts.insert(v + 1);
    }
    for (const auto& a : x->args) visit(a.get());
  };
  visit(e);
  return {cuts.begin(), cuts.end()};
}

ExprRef fold_var_range(const ExprRef& root, int dim, int64_t lo, int64_t hi) {
  std::unordered_map<const Expr*, ExprRef> memo;
  auto boolean = [](const ExprRef& x) -> std::optional<bool> {
    if (x->kind != ExprKind::Const || x->dtype != DType::Bool) return std::nullopt;
    return x->value != 0;
  };
  std::function<ExprRef(const ExprRef&)> fold = [&](const ExprRef& e) -> ExprRef {
    if (auto it = memo.find(e.get()); it != memo.end()) return it->second;
    ExprRef out = e;
    if (auto c = var_compare(e.get(), dim)) {
      const auto [o, v] = *c;
      const int64_t last = hi - 1;
      std::optional<bool> r;
      switch (o) {
        case Op::Lt:
          r = last < v ? std::optional<bool>(true) : lo >= v ? std::optional<bool>(false) : std::nullopt;
          break;
        case Op::Le:
          r = last <= v ? std::optional<bool>(true) : lo > v ? std::optional<bool>(false) : std::nullopt;
          break;
        case Op::Gt:
          r = lo > v ? std::optional<bool>(true) : last <= v ? std::optional<bool>(false) : std::nullopt;
          break;
        case Op::Ge:
          r = lo >= v ? std::optional<bool>(true) : last < v ? std::optional<bool>(false) : std::nullopt;
          break;
        case Op::Eq:
        case Op::Ne: {
          std::optional<bool> eq = (v < lo || v > last) ? std::optional<bool>(false)
                                   : (lo == last)       ? std::optional<bool>(true)
                                                        : std::nullopt;
          if (eq) r = o == Op::Eq ? *eq : !*eq;
          break;
        }
        default: break;
      }
      if (r) out = constant(*r ? 1 : 0, e->dtype);
    } else if (!e->args.empty()) {
      std::vector<ExprRef> args;
      bool changed = false;
      for (const auto& a : e->args) {
        args.push_back(fold(a));
        changed |= args.back() != a;
      }
      if (e->kind == ExprKind::Op && e->op == Op::Where) {
        if (auto c = boolean(args[0])) out = *c ? args[1] : args[2];
      } else if (e->kind == ExprKind::Op && (e->op == Op::And || e->op == Op::Or) && e->dtype == DType::Bool) {
        const bool is_and = e->op == Op::And;
        auto a = boolean(args[0]), b = boolean(args[1]);
        if ((a && *a != is_and) || (b && *b != is_and)) out = constant(is_and ? 0 : 1, DType::Bool);
        else if (a) out = args[1];  // the neutral operand
        else if (b) out = args[0];
      } else if (e->kind == ExprKind::Op && e->op == Op::Not && e->dtype == DType::Bool) {
        if (auto a = boolean(args[0])) out = constant(*a ? 0 : 1, DType::Bool);
      } else if (e->kind == ExprKind::Load && args.size() == 2) {
        if (auto m = boolean(args[1])) out = *m ? load(e->index, e->dtype, args[0]) : constant(0, e->dtype);
      }
      if (out == e && changed) {
        auto n = std::make_shared<Expr>(*e);
        n->args = std::move(args);
        out = n;
      }
    }
    memo.emplace(e.get(), out);
    return out;
  };
  return fold(root);
}

}  // namespace kfuse::ir
