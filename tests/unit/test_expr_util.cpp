// lib/ir/expr_util.hpp: the structural identity and index analyses the backends share.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <optional>

#include "ir/decompose.hpp"
#include "ir/expr_util.hpp"

namespace kfuse::ir {
namespace {

TEST(ExprUtil, StructuralEqualityAndHash) {
  ExprRef x = load(0, DType::F32, var(Space::Outer, 0));
  ExprRef a = op(Op::Add, DType::F32, {x, constant(0.0, DType::F32)});
  ExprRef b = op(Op::Add, DType::F32, {load(0, DType::F32, var(Space::Outer, 0)), constant(0.0, DType::F32)});
  EXPECT_TRUE(same_expr(a.get(), b.get()));
  EXPECT_EQ(expr_hash(a.get()), expr_hash(b.get()));
  // x + -0 is not x + 0 (they differ at x = -0): the old equality merged them.
  ExprRef c = op(Op::Add, DType::F32, {x, constant(-0.0, DType::F32)});
  EXPECT_FALSE(same_expr(a.get(), c.get()));
  ExprRef n1 = constant(NAN, DType::F32), n2 = constant(-NAN, DType::F32);
  EXPECT_TRUE(same_expr(n1.get(), n2.get()));
  EXPECT_EQ(expr_hash(n1.get()), expr_hash(n2.get()));
}

TEST(ExprUtil, DependenceAndAffineStep) {
  ExprRef o0 = var(Space::Outer, 0), o1 = var(Space::Outer, 1), r0 = var(Space::Reduce, 0);
  // o0 * $0 + 3 * (o1 - r0): step 3 along o1, -3 along r0, not constant along o0 (times a param)
  ExprRef e = iadd(imul(o0, param(0)), imul(iconst(3), isub(o1, r0)));
  EXPECT_TRUE(depends_on(e.get(), Space::Outer, 1));
  EXPECT_FALSE(depends_on(e.get(), Space::Outer, 2));
  EXPECT_EQ(affine_step(e.get(), Space::Outer, 1), std::optional<int64_t>(3));
  EXPECT_EQ(affine_step(e.get(), Space::Reduce, 0), std::optional<int64_t>(-3));
  EXPECT_EQ(affine_step(e.get(), Space::Outer, 0), std::nullopt);
  EXPECT_EQ(affine_step(idiv(o1, iconst(2)).get(), Space::Outer, 1), std::nullopt);
  auto s = affine_split(e, Space::Outer, 1);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->step, 3);
  EXPECT_FALSE(depends_on(s->base.get(), Space::Outer, 1));
  EXPECT_EQ(print_expr(s->base), "(add.i64 (mul.i64 o0 $0) (mul.i64 (sub.i64 0 r0) 3))");
  EXPECT_TRUE(contains(load(2, DType::I64, o0).get(), ExprKind::Load));
  // A step that does not fit an int64 (an index holding a sentinel constant, scaled) is not
  // affine, never an overflow (UBSan caught INT64_MIN * 10 from a slice's index).
  const ExprRef big = imul(o1, iconst(std::numeric_limits<int64_t>::min()));
  EXPECT_EQ(affine_step(imul(big, iconst(10)).get(), Space::Outer, 1), std::nullopt);
  EXPECT_EQ(affine_step(isub(iconst(0), big).get(), Space::Outer, 1), std::nullopt);
  EXPECT_EQ(affine_step(iadd(big, big).get(), Space::Outer, 1), std::nullopt);
  EXPECT_FALSE(affine_split(imul(big, iconst(10)), Space::Outer, 1));
}

// A gathered index is clamped by lowering into [0, rows - 1]: the backends read the table's row
// count from it (how they prefetch a bag's rows depends on the table's size).
TEST(ExprUtil, ClampedRowsOfAGatheredIndex) {
  ExprRef id = load(2, DType::I64, var(Space::Reduce, 0));
  auto clamp = [&](ExprRef x, int64_t hi) {
    return op(Op::Minimum, DType::I64, {op(Op::Maximum, DType::I64, {x, iconst(0)}), iconst(hi)});
  };
  ExprRef row = iadd(var(Space::Outer, 1), imul(clamp(id, 1999999), param(2)));
  EXPECT_EQ(clamped_rows(row.get()), std::optional<int64_t>(2000000));
  // two tables: the larger
  EXPECT_EQ(clamped_rows(iadd(row, clamp(id, 7)).get()), std::optional<int64_t>(2000000));
  EXPECT_EQ(clamped_rows(iadd(var(Space::Outer, 1), imul(id, param(2))).get()), std::nullopt);
  // not the lowering's clamp (a lower bound other than 0)
  ExprRef other = op(Op::Minimum, DType::I64, {op(Op::Maximum, DType::I64, {id, iconst(1)}), iconst(9)});
  EXPECT_EQ(clamped_rows(other.get()), std::nullopt);
}

// Index-set splitting: where the comparisons of a loop variable with constants switch, and the
// expression folded for one piece (a concat of widths 3 and 4 along o1; a one-hot column).
TEST(ExprUtil, VarRangeCutsAndFolding) {
  ExprRef o1 = var(Space::Outer, 1), o0 = var(Space::Outer, 0);
  auto cmp = [](Op o, ExprRef a, ExprRef b) { return op(o, DType::Bool, {std::move(a), std::move(b)}); };
  ExprRef in0 = cmp(Op::Lt, o1, iconst(3));
  ExprRef in1 = op(Op::And, DType::Bool, {cmp(Op::Le, iconst(3), o1), cmp(Op::Gt, iconst(7), o1)});
  ExprRef cat = op(Op::Where, DType::F32,
                   {in0, load(0, DType::F32, iadd(o1, imul(o0, iconst(3))), in0),
                    load(1, DType::F32, iadd(isub(o1, iconst(3)), imul(o0, iconst(4))), in1)});
  EXPECT_EQ(var_range_cuts(cat.get(), 1), (std::vector<int64_t>{3, 7}));
  EXPECT_EQ(var_range_cuts(cat.get(), 0), std::vector<int64_t>{});
  EXPECT_EQ(print_expr(fold_var_range(cat, 1, 0, 3)), "(load b0[(add.i64 o1 (mul.i64 o0 3))])");
  EXPECT_EQ(print_expr(fold_var_range(cat, 1, 3, 7)), "(load b1[(add.i64 (sub.i64 o1 3) (mul.i64 o0 4))])");
  // past the last input: the where takes the second load, whose mask is now false: its value 0
  EXPECT_EQ(print_expr(fold_var_range(cat, 1, 7, 100)), "0");
  // a range the cuts do not separate keeps the comparisons
  EXPECT_EQ(fold_var_range(cat, 1, 2, 8), cat);
  // o1 == 4 and o1 != 4 switch at 4 and 5; o1 <= 5 at 6; folded where one point is left
  ExprRef hot = cmp(Op::Eq, o1, iconst(4));
  EXPECT_EQ(var_range_cuts(op(Op::Or, DType::Bool, {hot, cmp(Op::Le, o1, iconst(5))}).get(), 1),
            (std::vector<int64_t>{4, 5, 6}));
  EXPECT_EQ(print_expr(fold_var_range(hot, 1, 4, 5)), "1");
  EXPECT_EQ(print_expr(fold_var_range(cmp(Op::Ne, o1, iconst(4)), 1, 5, 9)), "1");
  EXPECT_EQ(print_expr(fold_var_range(op(Op::Not, DType::Bool, {hot}), 1, 0, 4)), "1");
  // comparisons with anything but a bare variable and a constant are not cuts
  EXPECT_EQ(var_range_cuts(cmp(Op::Lt, iadd(o1, iconst(1)), iconst(3)).get(), 1), std::vector<int64_t>{});
  EXPECT_EQ(var_range_cuts(cmp(Op::Lt, o1, o0).get(), 1), std::vector<int64_t>{});
  // nor constants near the int64 limits (a cut adds 1 to the constant)
  EXPECT_EQ(var_range_cuts(cmp(Op::Le, o1, constant(9.3e18, DType::I64)).get(), 1), std::vector<int64_t>{});
}

TEST(ExprUtil, DecomposeLeavesNoComposite) {
  for (Op o : {Op::Sigmoid, Op::Silu, Op::GeluTanh, Op::GeluErf})
    for (DType t : {DType::F32, DType::F64}) {
      ExprRef e = decompose_op(o, load(0, t, var(Space::Outer, 0)));
      std::function<void(const ExprRef&)> walk = [&](const ExprRef& x) {
        EXPECT_FALSE(x->kind == ExprKind::Op && is_composite(x->op)) << op_name(o);
        for (const auto& a : x->args) walk(a);
      };
      walk(e);
      EXPECT_EQ(e->dtype, t);
    }
}

}  // namespace
}  // namespace kfuse::ir
