// Structural analyses of kernel-IR expressions that several backends need: identity (hash and
// equality), dependence on a loop variable, and the affine step along one. One definition each,
// so that the backends agree on which indices are contiguous and which bases are the same.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "kernel.hpp"

namespace kfuse::ir {

/// Structural equality: same kinds, dtypes, ops, ids and args; constants compare by value with
/// NaN equal to NaN and +0 distinct from -0 (x + -0 and x + 0 differ at x = -0).
bool same_expr(const Expr* a, const Expr* b);
/// A hash consistent with same_expr (structurally equal expressions hash alike).
size_t expr_hash(const Expr* e);

/// Hash and equality functors for unordered containers keyed by expression structure.
struct ExprStructHash {
  size_t operator()(const ExprRef& e) const { return expr_hash(e.get()); }
};
struct ExprStructEq {
  bool operator()(const ExprRef& a, const ExprRef& b) const { return same_expr(a.get(), b.get()); }
};

/// Whether `e` reads Var(s, dim) anywhere.
bool depends_on(const Expr* e, Space s, int dim);
/// Whether `e` has a subexpression of kind `k` (e.g. a Load or an Acc inside an index).
bool contains(const Expr* e, ExprKind k);
/// How many rows a gathered index can select: a data-dependent index (one that reads a Load) is
/// clamped into [0, C] by lowering (lower_group.cpp, `minimum(maximum(id, 0), C)`), so C + 1
/// (the largest such C in `e`). nullopt when `e` has no such clamp.
std::optional<int64_t> clamped_rows(const Expr* e);

/// e == base + step * Var(s, dim), step a compile-time constant, found through + - and
/// multiplication by a Const; base (null for 0) does not mention the variable. nullopt when e is
/// not of that form (the variable under idiv/imod, times a Param, inside a Load, ...).
struct AffineSplit {
  ExprRef base;
  int64_t step = 0;
};
std::optional<AffineSplit> affine_split(const ExprRef& e, Space s, int dim);
/// The step of affine_split without building the base.
std::optional<int64_t> affine_step(const Expr* e, Space s, int dim);
/// The step of e along Var(s, dim) as an expression that does not mention the variable (iconst(0)
/// when e does not depend on it), for indices whose step is a run-time value: o2 * $3 + o3 has
/// the step $3 along o2. Found through + - and multiplication by a factor that does not mention
/// the variable; nullopt otherwise (the variable under idiv/imod or inside a Load, ...).
std::optional<ExprRef> symbolic_step(const ExprRef& e, Space s, int dim);

/// Index-set splitting of a loop along Var(Outer, dim): the constants c that comparisons of the
/// bare variable with a constant (o < c, o >= c, o == c, ... either way round) switch at, as the
/// first point of each new piece (o <= c switches at c + 1), sorted and unique. A concat along
/// the last axis of [.., 512] and [.., 512] gives {0, 512, 1024}; `e`'s with none give {}.
std::vector<int64_t> var_range_cuts(const Expr* e, int dim);
/// `e` with Var(Outer, dim) known to lie in [lo, hi) (lo < hi): every comparison of the bare
/// variable with a constant that the range decides becomes a bool constant, and the constants
/// propagate through logical_and/or/not, where (the taken operand) and a load's mask (a true
/// mask is dropped, a false one makes the load its masked value, 0). Subexpressions shared in
/// `e` stay shared (memoised by pointer); parts the range does not touch are returned as they
/// are. One loop piece of var_range_cuts then reads plain, unmasked loads (a concat: a copy).
ExprRef fold_var_range(const ExprRef& e, int dim, int64_t lo, int64_t hi);

}  // namespace kfuse::ir
