// Golden kernel IR of the two kernels every backend must handle best: log_softmax and layer_norm
// rows. A change here changes every cache key: update the text only for an intended IR change.
#include "runtime/plan.hpp"
#include "test_util.hpp"

namespace kfuse::test {
namespace {

std::string kernel_text(const Tensor& y) {
  auto plan = detail::make_plan({y.node()}, /*compile=*/false, options());
  EXPECT_EQ(plan->kernels.size(), 1u);
  return ir::print_kernel(plan->kernels.at(0).lowered.kernel);
}

TEST(KernelIrGolden, LogSoftmaxRow) {
  Tensor x = make_tensor(random_values(40, 1), {4, 10});
  EXPECT_EQ(kernel_text(log_softmax(x, -1)), std::string(R"IR(kernel k_log_softmax_f32 (row)
  buffers: in0:f32 out0:f32
  params: $0=outer0
  outer: [$0]  reduce: [10]
  phase 0 over reduce:
    t0 = (load in0[(add.i64 r0 (mul.i64 o0 10))])
    acc0 = max.f32 t0
  phase 1 over reduce:
    t1 = (load in0[(add.i64 r0 (mul.i64 o0 10))])
    t2 = (sub.f32 t1 acc0)
    acc1 = sum.f32 (exp.f32 t2)
  phase 2 over reduce:
    t3 = (load in0[(add.i64 r0 (mul.i64 o0 10))])
    t4 = (sub.f32 t3 acc0)
    store out0[(add.i64 r0 (mul.i64 o0 10))] = (sub.f32 t4 (log.f32 acc1))
)IR"));
  // Only the batch changes: same text (the outer extent is a run-time parameter).
  Tensor x2 = make_tensor(random_values(70, 2), {7, 10});
  EXPECT_EQ(kernel_text(log_softmax(x2, -1)), kernel_text(log_softmax(x, -1)));
}

TEST(KernelIrGolden, LayerNormRow) {
  Tensor x = make_tensor(random_values(40, 3), {4, 10});
  Tensor w = make_tensor(random_values(10, 4), {10}), b = make_tensor(random_values(10, 5), {10});
  EXPECT_EQ(kernel_text(layer_norm(x, {10}, w, b)), std::string(R"IR(kernel k_layer_norm_f32 (row)
  buffers: in0:f32 in1:f32 in2:f32 out0:f32
  params: $0=outer0
  outer: [$0]  reduce: [10]
  phase 0 over reduce:
    t0 = (load in0[(add.i64 r0 (mul.i64 o0 10))])
    acc0 = sum.f32 t0
  phase 1 over reduce:
    t1 = (load in0[(add.i64 r0 (mul.i64 o0 10))])
    t2 = (sub.f32 t1 (mul.f32 acc0 0.10000000149011612))
    acc1 = sum.f32 (square.f32 t2)
  phase 2 over reduce:
    t3 = (load in0[(add.i64 r0 (mul.i64 o0 10))])
    t4 = (sub.f32 t3 (mul.f32 acc0 0.10000000149011612))
    store out0[(add.i64 r0 (mul.i64 o0 10))] = (add.f32 (mul.f32 (mul.f32 t4 (rsqrt.f32 (add.f32 (mul.f32 acc1 0.10000000149011612) 9.9999997473787516e-06))) (load in1[r0])) (load in2[r0]))
)IR"));
}

// randn fused with its consumer: Box-Muller over the f64 uniforms of counters 2i and 2i+1, the
// seed a run-time parameter ($1), so every seed shares this text and key.
TEST(KernelIrGolden, RandnFusedWithItsConsumer) {
  Tensor x = make_tensor(random_values(6, 7), {6});
  const std::string text = kernel_text(relu(randn({6}, 7) * 2.0 + x));
  EXPECT_EQ(text, std::string(R"IR(kernel k_mul_add_relu_f32 (pointwise)
  buffers: in0:f32 out0:f32
  params: $0=outer0 $1=seed
  outer: [$0]  reduce: []
  phase 0 once:
    t0 = (mul.i64 o0 2)
    store out0[o0] = (relu.f32 (add.f32 (mul.f32 (cast.f32 (mul.f64 (sqrt.f64 (mul.f64 -2 (log1p.f64 (neg.f64 (rand.f64 $1 t0))))) (cos.f64 (mul.f64 6.2831853071795862 (rand.f64 $1 (add.i64 t0 1)))))) 2) (load in0[o0])))
)IR"));
  EXPECT_EQ(kernel_text(relu(randn({6}, 12345) * 2.0 + x)), text);
}

TEST(KernelIrGolden, VerifierRejectsBrokenKernels) {
  Tensor x = make_tensor(random_values(40, 6), {4, 10});
  auto plan = detail::make_plan({softmax(x, -1).node()}, false, options());
  ir::Kernel k = plan->kernels.at(0).lowered.kernel;
  EXPECT_NO_THROW(ir::verify_kernel(k));
  ir::Kernel bad = k;
  std::swap(bad.phases[0], bad.phases[1]);  // reads acc0 before it is complete
  EXPECT_THROW(ir::verify_kernel(bad), InternalError);
  bad = k;
  bad.phases.back().stores[0].buffer = 0;  // stores into an input
  EXPECT_THROW(ir::verify_kernel(bad), InternalError);
}

}  // namespace
}  // namespace kfuse::test
