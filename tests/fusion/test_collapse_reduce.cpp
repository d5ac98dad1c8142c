// Collapsing adjacent reduce dimensions (lib/ir/collapse_reduce.cpp): which kernels get one flat
// reduce loop, which must keep their dimensions apart, and that the results (values, NaN
// propagation, arg-reduction positions) match the fp64 reference on every backend order.
#include "ir/collapse_reduce.hpp"
#include "runtime/plan.hpp"
#include "test_util.hpp"

namespace kfuse::test {
namespace {

std::vector<int64_t> reduce_dims(const Tensor& y) {
  auto plan = detail::make_plan({y.node()}, /*compile=*/false, options());
  EXPECT_EQ(plan->kernels.size(), 1u);
  return plan->kernels.at(0).lowered.kernel.reduce;
}

void expect_matches_reference(const Tensor& y, double rtol, double atol) {
  EXPECT_TRUE(all_close(values(y), reference_values(y), rtol, atol));
}

TEST(CollapseReduce, ContiguousAxesBecomeOneLoop) {
  Tensor x = make_tensor(random_values(37 * 53, 1, 0.5, 1.5), {37, 53});
  EXPECT_EQ(reduce_dims(sum(x)), (std::vector<int64_t>{37 * 53}));
  Tensor x3 = make_tensor(random_values(5 * 7 * 9, 2), {5, 7, 9});
  EXPECT_EQ(reduce_dims(sum(x3, Axes{1, 2})), (std::vector<int64_t>{63}));
  EXPECT_EQ(reduce_dims(max(x3)), (std::vector<int64_t>{315}));
  // reducing the two leading axes of [5, 7, 9]: their strides (7 * $0 and $0) involve the
  // run-time extent of the kept axis; only constant coefficients are compared, so they stay
  // apart (a column kernel, vectorised across the kept axis anyway)
  EXPECT_EQ(reduce_dims(sum(x3, Axes{0, 1})), (std::vector<int64_t>{5, 7}));
  expect_matches_reference(sum(x), 1e-5, 1e-4);
  expect_matches_reference(sum(x3, Axes{1, 2}), 1e-5, 1e-5);
  expect_matches_reference(sum(x3, Axes{0, 1}), 1e-5, 1e-5);
  expect_matches_reference(max(x3), 0, 0);
  expect_matches_reference(mean(x3 * x3, Axes{1, 2}, true), 1e-5, 1e-6);
}

TEST(CollapseReduce, NonContiguousAccessKeepsDimensions) {
  Tensor x = make_tensor(random_values(6 * 10, 3), {6, 10});
  // a transposed view walks the reduce axes in the other order: strides 1 and 6
  Tensor t = x.transpose(0, 1);
  EXPECT_EQ(reduce_dims(sum(t * 2.0)), (std::vector<int64_t>{10, 6}));
  expect_matches_reference(sum(t * 2.0), 1e-5, 1e-5);
  // an operand broadcast along the outer reduce axis is indexed by the inner one only
  Tensor w = make_tensor(random_values(10, 4), {10});
  EXPECT_EQ(reduce_dims(sum(x * w)), (std::vector<int64_t>{6, 10}));
  expect_matches_reference(sum(x * w), 1e-5, 1e-5);
  // a strided slice: stride 2 between rows of 10 is not 10
  Tensor big = make_tensor(random_values(12 * 10, 5), {12, 10});
  Tensor s = big.slice({Range{0, 12, 2}, Range::all()});
  EXPECT_EQ(reduce_dims(sum(s)), (std::vector<int64_t>{6, 10}));
  expect_matches_reference(sum(s), 1e-5, 1e-5);
}

TEST(CollapseReduce, NaNAndArgReductionsUnchanged) {
  std::vector<double> v = random_values(4 * 8 * 8, 6);
  v[4 * 8 * 8 / 2 + 3] = kNaN;
  Tensor x = make_tensor(v, {4, 8, 8});
  expect_matches_reference(max(x, Axes{1, 2}), 0, 0);
  expect_matches_reference(sum(x, Axes{1, 2}), 1e-5, 1e-5);
  Tensor y = make_tensor(random_values(3 * 5 * 7, 7), {3, 5, 7});
  Tensor am = argmax(y.reshape({3, 35}), 1);
  expect_matches_reference(am, 0, 0);
}

TEST(CollapseReduce, EmptyAndSizeOneAxes) {
  Tensor one = make_tensor(random_values(7, 8), {1, 7});
  expect_matches_reference(sum(one), 1e-6, 1e-6);
  Tensor single = make_tensor(random_values(1, 9), {1, 1});
  expect_matches_reference(sum(single), 0, 0);
  Tensor empty = make_tensor({}, {0, 5});
  EXPECT_TRUE(all_close(values(sum(empty)), {0.0}, 0, 0));
}

}  // namespace
}  // namespace kfuse::test
