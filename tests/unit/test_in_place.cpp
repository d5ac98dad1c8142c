// Outputs in place: a kernel's output takes the memory of an intermediate that the kernel reads
// last, where the kernel's IR reads each input element only at the point that writes the output
// element of the same index (ir::may_write_in_place) and the backend's code keeps that order
// (CompiledKernel::in_order_writes). The IR rule on hand-built kernels, then evaluations: the
// results are the reference's and bitwise those of the same kernels into a separate buffer, and
// the counter says when the runtime took the input's memory.
#include <kfuse/kfuse.hpp>

#include "forced_backend.hpp"
#include "ir/in_place.hpp"
#include "test_util.hpp"

namespace kfuse::test {
namespace {

using ir::ExprRef;

ExprRef f32(double v) { return ir::constant(v, DType::F32); }

// y[i] = x[at] * 2 over n points: buffers in0, out0 (of `out_dt`, through a cast).
ir::Kernel pointwise(const ExprRef& at, DType out_dt = DType::F32) {
  ir::Kernel k;
  k.name = "k_test";
  k.kind = ir::KernelKind::Pointwise;
  k.buffers = {{"in0", DType::F32, false}, {"out0", out_dt, true}};
  k.params = {{"outer0", 16}};
  k.outer = {ir::param(0)};
  ExprRef v = ir::op(Op::Mul, DType::F32, {ir::load(0, DType::F32, at), f32(2)});
  if (out_dt != DType::F32) v = ir::op(Op::Cast, out_dt, {v});
  ir::Phase ph;
  ph.stores.push_back({1, ir::var(ir::Space::Outer, 0), v});
  k.phases.push_back(std::move(ph));
  ir::verify_kernel(k);
  return k;
}

// A row kernel over [R, 8]: phase 1 sums x[stat_at], phase 2 stores x[r, j] - sum at [r, j].
ir::Kernel row_kernel(const ExprRef& stat_at) {
  ir::Kernel k;
  k.name = "k_test_row";
  k.kind = ir::KernelKind::Row;
  k.buffers = {{"in0", DType::F32, false}, {"out0", DType::F32, true}};
  k.params = {{"outer0", 4}};
  k.outer = {ir::param(0)};
  k.reduce = {8};
  k.accs.push_back({ir::AccKind::Sum, DType::F32, ir::load(0, DType::F32, stat_at)});
  ir::Phase stats;
  stats.over_reduce = true;
  stats.accs = {0};
  ir::Phase out;
  out.over_reduce = true;
  const ExprRef at = ir::iadd(ir::imul(ir::var(ir::Space::Outer, 0), ir::iconst(8)), ir::var(ir::Space::Reduce, 0));
  out.stores.push_back({1, at, ir::op(Op::Sub, DType::F32, {ir::load(0, DType::F32, at), ir::acc(0, DType::F32)})});
  k.phases = {stats, out};
  ir::verify_kernel(k);
  return k;
}

TEST(InPlaceRule, PointwiseAtItsOwnIndexOnly) {
  const ExprRef i = ir::var(ir::Space::Outer, 0);
  EXPECT_TRUE(ir::may_write_in_place(pointwise(i), 0, 1));
  // x reversed: point i reads the element point n - 1 - i overwrites.
  EXPECT_FALSE(ir::may_write_in_place(pointwise(ir::isub(ir::param(0), ir::iadd(i, ir::iconst(1)))), 0, 1));
  // A broadcast read (several points read one element) and another dtype (other bytes).
  EXPECT_FALSE(ir::may_write_in_place(pointwise(ir::idiv(i, ir::iconst(2))), 0, 1));
  EXPECT_FALSE(ir::may_write_in_place(pointwise(i, DType::I32), 0, 1));
  // Only an input over an output, and only kernels with one store.
  EXPECT_FALSE(ir::may_write_in_place(pointwise(i), 1, 0));
  ir::Kernel two = pointwise(i);
  two.buffers.push_back({"out1", DType::F32, true});
  two.phases[0].stores.push_back({2, i, ir::load(0, DType::F32, i)});
  ir::verify_kernel(two);
  EXPECT_FALSE(ir::may_write_in_place(two, 0, 1));
}

TEST(InPlaceRule, RowKernelsReadTheirOwnRowBeforeWritingIt) {
  const ExprRef r = ir::var(ir::Space::Outer, 0), j = ir::var(ir::Space::Reduce, 0);
  EXPECT_TRUE(ir::may_write_in_place(row_kernel(ir::iadd(ir::imul(r, ir::iconst(8)), j)), 0, 1));
  // Statistics of the next row: another point's elements. Such a read may happen to precede that
  // row's store, but the rule asks for the store's own index in every phase, not for a proof
  // about the order of rows.
  EXPECT_FALSE(
      ir::may_write_in_place(row_kernel(ir::iadd(ir::imul(ir::iadd(r, ir::iconst(1)), ir::iconst(8)), j)), 0, 1));
  // A column walk (x viewed transposed) reads other rows' elements.
  EXPECT_FALSE(ir::may_write_in_place(row_kernel(ir::iadd(ir::imul(j, ir::iconst(4)), r)), 0, 1));
  // Contractions keep partial sums in their output (the backend's business, but the IR kind
  // already says no).
  ir::Kernel c = row_kernel(ir::iadd(ir::imul(r, ir::iconst(8)), j));
  c.kind = ir::KernelKind::Contraction;
  EXPECT_FALSE(ir::may_write_in_place(c, 0, 1));
}

class InPlace : public ForcedBackend {
 protected:
  // Backends whose code reads a point before writing it (LLVM compiles its buffers as noalias).
  bool writes_in_place() const { return GetParam() == "xbyak" || GetParam() == "reference"; }
};

Tensor operand(int64_t r, int64_t c, uint64_t seed) { return make_tensor(random_values(r * c, seed), {r, c}); }

TEST_P(InPlace, RowKernelAfterAMatmulWritesOverItsOutput) {
  for (auto [m, k, n] : {std::tuple<int64_t, int64_t, int64_t>{33, 17, 29}, {1, 5, 1}, {64, 8, 257}}) {
    Tensor a = operand(m, k, 1), b = operand(k, n, 2);
    for (int run = 0; run < 2; ++run) {  // planned, then from the plan cache
      Tensor y = layer_norm(matmul(a, b), Shape{n}, {}, {}, 1e-5);
      const uint64_t before = counters().outputs_in_place;
      y.eval();
      EXPECT_EQ(counters().outputs_in_place - before, writes_in_place() ? 1u : 0u) << m << "x" << k << "x" << n;
      // explain() of the same structure (new inputs: y itself is a value now) names the
      // intermediate the row kernel writes over, the matmul's output.
      Explanation ex = explain(layer_norm(matmul(operand(m, k, 1), operand(k, n, 2)), Shape{n}, {}, {}, 1e-5));
      ASSERT_EQ(ex.kernel_count(), 2u);
      EXPECT_TRUE(ex.kernels[0].writes_over.empty());
      if (writes_in_place()) {
        ASSERT_EQ(ex.kernels[0].outputs.size(), 1u);
        EXPECT_EQ(ex.kernels[1].writes_over, ex.kernels[0].outputs[0]) << ex.text();
        EXPECT_NE(ex.text().find("(over " + ex.kernels[0].outputs[0] + ")"), std::string::npos) << ex.text();
      } else {
        EXPECT_TRUE(ex.kernels[1].writes_over.empty()) << ex.text();
      }
      EXPECT_TRUE(all_close(values(y), reference_values(y), 2e-4, 2e-4)) << m << "x" << k << "x" << n;
      Tensor s = softmax(matmul(a, b), -1);
      s.eval();
      EXPECT_TRUE(all_close(values(s), reference_values(s), 1e-5, 1e-6));
    }
  }
}

TEST_P(InPlace, SameBitsAsIntoASeparateBuffer) {
  // 16 MiB of output: the size at which xbyak streams its stores, which it must not do over an
  // input it has just read.
  const int64_t m = 1024, k = 4, n = 4096;
  if (GetParam() == "reference") GTEST_SKIP() << "the reference backend is the oracle, and slow at 4M elements";
  Tensor a = operand(m, k, 3), b = operand(k, n, 4);
  Tensor h = matmul(a, b);
  h.eval();  // a leaf from here on: the layer_norm below writes a new buffer
  Tensor separate = layer_norm(h, Shape{n}, {}, {}, 1e-5);
  const uint64_t before = counters().outputs_in_place;
  separate.eval();
  ASSERT_EQ(counters().outputs_in_place, before);
  // The same values in new tensors: new nodes (not the evaluated h), the same kernels.
  Tensor fresh = layer_norm(matmul(operand(m, k, 3), operand(k, n, 4)), Shape{n}, {}, {}, 1e-5);
  fresh.eval();
  EXPECT_EQ(counters().outputs_in_place - before, writes_in_place() ? 1u : 0u);
  EXPECT_TRUE(same_bits(values(fresh), values(separate)));
}

TEST_P(InPlace, NeverOverAValueStillNeeded) {
  Tensor a = operand(37, 19, 5), b = operand(19, 37, 6);
  // The intermediate is also a result: it keeps its values.
  Tensor h = matmul(a, b);
  Tensor y = softmax(h, -1);
  const uint64_t before = counters().outputs_in_place;
  eval({h, y});
  EXPECT_EQ(counters().outputs_in_place, before);
  EXPECT_TRUE(all_close(values(h), reference_values(h), 1e-5, 1e-5));
  EXPECT_TRUE(all_close(values(y), reference_values(y), 1e-5, 1e-6));
  // Two readers: at most the last one takes it, and the first still sees the matmul.
  Tensor h2 = matmul(a * 1.5, b);
  Tensor y1 = softmax(h2, -1), y2 = layer_norm(h2, Shape{37}, {}, {}, 1e-5);
  const uint64_t before2 = counters().outputs_in_place;
  eval({y1, y2});
  EXPECT_LE(counters().outputs_in_place - before2, 1u);
  EXPECT_TRUE(all_close(values(y1), reference_values(y1), 1e-5, 1e-6));
  EXPECT_TRUE(all_close(values(y2), reference_values(y2), 2e-4, 2e-4));
  // A transposed read (the softmax over rows of the product's transpose): whichever kernels the
  // plan makes of it, the values are the reference's.
  Tensor t = softmax(transpose(matmul(a, b * 0.5)), -1);
  t.eval();
  EXPECT_TRUE(all_close(values(t), reference_values(t), 1e-5, 1e-6));
}

INSTANTIATE_TEST_SUITE_P(Backends, InPlace, ::testing::Values("xbyak", "llvm", "reference"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace kfuse::test
