// The Tensor handle: properties without evaluation, printing, to_vector/item/data/data_ptr,
// evaluating several tensors at once, copy (from_vector) versus borrow semantics.
#include <sstream>

#include "test_util.hpp"

using namespace kfuse;
using namespace kfuse::test;

namespace {

TEST(TensorApi, PropertiesNeedNoEvaluation) {
  Tensor x = rand({2, 3, 4}, 1);
  Tensor y = sum(exp(x), 1);
  EXPECT_TRUE(y.defined());
  EXPECT_FALSE(Tensor().defined());
  EXPECT_EQ(y.shape(), (Shape{2, 4}));
  EXPECT_EQ(y.dtype(), DType::F32);
  EXPECT_EQ(y.ndim(), 2);
  EXPECT_EQ(y.numel(), 8);
  EXPECT_EQ(y.size(-1), 4);
  EXPECT_EQ(y.size(0), 2);
  EXPECT_EQ(y.device(), Device::cpu());
  EXPECT_EQ(y.node()->realized(), nullptr);  // nothing ran yet
  y.eval();
  EXPECT_NE(y.node()->realized(), nullptr);
  EXPECT_EQ(scalar(1).numel(), 1);
  EXPECT_EQ(zeros({3, 0}).numel(), 0);
}

TEST(TensorApi, ToStringFormat) {
  Tensor x = Tensor::from_vector<float>({1, 2.5f, -3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(x.to_string(), "tensor([[1, 2.5, -3],\n        [4, 5, 6]], shape=[2, 3], dtype=f32)");
  std::ostringstream os;
  os << x;
  EXPECT_EQ(os.str(), x.to_string());
  EXPECT_EQ(Tensor::from_vector<int64_t>({1, -2}, {2}).to_string(), "tensor([1, -2], shape=[2], dtype=i64)");
  EXPECT_EQ(Tensor::from_vector<bool>({true, false}, {2}).to_string(), "tensor([true, false], shape=[2], dtype=bool)");
  EXPECT_EQ(make_tensor({kNaN, kInf, -kInf}, {3}, DType::F64).to_string(),
            "tensor([nan, inf, -inf], shape=[3], dtype=f64)");
  EXPECT_EQ(scalar(3.5).to_string(), "tensor(3.5, shape=[], dtype=f32)");
  EXPECT_EQ(zeros({0}).to_string(), "tensor([], shape=[0], dtype=f32)");
  EXPECT_EQ(zeros({2, 0}, DType::I32).to_string(), "tensor([[],\n        []], shape=[2, 0], dtype=i32)");
  EXPECT_EQ(make_tensor({1.0 / 3}, {1}, DType::F64).to_string(), "tensor([0.333333], shape=[1], dtype=f64)");
  // three dimensions: one more space of indent per level
  EXPECT_EQ(arange(0, 8, 1, DType::I32).reshape({2, 2, 2}).to_string(),
            "tensor([[[0, 1],\n         [2, 3]],\n        [[4, 5],\n         [6, 7]]], shape=[2, 2, 2], dtype=i32)");
  // long dimensions elide their middle
  EXPECT_EQ(arange(10).to_string(), "tensor([0, 1, 2, ..., 7, 8, 9], shape=[10], dtype=i64)");
  EXPECT_EQ(arange(8).to_string(), "tensor([0, 1, 2, 3, 4, 5, 6, 7], shape=[8], dtype=i64)");
  // a view prints its logical order
  EXPECT_EQ(x.transpose().to_string(),
            "tensor([[1, 4],\n        [2.5, 5],\n        [-3, 6]], shape=[3, 2], dtype=f32)");
}

TEST(TensorApi, ToVectorItemDataAndDataPtr) {
  Tensor x = make_tensor({1.75, -2.5, 3}, {3});
  EXPECT_EQ(x.to_vector<float>(), (std::vector<float>{1.75f, -2.5f, 3}));
  EXPECT_EQ(x.to_vector<double>(), (std::vector<double>{1.75, -2.5, 3}));
  EXPECT_EQ(x.to_vector<int32_t>(), (std::vector<int32_t>{1, -2, 3}));  // truncating conversion
  EXPECT_EQ(x.to_vector<int64_t>(), (std::vector<int64_t>{1, -2, 3}));
  EXPECT_EQ(x.to_vector<bool>(), (std::vector<bool>{true, true, true}));
  // item: the one element of any shape with one element
  EXPECT_EQ(sum(x).item<float>(), 2.25f);
  EXPECT_EQ(make_tensor({7}, {1, 1}, DType::I32).item<int32_t>(), 7);
  EXPECT_EQ(make_tensor({7}, {1, 1}, DType::I32).item<double>(), 7.0);
  EXPECT_TRUE(make_tensor({1}, {}, DType::Bool).item<bool>());
  // data(): contiguous row-major values of the result, also for a view
  Tensor t = make_tensor({1, 2, 3, 4, 5, 6}, {2, 3}).transpose();
  const float* p = t.data_ptr<float>();
  EXPECT_EQ(std::vector<float>(p, p + 6), (std::vector<float>{1, 4, 2, 5, 3, 6}));
  EXPECT_EQ(static_cast<const void*>(p), t.data());
  EXPECT_EQ(t.data(), t.data());  // stable once computed
  Tensor i = make_tensor({5, 6}, {2}, DType::I64);
  EXPECT_EQ(i.data_ptr<int64_t>()[1], 6);
  EXPECT_EQ(make_tensor({1, 0}, {2}, DType::Bool).data_ptr<bool>()[0], true);
  EXPECT_EQ(make_tensor({2.5}, {1}, DType::F64).data_ptr<double>()[0], 2.5);
  EXPECT_EQ(make_tensor({9}, {1}, DType::I32).data_ptr<int32_t>()[0], 9);
  // eval() returns the tensor itself, and twice is harmless
  EXPECT_EQ(&x.eval(), &x);
  EXPECT_EQ(x.eval().to_vector<double>(), x.to_vector<double>());
}

TEST(TensorApi, EvalOfSeveralTensorsAtOnce) {
  auto v = random_values(12, 121);
  auto sv = stored_values(v, DType::F32);
  Tensor x = make_tensor(v, {3, 4});
  Tensor e = exp(x);  // shared by all three
  Tensor a = sum(e, 1), b = e * 2.0, c = max(e, 0);
  eval({a, b, c});
  for (const Tensor* t : {&a, &b, &c}) EXPECT_NE(t->node()->realized(), nullptr);
  std::vector<double> ea(3, 0.0), eb, ec(4, -kInf);
  for (int r = 0; r < 3; ++r)
    for (int k = 0; k < 4; ++k) {
      double y = std::exp(sv[r * 4 + k]);
      ea[r] += y;
      eb.push_back(2 * y);
      ec[k] = std::max(ec[k], y);
    }
  double r = 1e-5;
  expect_tensor(a, {3}, DType::F32, ea, r);
  expect_tensor(b, {3, 4}, DType::F32, eb, r);
  expect_tensor(c, {4}, DType::F32, ec, r);
  // evaluating an already evaluated mix, duplicates and an empty list are fine
  eval({a, a, sum(e)});
  eval({});
  // later expressions reuse evaluated results as inputs
  expect_tensor(a + 1.0, {3}, DType::F32, {ea[0] + 1, ea[1] + 1, ea[2] + 1}, r);
}

TEST(TensorApi, FromVectorCopies) {
  std::vector<float> buf = {1, 2, 3};
  Tensor x = Tensor::from_vector(buf, {3});
  Tensor y = Tensor::from_data(buf.data(), {3});
  buf[0] = 100;  // before any evaluation
  EXPECT_EQ(x.to_vector<float>(), (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(Tensor::from_bytes(buf.data(), DType::F32, {2}).to_vector<float>(), (std::vector<float>{100, 2}));
}

TEST(TensorApi, BorrowReadsTheCallersBufferAndResultsNeverAliasIt) {
  std::vector<double> buf = {1, 2, 3, 4};
  Tensor x = Tensor::borrow(buf.data(), {2, 2});
  EXPECT_EQ(x.dtype(), DType::F64);
  Tensor y = x * 2.0;
  // the buffer is read when the result is computed, not when it is recorded
  buf[0] = 10;
  expect_tensor(y, {2, 2}, DType::F64, {20, 4, 6, 8});
  // once computed, results are independent of the buffer (the borrowed tensor itself may
  // present the caller's memory)
  EXPECT_NE(y.data(), static_cast<const void*>(buf.data()));
  // ... also results that simplify to the input or are views of it
  Tensor same = x * 1.0 + 0.0, view = x.reshape({4}), whole = x.slice({Range::all()});
  eval({same, view});
  EXPECT_NE(same.data(), static_cast<const void*>(buf.data()));
  EXPECT_NE(view.data(), static_cast<const void*>(buf.data()));
  buf[1] = -1;
  EXPECT_EQ(y.to_vector<double>(), (std::vector<double>{20, 4, 6, 8}));
  EXPECT_EQ(same.to_vector<double>(), (std::vector<double>{10, 2, 3, 4}));
  EXPECT_EQ(view.to_vector<double>(), (std::vector<double>{10, 2, 3, 4}));
  EXPECT_EQ(whole.node(), x.node());  // an identity view is the borrowed tensor itself
  // two borrows of the same memory are two distinct inputs
  Tensor z = Tensor::borrow(buf.data(), {2, 2});
  EXPECT_NE(z.node(), x.node());
  EXPECT_EQ(z.to_vector<double>(), (std::vector<double>{10, -1, 3, 4}));
  // other element types and borrow_bytes
  int32_t ints[3] = {4, 5, 6};
  EXPECT_EQ((Tensor::borrow(ints, {3}) + 1.0).to_vector<int32_t>(), (std::vector<int32_t>{5, 6, 7}));
  EXPECT_EQ(Tensor::borrow_bytes(ints, DType::I32, {1, 3}).to_vector<int64_t>(), (std::vector<int64_t>{4, 5, 6}));
  // an empty borrow may pass a null pointer
  EXPECT_EQ(Tensor::borrow<float>(nullptr, {0}).numel(), 0);
}

}  // namespace
