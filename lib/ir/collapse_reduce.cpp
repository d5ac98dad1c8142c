// Collapsing adjacent reduce dimensions of a kernel (see collapse_reduce.hpp).
//
// Two adjacent reduce variables r_i (extent n_i) and r_j = r_{i+1} (extent n_j) can become one
// variable f = r_i * n_j + r_j of extent n_i * n_j when every integer expression that mentions
// them is affine in them with c_i == c_j * n_j: then c_i r_i + c_j r_j = c_j f, so substituting
// r_i -> 0 and r_j -> f leaves every index unchanged, and f walks the points in the same
// (row-major) order, so reductions add in the same order and arg-reductions report the same
// linear position. Anything else (a variable under a division or modulo, in a comparison,
// multiplied by a parameter) keeps the dimensions apart.
#include "ir/collapse_reduce.hpp"

#include <functional>
#include <optional>
#include <unordered_map>

namespace kfuse::ir {

namespace {

// Whether e mentions r_i or r_j (memoised: value expressions are DAGs with much sharing).
bool mentions(const Expr* e, int i, int j, std::unordered_map<const Expr*, bool>& memo) {
  if (auto it = memo.find(e); it != memo.end()) return it->second;
  bool m = e->kind == ExprKind::Var && e->space == Space::Reduce && (e->index == i || e->index == j);
  for (const auto& a : e->args) m = m || mentions(a.get(), i, j, memo);
  memo[e] = m;
  return m;
}

struct Coeffs {
  int64_t ci = 0, cj = 0;
};

bool is_index_arith(const Expr* e) {
  return e->kind == ExprKind::Op && e->dtype == DType::I64 &&
         (e->op == Op::Add || e->op == Op::Sub || e->op == Op::Mul);
}

// Coefficients of r_i and r_j in an integer expression, or nullopt when not affine in them.
std::optional<Coeffs> affine(const Expr* e, int i, int j, std::unordered_map<const Expr*, bool>& memo) {
  if (!mentions(e, i, j, memo)) return Coeffs{};
  if (e->kind == ExprKind::Var) return e->index == i ? Coeffs{1, 0} : Coeffs{0, 1};
  if (!is_index_arith(e)) return std::nullopt;
  auto a = affine(e->args[0].get(), i, j, memo), b = affine(e->args[1].get(), i, j, memo);
  if (!a || !b) return std::nullopt;
  switch (e->op) {
    case Op::Add: return Coeffs{a->ci + b->ci, a->cj + b->cj};
    case Op::Sub: return Coeffs{a->ci - b->ci, a->cj - b->cj};
    default: {  // Mul: one side must be a constant
      const Expr* c = e->args[0]->kind == ExprKind::Const   ? e->args[0].get()
                      : e->args[1]->kind == ExprKind::Const ? e->args[1].get()
                                                            : nullptr;
      if (!c) return std::nullopt;
      const Coeffs& v = c == e->args[0].get() ? *b : *a;
      auto m = static_cast<int64_t>(c->value);
      return Coeffs{v.ci * m, v.cj * m};
    }
  }
}

// Every maximal integer-arithmetic subtree that mentions r_i or r_j must be affine with the
// ratio c_i == c_j * n_j.
bool mergeable(const Kernel& k, int i, int64_t nj) {
  std::unordered_map<const Expr*, bool> seen, memo;
  bool ok = true;
  auto root = [&](const Expr* e) {
    auto c = affine(e, i, i + 1, memo);
    if (!c || c->ci != c->cj * nj) ok = false;
  };
  std::function<void(const Expr*, bool)> walk = [&](const Expr* e, bool parent_arith) {
    if (!ok || !mentions(e, i, i + 1, memo)) return;
    bool arith = is_index_arith(e) || e->kind == ExprKind::Var;
    if (arith && !parent_arith) root(e);
    if (seen.count(e)) return;
    seen[e] = true;
    for (const auto& a : e->args) walk(a.get(), arith && e->kind != ExprKind::Var);
  };
  for (const auto& a : k.accs) walk(a.value.get(), false);
  for (const auto& ph : k.phases)
    for (const auto& s : ph.stores) {
      walk(s.index.get(), false);
      walk(s.value.get(), false);
    }
  return ok;
}

// Rebuilds e with r_i -> 0, r_{i+1} -> r_i, r_{>i+1} -> one lower (sharing kept).
ExprRef substitute(const ExprRef& e, int i, std::unordered_map<const Expr*, ExprRef>& memo) {
  if (auto it = memo.find(e.get()); it != memo.end()) return it->second;
  ExprRef out;
  std::vector<ExprRef> args;
  for (const auto& a : e->args) args.push_back(substitute(a, i, memo));
  switch (e->kind) {
    case ExprKind::Var:
      if (e->space != Space::Reduce || e->index < i) out = e;
      else if (e->index == i) out = iconst(0);
      else out = var(Space::Reduce, e->index - 1);
      break;
    case ExprKind::Const:
    case ExprKind::Param:
    case ExprKind::Acc: out = e; break;
    case ExprKind::Load: out = load(e->index, e->dtype, args[0], args.size() > 1 ? args[1] : nullptr); break;
    case ExprKind::IDiv: out = idiv(args[0], args[1]); break;
    case ExprKind::IMod: out = imod(args[0], args[1]); break;
    case ExprKind::Rand: out = rand_uniform(e->dtype, args[0], args[1]); break;
    case ExprKind::Op:
      if (is_index_arith(e.get()))
        out = e->op == Op::Add   ? iadd(args[0], args[1])
              : e->op == Op::Sub ? isub(args[0], args[1])
                                 : imul(args[0], args[1]);
      else out = op(e->op, e->dtype, args);
      break;
  }
  memo[e.get()] = out;
  return out;
}

}  // namespace

bool collapse_reduce_dims(Kernel& k) {
  bool changed = false;
  for (int i = 0; i + 1 < static_cast<int>(k.reduce.size());) {
    if (!mergeable(k, i, k.reduce[i + 1])) {
      ++i;
      continue;
    }
    std::unordered_map<const Expr*, ExprRef> memo;
    for (auto& a : k.accs) a.value = substitute(a.value, i, memo);
    for (auto& ph : k.phases)
      for (auto& s : ph.stores) {
        s.index = substitute(s.index, i, memo);
        s.value = substitute(s.value, i, memo);
      }
    k.reduce[i] *= k.reduce[i + 1];
    k.reduce.erase(k.reduce.begin() + i + 1);
    changed = true;  // and try the merged dimension with the next one
  }
  return changed;
}

}  // namespace kfuse::ir
