// Integer semantics without double rounding: i64 beyond 2^53 stays exact, integer arithmetic
// wraps in its dtype, comparisons and argmax ties are exact. Checked through the public API with
// backends xbyak,reference (a build without LLVM: integer kernels run on the reference
// interpreter), directly on the reference backend's IR interpreter, and on the fp64 graph
// evaluator (the oracle of every test).
#include <limits>

#include "backend/factories.hpp"
#include "ir/kernel.hpp"
#include "test_util.hpp"

namespace kfuse::test {
namespace {

constexpr int64_t k62 = int64_t{1} << 62;

// Runs the test body with a given backend chain, restoring the options after.
class WithBackends {
 public:
  explicit WithBackends(std::vector<std::string> b) : saved_(options()) {
    Options o = saved_;
    o.backends = std::move(b);
    set_options(o);
  }
  ~WithBackends() { set_options(saved_); }

 private:
  Options saved_;
};

Tensor i64s(std::vector<int64_t> v) {
  Shape s{static_cast<int64_t>(v.size())};
  return Tensor::from_vector(v, s);
}

TEST(ExactIntegers, XbyakReferenceChainKeepsI64Exact) {
  WithBackends wb({"xbyak", "reference"});
  Tensor a = i64s({k62, 5}), b = i64s({k62 + 1, 7});
  // 2^62 + (2^62 + 1) = 2^63 + 1 wraps to INT64_MIN + 1 (double gave INT64_MIN).
  EXPECT_EQ((a + b).to_vector<int64_t>(), (std::vector<int64_t>{std::numeric_limits<int64_t>::min() + 1, 12}));
  EXPECT_EQ(eq(a, b).to_vector<bool>(), (std::vector<bool>{false, false}));
  EXPECT_EQ(lt(a, b).to_vector<bool>(), (std::vector<bool>{true, true}));
  EXPECT_EQ(argmax(i64s({k62, k62 + 1, k62 - 1})).item<int64_t>(), 1);
  EXPECT_EQ(argmin(i64s({k62 + 1, k62, k62 + 2})).item<int64_t>(), 1);
  EXPECT_EQ(max(i64s({k62 + 1, k62, 3})).item<int64_t>(), k62 + 1);
  EXPECT_EQ(sum(i64s({k62, 1, 2})).item<int64_t>(), k62 + 3);
  EXPECT_EQ(prod(i64s({int64_t{1} << 32, int64_t{1} << 32})).item<int64_t>(), 0);  // 2^64 wraps to 0
  // i64 -> f32 rounds once: 2^60 + 2^36 + 1 is above the midpoint between floats 2^60 and
  // 2^60 + 2^37; through f64 it would first round to the midpoint, then to even (2^60).
  EXPECT_EQ(i64s({(int64_t{1} << 60) + (int64_t{1} << 36) + 1}).cast(DType::F32).item<float>(), 0x1p60f + 0x1p37f);
}

TEST(ExactIntegers, XbyakReferenceChainWrapsI32) {
  WithBackends wb({"xbyak", "reference"});
  Tensor x = Tensor::from_vector(std::vector<int32_t>{std::numeric_limits<int32_t>::max(), -3}, {2});
  EXPECT_EQ(square(x).to_vector<int32_t>(), (std::vector<int32_t>{1, 9}));
  EXPECT_EQ((x + 1).to_vector<int32_t>(), (std::vector<int32_t>{std::numeric_limits<int32_t>::min(), -2}));
  EXPECT_EQ(neg(Tensor::from_vector(std::vector<int32_t>{std::numeric_limits<int32_t>::min()}, {1})).item<int32_t>(),
            std::numeric_limits<int32_t>::min());
  EXPECT_EQ(Tensor::from_vector(std::vector<float>{-3.7f, 3.7f}, {2}).cast(DType::I32).to_vector<int32_t>(),
            (std::vector<int32_t>{-3, 3}));
}

TEST(ExactIntegers, ReferenceEvaluatorIsExact) {
  Tensor a = i64s({k62}), b = i64s({k62 + 1});
  EXPECT_EQ(reference_values(eq(a, b)), std::vector<double>{0});
  EXPECT_EQ(reference_values(argmax(i64s({k62, k62 + 1}))), std::vector<double>{1});
  EXPECT_EQ(reference_values(prod(i64s({int64_t{1} << 32, int64_t{1} << 32}))), std::vector<double>{0});
  Tensor x = Tensor::from_vector(std::vector<int32_t>{std::numeric_limits<int32_t>::max()}, {1});
  EXPECT_EQ(reference_values(square(x)), std::vector<double>{1});
  // (a + b) - b is a exactly only without rounding in between.
  EXPECT_EQ(reference_values(eq((a + b) - b, a)), std::vector<double>{1});
}

// The reference backend's interpreter on hand-written IR: out[i] = f(in0[i], in1[i]).
std::vector<int64_t> run_pointwise(Op op, DType out_dt, const std::vector<int64_t>& x, const std::vector<int64_t>& y) {
  using namespace ir;
  Kernel k;
  k.name = "k_test";
  k.kind = ir::KernelKind::Pointwise;
  k.buffers = {{"in0", DType::I64, false}, {"in1", DType::I64, false}, {"out0", out_dt, true}};
  k.params = {{"outer0", static_cast<int64_t>(x.size())}};
  k.outer = {param(0)};
  ExprRef i = var(Space::Outer, 0);
  Phase ph;
  ph.stores.push_back({2, i, ir::op(op, out_dt, {load(0, DType::I64, i), load(1, DType::I64, i)})});
  k.phases.push_back(ph);
  verify_kernel(k);
  std::vector<int64_t> out(x.size());
  LaunchArgs args{{const_cast<int64_t*>(x.data()), const_cast<int64_t*>(y.data()), out.data()}, k.param_values()};
  detail::make_reference_backend()->compile(k).kernel->run(args);
  if (out_dt == DType::Bool) {  // one byte per element
    std::vector<int64_t> b(x.size());
    for (size_t j = 0; j < b.size(); ++j) b[j] = reinterpret_cast<const uint8_t*>(out.data())[j];
    return b;
  }
  if (out_dt == DType::I32) {
    std::vector<int64_t> w(x.size());
    for (size_t j = 0; j < w.size(); ++j) w[j] = reinterpret_cast<const int32_t*>(out.data())[j];
    return w;
  }
  return out;
}

// One row of i64 folded by accumulator `kind` into an i64 result: a reduce phase, then a store.
int64_t run_fold(ir::AccKind kind, const std::vector<int64_t>& x) {
  using namespace ir;
  Kernel k;
  k.name = "k_test";
  k.kind = ir::KernelKind::Global;
  k.buffers = {{"in0", DType::I64, false}, {"out0", DType::I64, true}};
  k.outer = {iconst(1)};
  k.reduce = {static_cast<int64_t>(x.size())};
  k.accs = {{kind, DType::I64, load(0, DType::I64, var(Space::Reduce, 0))}};
  Phase fold;
  fold.over_reduce = true;
  fold.accs = {0};
  Phase store;
  store.stores.push_back({1, iconst(0), acc(0, DType::I64)});
  k.phases = {fold, store};
  verify_kernel(k);
  int64_t out = 0;
  LaunchArgs args{{const_cast<int64_t*>(x.data()), &out}, {}};
  detail::make_reference_backend()->compile(k).kernel->run(args);
  return out;
}

TEST(ExactIntegers, ReferenceBackendInterpretsIntegersExactly) {
  const std::vector<int64_t> a = {k62, std::numeric_limits<int64_t>::max(), 3}, b = {k62 + 1, 1, -5};
  EXPECT_EQ(run_pointwise(Op::Add, DType::I64, a, b),
            (std::vector<int64_t>{std::numeric_limits<int64_t>::min() + 1, std::numeric_limits<int64_t>::min(), -2}));
  EXPECT_EQ(run_pointwise(Op::Sub, DType::I64, b, a),
            (std::vector<int64_t>{1, std::numeric_limits<int64_t>::min() + 2, -8}));
  EXPECT_EQ(run_pointwise(Op::Mul, DType::I64, {int64_t{1} << 32, k62 + 1, 3}, {int64_t{1} << 32, 2, -5}),
            (std::vector<int64_t>{0, std::numeric_limits<int64_t>::min() + 2, -15}));
  EXPECT_EQ(run_pointwise(Op::Eq, DType::Bool, a, b), (std::vector<int64_t>{0, 0, 0}));
  EXPECT_EQ(run_pointwise(Op::Lt, DType::Bool, a, b), (std::vector<int64_t>{1, 0, 0}));
  EXPECT_EQ(run_pointwise(Op::Maximum, DType::I64, a, b),
            (std::vector<int64_t>{k62 + 1, std::numeric_limits<int64_t>::max(), 3}));
  EXPECT_EQ(run_fold(ir::AccKind::ArgMax, {k62, k62 + 1, k62 - 1}), 1);
  EXPECT_EQ(run_fold(ir::AccKind::ArgMin, {k62 + 1, k62, k62}), 1);  // the first of equal minima
  EXPECT_EQ(run_fold(ir::AccKind::Max, {k62, k62 + 1, 0}), k62 + 1);
  EXPECT_EQ(run_fold(ir::AccKind::Sum, {k62, 1, k62, k62, k62}), 1);  // 2^64 + 1 wraps to 1
  EXPECT_EQ(run_fold(ir::AccKind::Prod, {int64_t{1} << 40, int64_t{1} << 30, 3}), 0);
}

}  // namespace
}  // namespace kfuse::test
