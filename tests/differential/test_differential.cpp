// The differential suite: every op of the op table, the fused expressions of the fusion
// acceptance table and random DAGs, evaluated on each CPU backend built in (KFUSE_BACKEND order
// forced to that one backend) and compared with the fp64 reference evaluator. For the backends
// that claim full coverage (reference, llvm) a kernel that silently falls back fails the test;
// for xbyak (a subset by design) the fraction it compiled is printed.
#include <kfuse/explain.hpp>
#include <kfuse/options.hpp>
#include <kfuse/stats.hpp>

#include "backend/backend.hpp"
#include "forced_backend.hpp"
#include "random_dag.hpp"
#include "test_util.hpp"

namespace kfuse::test {
namespace {

struct Case {
  std::string name;
  std::function<std::vector<Tensor>()> make;
  /// The dtype of each output, written from README "Type promotion" (not asked of kfuse).
  std::vector<DType> dtypes;
  double rtol = 2e-5, atol = 2e-6;
};

Tensor rnd(Shape s, uint64_t seed, double lo = -2, double hi = 2, DType dt = DType::F32) {
  return make_tensor(random_values(static_cast<size_t>(count_of(s)), seed, lo, hi), s, dt);
}

// Inputs inside each op's well-conditioned domain.
std::pair<double, double> domain(Op op) {
  switch (op) {
    case Op::Log:
    case Op::Log2:
    case Op::Sqrt:
    case Op::Rsqrt: return {0.05, 8.0};
    case Op::Log1p: return {-0.9, 8.0};
    case Op::Recip: return {0.25, 4.0};
    case Op::Exp:
    case Op::Exp2:
    case Op::Expm1: return {-20.0, 20.0};
    case Op::Sin:
    case Op::Cos: return {-10.0, 10.0};
    default: return {-4.0, 4.0};
  }
}

std::vector<Case> all_cases() {
  constexpr DType F = DType::F32;
  std::vector<Case> cs;
  const Shape shapes[] = {{1}, {7}, {17, 33}, {3, 1, 5}, {0, 4}};
  // Unary ops of the table, f32 and f64, on several shapes (incl. empty and size 1).
  for (int o = 0; o < static_cast<int>(Op::Count_); ++o) {
    Op op = static_cast<Op>(o);
    // (logical_not and the bitwise ops: the cases on integers and bools below)
    if (!is_unary_elementwise(op) || op == Op::Cast || op == Op::Not || is_bitwise(op)) continue;
    for (DType dt : {DType::F32, DType::F64})
      for (const Shape& s : shapes) {
        auto [lo, hi] = domain(op);
        cs.push_back({std::string(op_name(op)) + "/" + dtype_name(dt) + shape_str(s),
                      [=] {
                        Tensor x = rnd(s, 11, lo, hi, dt);
                        return std::vector<Tensor>{Tensor(make_node(op, dt, s, {x.node()}))};
                      },
                      {dt},
                      std::max(4 * op_tolerance_f32(op), 1e-6),
                      1e-6});
      }
  }
  // Binary ops, with a broadcast operand and a non-contiguous one.
  for (int o = 0; o < static_cast<int>(Op::Count_); ++o) {
    Op op = static_cast<Op>(o);
    if (!is_binary_elementwise(op) || is_bitwise(op)) continue;
    const bool logical = op == Op::And || op == Op::Or;
    const DType result = (op >= Op::Eq && op <= Op::Ge) ? DType::Bool : DType::F32;
    cs.push_back({std::string(op_name(op)) + "/broadcast",
                  [=] {
                    Tensor a = rnd({33, 17}, 12, 0.5, 3), b = rnd({17}, 13, 0.5, 3);
                    Tensor bb = b.reshape({1, 17}).expand({33, 17});
                    Tensor c = transpose(rnd({17, 33}, 14, 0.5, 3));
                    if (logical)
                      return std::vector<Tensor>{
                          Tensor(make_node(op, DType::Bool, {33, 17}, {(a > 1.5).node(), (c > 1.5).node()}))};
                    return std::vector<Tensor>{Tensor(make_node(op, result, {33, 17}, {a.node(), bb.node()})),
                                               Tensor(make_node(op, result, {33, 17}, {a.node(), c.node()}))};
                  },
                  logical ? std::vector<DType>{DType::Bool} : std::vector<DType>{result, result},
                  std::max(4 * op_tolerance_f32(op), 1e-6), 1e-6});
  }
  // fma: f32 and f64 on every shape (empty and size 1 included), with a broadcast operand and a
  // transposed one; integers wrap (i32, and u8 computed in i32); f16 computes in f32.
  for (DType dt : {DType::F32, DType::F64})
    for (const Shape& s : shapes)
      cs.push_back({std::string("fma/") + dtype_name(dt) + shape_str(s),
                    [=] {
                      Tensor a = rnd(s, 91, -2, 2, dt), b = rnd(s, 92, -2, 2, dt), c = rnd(s, 93, -2, 2, dt);
                      return std::vector<Tensor>{fma(a, b, c), fma(a, a, -c)};
                    },
                    {dt, dt}});
  cs.push_back(
      {"fma/broadcast-and-views",
       [] {
         Tensor a = rnd({33, 17}, 94), b = rnd({17}, 95), c = transpose(rnd({17, 33}, 96));
         Tensor i = make_tensor(random_ints(17, 97, -50000, 50000), {17}, DType::I32);
         Tensor u = make_tensor(random_ints(17, 98, 0, 255), {17}, DType::U8);
         Tensor h = rnd({17}, 99, -2, 2, DType::F16);
         return std::vector<Tensor>{fma(a, b, c), fma(b, a, 1.5 * b), fma(i, i, i), fma(u, u, u), fma(h, h, h)};
       },
       {DType::F32, DType::F32, DType::I32, DType::U8, DType::F16},
       4e-3,
       1e-6});
  // Integer and bool arithmetic, casts (incl. NaN/Inf to int), where, logical not.
  cs.push_back({"int-arith",
                [] {
                  Tensor a = make_tensor(random_ints(101, 15, -1000, 1000), {101}, DType::I32);
                  Tensor b = make_tensor(random_ints(101, 16, -1000, 1000), {101}, DType::I64);
                  return std::vector<Tensor>{
                      a * a + 3.0, a + b,  maximum(a, b) - minimum(a, b), abs(a),
                      sign(b),     sum(a), (a > b).cast(DType::I32),      a.cast(DType::F32) / 7.0};
                },
                // an integral double scalar keeps i32; i32 with i64 gives i64; integer sums are i64
                {DType::I32, DType::I64, DType::I64, DType::I32, DType::I64, DType::I64, DType::I32, DType::F32}});
  // Bitwise ops and shifts on every integer dtype (counts in and out of [0, bits), negative
  // ones), broadcast and transposed operands, and bools (the logical forms).
  for (DType dt : {DType::U8, DType::I8, DType::I32, DType::I64}) {
    cs.push_back({std::string("bitwise/") + dtype_name(dt),
                  [dt] {
                    const int64_t lo = dt == DType::U8 ? 0 : -100000, hi = dt == DType::U8 ? 255 : 100000;
                    Tensor a = make_tensor(random_ints(7 * 33, 40, lo, hi), {7, 33}, DType::I64).cast(dt);
                    Tensor b = make_tensor(random_ints(33, 41, lo, hi), {33}, DType::I64).cast(dt);
                    Tensor t = transpose(make_tensor(random_ints(33 * 7, 42, lo, hi), {33, 7}, DType::I64).cast(dt));
                    Tensor n = make_tensor(random_ints(33, 43, dt == DType::U8 ? 0 : -70, 70), {33}, dt);
                    return std::vector<Tensor>{a & b, a | t, a ^ b, ~t, a << n, t >> n, (a >> 3) & 7};
                  },
                  std::vector<DType>(7, dt)});
  }
  cs.push_back({"bitwise/bool",
                [] {
                  Tensor p = rnd({9, 17}, 44) > 0.0, q = transpose(rnd({17, 9}, 45) > 0.5);
                  return std::vector<Tensor>{p & q, p | q, p ^ q, ~q};
                },
                std::vector<DType>(4, DType::Bool)});
  cs.push_back({"casts-and-specials",
                [] {
                  std::vector<double> v = random_values(64, 17, -1e10, 1e10);
                  v[0] = kNaN, v[1] = kInf, v[2] = -kInf, v[3] = -0.0, v[4] = 2.5, v[5] = -2.5, v[6] = 3e9;
                  Tensor x = make_tensor(v, {64}, DType::F64);
                  return std::vector<Tensor>{x.cast(DType::I32),
                                             x.cast(DType::I64),
                                             x.cast(DType::F32),
                                             x.cast(DType::Bool),
                                             round(x),
                                             floor(x),
                                             ceil(x),
                                             logical_not(x > 0.0)};
                },
                {DType::I32, DType::I64, DType::F32, DType::Bool, DType::F64, DType::F64, DType::F64, DType::Bool}});
  cs.push_back({"where-nan-inf",
                [] {
                  std::vector<double> v = random_values(40, 18);
                  v[3] = kNaN, v[7] = kInf, v[9] = -kInf;
                  Tensor x = make_tensor(v, {5, 8});
                  return std::vector<Tensor>{where(x > 0.0, x, -x), maximum(x, 0.5), max(x, 1), min(x, 0), argmax(x, 1),
                                             argmin(x, 0),          relu(x),         exp(x),    sum(x, 1)};
                },
                {F, F, F, F, DType::I64, DType::I64, F, F, F}});
  // Reductions over every axis set of a 3-D tensor, and global ones.
  for (Axes ax : {Axes{0}, Axes{1}, Axes{2}, Axes{0, 2}, Axes{}}) {
    cs.push_back({"reductions" + shape_str(ax),
                  [ax] {
                    Tensor x = rnd({6, 5, 19}, 19, 0.5, 1.5);
                    return std::vector<Tensor>{sum(x, ax),    prod(x, ax),     max(x, ax, true), min(x, ax),
                                               argmax(x, ax), argmin(x, ax),   mean(x, ax),      var(x, ax),
                                               std(x, ax, 0), logsumexp(x, ax)};
                  },
                  {F, F, F, F, DType::I64, DType::I64, F, F, F, F},
                  1e-4,
                  1e-5});
  }
  // rand/randn generator kernels fused with consumers, views and reductions (f32 and f64)
  cs.push_back({"random",
                [] {
                  Tensor x = rnd({17, 33}, 33);
                  return std::vector<Tensor>{relu(randn({17, 33}, 7) * 2.0 + x),
                                             rand({17, 33}, 8, DType::F64),
                                             transpose(rand({33, 17}, 9)) + x,
                                             sum(randn({17, 33}, 10, DType::F64), 1),
                                             randn({1}, 3) - 1.0,
                                             rand({0, 4}, 2),
                                             softmax(rand({5, 9}, 4), -1)};
                },
                {F, DType::F64, F, DType::F64, F, F, F},
                1e-5,
                1e-6});
  cs.push_back({"big-global-sum", [] { return std::vector<Tensor>{sum(rnd({1000003}, 20, 0, 1))}; }, {F}, 1e-5, 1e-3});
  // Views feeding element-wise ops and reductions.
  cs.push_back({"views",
                [] {
                  Tensor x = rnd({12, 35}, 21), y = rnd({35, 12}, 22);
                  return std::vector<Tensor>{
                      transpose(x) + y,
                      x.slice({Range{1, 12, 3}, Range{2, 35, 4}}) * 2.0,
                      pad(x, {{1, 2}, {0, 3}}, -1.0) + 1.0,
                      concat({x, x * 2.0, x.slice({Range::all(), Range{0, 5}})}, 1) - 1.0,
                      transpose(x).reshape({5, 84}) + 0.5,
                      sum(transpose(x).reshape({35, 3, 4}), 2),
                      x.reshape({6, 2, 35}).permute({2, 0, 1}) * x.reshape({6, 2, 35}).permute({2, 0, 1}),
                  };
                },
                std::vector<DType>(7, F)});
  // The fused expressions of the fusion acceptance table.
  for (Shape s : {Shape{4096, 10}, Shape{64, 5000}, Shape{1, 1}, Shape{3, 17}}) {
    cs.push_back({"softmax-family" + shape_str(s),
                  [s] {
                    Tensor x = rnd(s, 23, -5, 5);
                    return std::vector<Tensor>{log_softmax(x, -1), softmax(x, -1), logsumexp(x, -1)};
                  },
                  {F, F, F},
                  3e-5,
                  3e-6});
  }
  cs.push_back({"norms",
                [] {
                  Tensor x = rnd({513, 1024}, 24), w = rnd({1024}, 25), b = rnd({1024}, 26);
                  return std::vector<Tensor>{layer_norm(x, {1024}, w, b), rms_norm(x, w), layer_norm(x, {1024})};
                },
                {F, F, F},
                1e-4,
                1e-5});
  cs.push_back({"chains",
                [] {
                  Tensor a = rnd({1000, 37}, 27), b = rnd({1000, 37}, 28), c = rnd({1000, 37}, 29);
                  return std::vector<Tensor>{relu(a * b + c), tanh(a * 0.5 + b) * sigmoid(c) - exp(-a * a),
                                             gelu(a, true), gelu(a), silu(a) * erf(b)};
                },
                {F, F, F, F, F},
                1e-5,
                1e-6});
  cs.push_back({"reduce-fusions",
                [] {
                  Tensor a = rnd({513, 77}, 30), b = rnd({513, 77}, 31);
                  Tensor labels = make_tensor(random_ints(513, 32, 0, 76), {513}, DType::I64);
                  return std::vector<Tensor>{
                      sum(a * b),     sum(a * a, 1), mean(a, 0), a - mean(a, 0, true), cross_entropy(a, labels),
                      normalize(a, 1)};
                },
                {F, F, F, F, F, F},
                1e-4,
                1e-4});
  return cs;
}

using Differential = ForcedBackend;

TEST_P(Differential, EveryCaseMatchesTheReference) {
  bool full_coverage = GetParam() != "xbyak";
  size_t launched = 0, fell_back = 0;
  for (const Case& c : all_cases()) {
    std::vector<Tensor> ys = c.make();
    reset_counters();
    eval(ys);
    Counters k = counters();
    launched += k.kernels_compiled + k.cache_hits;
    fell_back += k.fallbacks;
    if (full_coverage) { EXPECT_EQ(k.fallbacks, 0u) << c.name << ": a kernel fell back from " << GetParam(); }
    auto ref = reference_values(ys);
    ASSERT_EQ(ys.size(), c.dtypes.size()) << c.name;
    for (size_t i = 0; i < ys.size(); ++i) {
      // The recorded dtype follows the promotion rules, and the buffer the backend filled has it.
      EXPECT_EQ(ys[i].dtype(), c.dtypes[i])
          << c.name << " output " << i << ": " << dtype_name(ys[i].dtype()) << " vs " << dtype_name(c.dtypes[i]);
      auto stored = ys[i].node()->realized();
      ASSERT_TRUE(stored) << c.name << " output " << i << " was not computed";
      EXPECT_EQ(stored->dtype, ys[i].dtype())
          << c.name << " output " << i << ": stored as " << dtype_name(stored->dtype);
      EXPECT_TRUE(all_close(values(ys[i]), ref[i], c.rtol, c.atol)) << c.name << " output " << i;
    }
  }
  std::printf("[ %s ] kernels %zu, taken by another backend %zu\n", GetParam().c_str(), launched, fell_back);
}

// KFUSE_TEST_SEED=<n>[:<count>] sweeps other seeds on each backend.
TEST_P(Differential, RandomDagsMatchTheReference) {
  const auto [first, end] = seed_range("KFUSE_TEST_SEED", 1000, 150);
  for (uint64_t seed = first; seed < end; ++seed) {
    Dag d = random_dag(seed);
    eval(d.roots);
    auto ref = reference_values(d.roots);
    for (size_t i = 0; i < d.roots.size(); ++i)
      ASSERT_TRUE(all_close(values(d.roots[i]), ref[i], 1e-4, 1e-5)) << "seed " << seed << " root " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(CpuBackends, Differential, ::testing::Values("reference", "llvm", "xbyak"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace kfuse::test
