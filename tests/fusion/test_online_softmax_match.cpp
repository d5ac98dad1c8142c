// The online-softmax matcher (lib/ir/online_softmax.hpp) against the kernels the lowering really
// produces: if the lowering's form drifts, backends would silently lose the one-loop form.
#include "ir/online_softmax.hpp"
#include "runtime/plan.hpp"
#include "test_util.hpp"

namespace kfuse::test {
namespace {

ir::Kernel lowered(const Tensor& y) {
  auto plan = detail::make_plan({y.node()}, /*compile=*/false, options());
  EXPECT_EQ(plan->kernels.size(), 1u);
  return plan->kernels.at(0).lowered.kernel;
}

TEST(OnlineSoftmaxMatch, SoftmaxFamilyRows) {
  Tensor x = make_tensor(random_values(6 * 2000, 1), {6, 2000});
  for (const Tensor& y : {softmax(x, -1), log_softmax(x, -1), sum(exp(x - max(x, -1, true)), -1) * 2.0}) {
    ir::Kernel k = lowered(y);
    ir::OnlineExpSum m = ir::find_online_exp_sum(k);
    ASSERT_EQ(m.phase, 0) << ir::print_kernel(k);
    EXPECT_EQ(k.accs.at(m.max_acc).kind, ir::AccKind::Max);
    EXPECT_EQ(k.accs.at(m.sum_acc).kind, ir::AccKind::Sum);
  }
  // Not the pattern: logsumexp shifts by where(|m| == inf, 0, m) (so that a row of -inf gives
  // -inf, not NaN), layer_norm has no max.
  EXPECT_EQ(ir::find_online_exp_sum(lowered(logsumexp(x, -1))).phase, -1);
  Tensor w = make_tensor(random_values(2000, 2), {2000}), b = make_tensor(random_values(2000, 3), {2000});
  EXPECT_EQ(ir::find_online_exp_sum(lowered(layer_norm(x, {2000}, w, b))).phase, -1);
}

TEST(OnlineSoftmaxMatch, SameExprIsStructural) {
  auto x1 = ir::load(0, DType::F32, ir::var(ir::Space::Reduce, 0));
  auto x2 = ir::load(0, DType::F32, ir::var(ir::Space::Reduce, 0));
  auto y = ir::load(1, DType::F32, ir::var(ir::Space::Reduce, 0));
  EXPECT_TRUE(ir::same_expr(x1.get(), x2.get()));
  EXPECT_FALSE(ir::same_expr(x1.get(), y.get()));
  auto c = ir::constant(2, DType::F32);
  EXPECT_TRUE(ir::same_expr(ir::op(Op::Mul, DType::F32, {x1, c}).get(), ir::op(Op::Mul, DType::F32, {x2, c}).get()));
  EXPECT_FALSE(ir::same_expr(ir::op(Op::Mul, DType::F32, {x1, c}).get(), ir::op(Op::Add, DType::F32, {x2, c}).get()));
  EXPECT_FALSE(ir::same_expr(ir::op(Op::Mul, DType::F32, {x1, c}).get(),
                             ir::op(Op::Mul, DType::F32, {x2, ir::constant(3, DType::F32)}).get()));
}

}  // namespace
}  // namespace kfuse::test
