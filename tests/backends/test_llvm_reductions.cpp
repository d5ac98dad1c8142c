// LLVM backend, reductions: row softmax (max, sum-of-exp and store phases), column and
// multi-dim reductions, a split global sum over 1e6 elements, Max/Min NaN propagation,
// ArgMax/ArgMin (first extreme, NaN counts as extreme), Prod, integer and bool accumulators,
// empty reduce domains, stores inside reduce phases; determinism across chunkings (bitwise);
// object round-trip through Backend::load; BackendError on unsupported kernels.
//
// Tolerances: f32 sums are reassociated by the vectoriser (fixed order per compiled kernel) while
// the reference folds in long double: rtol 4e-6 for f32 rows/columns, 1e-5 for the 1e6-element
// global f32 sum, 1e-12 for f64; max/min/arg/integer/bool results must match exactly.
#include "test_llvm_util.hpp"
#include "test_util.hpp"

namespace kfuse::test::llvmt {
namespace {

ExprRef row_elem(int buf, DType dt, int64_t C) {
  return load(buf, dt, iadd(imul(var(Space::Outer, 0), iconst(C)), var(Space::Reduce, 0)));
}

// y[r, :] = softmax(x[r, :]) in three phases.
Kernel softmax_kernel(DType dt, int64_t R, int64_t C) {
  Kernel k;
  k.name = std::string("k_softmax_") + dtype_name(dt);
  k.kind = ir::KernelKind::Row;
  k.buffers = {{"in0", dt, false}, {"out0", dt, true}};
  k.params = {{"outer0", R}};
  k.outer = {param(0)};
  k.reduce = {C};
  auto x = row_elem(0, dt, C);
  auto e = op(Op::Exp, dt, {op(Op::Sub, dt, {x, acc(0, dt)})});
  k.accs = {{AccKind::Max, dt, x}, {AccKind::Sum, dt, e}};
  Phase p0, p1, p2;
  p0.over_reduce = p1.over_reduce = p2.over_reduce = true;
  p0.accs = {0};
  p1.accs = {1};
  p2.stores = {
      {1, iadd(imul(var(Space::Outer, 0), iconst(C)), var(Space::Reduce, 0)), op(Op::Div, dt, {e, acc(1, dt)})}};
  k.phases = {p0, p1, p2};
  return k;
}

// out[o] = reduce(value(x[o, :])) for a row reduction of kind `kind`.
Kernel row_reduce(AccKind kind, DType in, DType accdt, int64_t R, int64_t C) {
  return single_reduce(std::string("k_row_") + acc_kind_name(kind) + "_" + dtype_name(in), ir::KernelKind::Row, kind,
                       in, accdt, R, C, row_elem(0, in, C));
}

// out[0] = sum/max/... over all n elements (outer empty: a split global reduction when large).
Kernel global_reduce(AccKind kind, DType dt, int64_t n) {
  Kernel k;
  k.name = std::string("k_global_") + acc_kind_name(kind) + "_" + dtype_name(dt);
  k.kind = ir::KernelKind::Global;
  k.buffers = {{"in0", dt, false}, {"out0", dt, true}};
  k.reduce = {n};
  k.accs = {{kind, dt, load(0, dt, var(Space::Reduce, 0))}};
  Phase p0, p1;
  p0.over_reduce = true;
  p0.accs = {0};
  p1.stores = {{1, iconst(0), op(Op::Mul, dt, {acc(0, dt), constant(is_float(dt) ? 0.5 : 3, dt)})}};
  k.phases = {p0, p1};
  return k;
}

TEST(LlvmReduce, SoftmaxRows) {
  KFUSE_REQUIRE_LLVM();
  for (DType dt : {DType::F32, DType::F64})
    for (auto [R, C] : {std::pair<int64_t, int64_t>{0, 7}, {1, 1}, {5, 17}, {64, 1000}, {3, 4099}}) {
      Kernel k = softmax_kernel(dt, R, C);
      auto x = rand_values(R * C, 42, -20, 20);
      if (R * C > 10) x[3] = NAN;  // a NaN row stays NaN
      check_vs_reference(k, {Buf::from(dt, x)}, {static_cast<size_t>(R * C)},
                         dt == DType::F32 ? Tol{4e-6, 4} : Tol{1e-12, 4}, "softmax");
    }
}

TEST(LlvmReduce, RowReductionsEveryKind) {
  KFUSE_REQUIRE_LLVM();
  const int64_t R = 33, C = 131;
  auto vals = rand_values(R * C, 9, -3, 3, true);
  for (int r = 0; r < 4; ++r) vals[5 * C + 7 + r * 13] = NAN;  // several NaNs in one row
  for (int c = 0; c < C; ++c) vals[6 * C + c] = -INFINITY;     // an all -inf row
  for (int c = 0; c < C; ++c) vals[7 * C + c] = c % 5;         // ties
  for (DType dt : {DType::F32, DType::F64})
    for (AccKind kind : {AccKind::Sum, AccKind::Prod, AccKind::Max, AccKind::Min, AccKind::ArgMax, AccKind::ArgMin}) {
      bool arg = kind == AccKind::ArgMax || kind == AccKind::ArgMin;
      auto x = vals;
      if (kind == AccKind::Prod)
        for (auto& v : x) v = std::isfinite(v) ? 1.0 + v / 64 : v;
      Tol tol =
          kind == AccKind::Sum || kind == AccKind::Prod ? (dt == DType::F32 ? Tol{4e-6, 4} : Tol{1e-12, 4}) : Tol{};
      check_vs_reference(row_reduce(kind, dt, arg ? DType::I64 : dt, R, C), {Buf::from(dt, x)}, {R}, tol,
                         acc_kind_name(kind));
    }
  for (DType dt : {DType::I32, DType::I64}) {
    auto xi = random_ints(R * C, 3, -1000, 1000);
    for (int c = 0; c < C; ++c) xi[2 * C + c] = 2147483000.0 * (dt == DType::I32);  // i32 wrap-around
    for (AccKind kind : {AccKind::Sum, AccKind::Max, AccKind::Min, AccKind::ArgMax, AccKind::ArgMin}) {
      bool arg = kind == AccKind::ArgMax || kind == AccKind::ArgMin;
      check_vs_reference(row_reduce(kind, dt, arg ? DType::I64 : dt, R, C), {Buf::from(dt, xi)}, {R}, {},
                         acc_kind_name(kind));
    }
  }
  auto xb = random_ints(R * C, 4, 0, 1);
  for (int c = 0; c < C; ++c) xb[c] = 0, xb[C + c] = 1;  // all-false and all-true rows
  for (AccKind kind : {AccKind::Sum, AccKind::Prod, AccKind::Max, AccKind::Min, AccKind::ArgMax, AccKind::ArgMin}) {
    bool arg = kind == AccKind::ArgMax || kind == AccKind::ArgMin;
    check_vs_reference(row_reduce(kind, DType::Bool, arg ? DType::I64 : DType::Bool, R, C),
                       {Buf::from(DType::Bool, xb)}, {R}, {}, std::string("bool ") + acc_kind_name(kind));
  }
  // count of true values: bool values folded into an i64 Sum
  check_vs_reference(row_reduce(AccKind::Sum, DType::Bool, DType::I64, R, C), {Buf::from(DType::Bool, xb)}, {R}, {});
}

TEST(LlvmReduce, ColumnAndMultiDimReductions) {
  KFUSE_REQUIRE_LLVM();
  for (auto [R, C] : {std::pair<int64_t, int64_t>{1, 1}, {100, 1}, {257, 33}}) {
    Kernel k;  // column sum: out[c] = sum_r x[r, c]
    k.name = "k_colsum";
    k.kind = ir::KernelKind::Column;
    k.buffers = {{"in0", DType::F32, false}, {"out0", DType::F32, true}};
    k.params = {{"outer0", C}};
    k.outer = {param(0)};
    k.reduce = {R};
    k.accs = {{AccKind::Sum, DType::F32,
               load(0, DType::F32, iadd(imul(var(Space::Reduce, 0), param(0)), var(Space::Outer, 0)))}};
    Phase p0, p1;
    p0.over_reduce = true;
    p0.accs = {0};
    p1.stores = {{1, var(Space::Outer, 0), acc(0, DType::F32)}};
    k.phases = {p0, p1};
    check_vs_reference(k, {Buf::from(DType::F32, rand_values(R * C, 1, -1, 1))}, {static_cast<size_t>(C)}, {4e-6, 4});
  }
  // mean over the last three dims of [A, B, 4, 5, 6] with a 2-D outer domain
  const int64_t A = 3, B = 7;
  Kernel k = outer2d("k_mean3", ir::KernelKind::Row, DType::F64, A, B);
  k.reduce = {4, 5, 6};
  auto point = iadd(imul(iadd(imul(var(Space::Outer, 0), param(1)), var(Space::Outer, 1)), iconst(120)),
                    iadd(imul(iadd(imul(var(Space::Reduce, 0), iconst(5)), var(Space::Reduce, 1)), iconst(6)),
                         var(Space::Reduce, 2)));
  k.accs = {{AccKind::Sum, DType::F64, load(0, DType::F64, point)},
            {AccKind::ArgMin, DType::I64, load(0, DType::F64, point)}};
  Phase p0, p1;
  p0.over_reduce = true;
  p0.accs = {0, 1};
  auto out_idx = iadd(imul(var(Space::Outer, 0), param(1)), var(Space::Outer, 1));
  p1.stores = {{1, out_idx,
                op(Op::Add, DType::F64,
                   {op(Op::Div, DType::F64, {acc(0, DType::F64), constant(120, DType::F64)}),
                    op(Op::Cast, DType::F64, {acc(1, DType::I64)})})}};
  k.phases = {p0, p1};
  check_vs_reference(k, {Buf::from(DType::F64, rand_values(A * B * 120, 2, -1, 1))}, {A * B}, {1e-12, 4});
}

// Regression: a short unrolled reduce loop under a vectorised outer loop calling sin/cos (the
// lane-uniform trig wrapper once got fastcc from GlobalOpt while the vectoriser called it with
// the C convention, and LLVM deleted the vector loop as unreachable: outputs 8.. unwritten).
TEST(LlvmReduce, ReduceThenTrigInAVectorisedOuterLoop) {
  KFUSE_REQUIRE_LLVM();
  for (DType dt : {DType::F32, DType::F64})
    for (Op o : {Op::Sin, Op::Cos, Op::Exp})
      for (int64_t R : {int64_t{7}, int64_t{40}, int64_t{1000}}) {
        Kernel k = row_reduce(AccKind::Max, dt, dt, R, 3);
        k.phases[1].stores[0].value = op(o, dt, {acc(0, dt)});
        auto x = rand_values(R * 3, 8, -200, 200);
        check_vs_reference(k, {Buf::from(dt, x)}, {static_cast<size_t>(R)},
                           dt == DType::F32 ? Tol{1e-6, 2} : Tol{1e-11, 4}, op_name(o));
      }
}

TEST(LlvmReduce, GlobalSumOverAMillion) {
  KFUSE_REQUIRE_LLVM();
  const int64_t n = 1000003;
  auto x = rand_values(n, 77, 0, 1);
  for (DType dt : {DType::F32, DType::F64}) {
    Kernel k = global_reduce(AccKind::Sum, dt, n);
    check_vs_reference(k, {Buf::from(dt, x)}, {1}, dt == DType::F32 ? Tol{1e-5, 0} : Tol{1e-12, 0}, "global sum");
  }
  auto y = x;
  y[n / 2] = NAN;
  for (AccKind kind : {AccKind::Max, AccKind::Min})
    check_vs_reference(global_reduce(kind, DType::F32, n), {Buf::from(DType::F32, y)}, {1}, {}, "global max/min");
  check_vs_reference(global_reduce(AccKind::Max, DType::F64, n), {Buf::from(DType::F64, x)}, {1}, {}, "global max");
  auto xi = random_ints(n, 5, -1000, 1000);
  check_vs_reference(global_reduce(AccKind::Sum, DType::I64, n), {Buf::from(DType::I64, xi)}, {1}, {},
                     "global int sum");
}

TEST(LlvmReduce, EmptyReduceDomainAndStoresInsideReducePhase) {
  KFUSE_REQUIRE_LLVM();
  for (AccKind kind : {AccKind::Sum, AccKind::Prod, AccKind::Max, AccKind::ArgMax})
    check_vs_reference(row_reduce(kind, DType::F32, kind == AccKind::ArgMax ? DType::I64 : DType::F32, 4, 0),
                       {Buf::from(DType::F32, {})}, {4}, {}, "empty reduce");
  // phase 0 folds a sum AND stores 2x per element; phase 1 stores the sum (two outputs)
  const int64_t R = 9, C = 50;
  Kernel k = row_reduce(AccKind::Sum, DType::F32, DType::F32, R, C);
  k.buffers.push_back({"out1", DType::F32, true});
  k.phases[0].stores.push_back({2, iadd(imul(var(Space::Outer, 0), iconst(C)), var(Space::Reduce, 0)),
                                op(Op::Mul, DType::F32, {row_elem(0, DType::F32, C), constant(2, DType::F32)})});
  check_vs_reference(k, {Buf::from(DType::F32, rand_values(R * C, 3, -1, 1))}, {R, R * C}, {4e-6, 4});
}

// The same kernel run as one parallel launch, then in sequential chunks of 1, 7 and 64 outer
// points (or reduce blocks): every result must be bitwise identical (math functions included:
// a chunk of 1 runs every element through the scalar remainder path).
TEST(LlvmReduce, DeterministicAcrossChunkings) {
  KFUSE_REQUIRE_LLVM();
  std::vector<std::pair<Kernel, std::vector<Buf>>> cases;
  cases.push_back({softmax_kernel(DType::F32, 64, 1000), {Buf::from(DType::F32, rand_values(64000, 1, -10, 10))}});
  cases.push_back(
      {global_reduce(AccKind::Sum, DType::F32, 1 << 20), {Buf::from(DType::F32, rand_values(1 << 20, 2, -1, 1))}});
  cases.push_back({pointwise("k_math", {DType::F32}, DType::F32, 50001,
                             [](auto& l) {
                               auto t = op(Op::Tanh, DType::F32, {op(Op::Exp, DType::F32, {l[0]})});
                               return op(Op::Add, DType::F32,
                                         {t, op(Op::Sin, DType::F32,
                                                {op(Op::Log1p, DType::F32, {op(Op::Abs, DType::F32, {l[0]})})})});
                             }),
                   {Buf::from(DType::F32, rand_values(50001, 3, -5, 5))}});
  cases.push_back(
      {pointwise("k_math64", {DType::F64}, DType::F64, 20001,
                 [](auto& l) {
                   return op(Op::Pow, DType::F64, {op(Op::Exp2, DType::F64, {l[0]}), op(Op::Erf, DType::F64, {l[0]})});
                 }),
       {Buf::from(DType::F64, rand_values(20001, 4, -5, 5))}});
  for (auto& [k, in] : cases) {
    auto ck = compile_with(*llvm_backend(), k);
    std::vector<size_t> sizes;
    for (const auto& b : k.buffers)
      if (b.output)
        sizes.push_back(k.kind == ir::KernelKind::Global ? 1
                                                         : static_cast<size_t>(k.params[0].value * k.reduce_numel()));
    auto base = run_on(*ck, k, in, sizes);
    for (int64_t chunk : {1, 7, 64})
      EXPECT_TRUE(same_bits(base, run_on(*chunked(k, *ck, chunk), k, in, sizes))) << k.name << " chunk " << chunk;
  }
}

TEST(LlvmReduce, ObjectRoundTrip) {
  KFUSE_REQUIRE_LLVM();
  auto be = llvm_backend();
  for (Kernel k : {softmax_kernel(DType::F32, 16, 100), global_reduce(AccKind::Sum, DType::F64, 100000)}) {
    auto in = std::vector<Buf>{
        Buf::from(k.buffers[0].dtype, rand_values(1600 + (k.kind == ir::KernelKind::Global) * 98400, 5, -3, 3))};
    std::vector<size_t> sizes = {k.kind == ir::KernelKind::Global ? 1u : 1600u};
    auto ck = compile_with(*be, k);
    EXPECT_EQ(ck->backend, "llvm");
    EXPECT_EQ(ck->source_kind, "llvm-ir");
    EXPECT_EQ(ck->binary_kind, "elf-object");
    EXPECT_NE(ck->source.find("define void @kf_main"), std::string::npos);
    ASSERT_GT(ck->binary.size(), 16u);
    EXPECT_EQ(std::string(ck->binary.begin() + 1, ck->binary.begin() + 4), "ELF");
    EXPECT_FALSE(ck->target.empty());
    auto first = run_on(*ck, k, in, sizes);
    auto bin = ck->binary;
    ck.reset();  // the loaded copy must not depend on the compiled one
    auto loaded = be->load(k, bin);
    ASSERT_TRUE(loaded);
    auto again = be->load(k, bin);  // the same object twice at once (own JITDylibs)
    EXPECT_TRUE(same_bits(first, run_on(*loaded, k, in, sizes)));
    EXPECT_TRUE(same_bits(first, run_on(*again, k, in, sizes)));
  }
}

TEST(LlvmReduce, UnsupportedKernelThrowsBackendError) {
  KFUSE_REQUIRE_LLVM();
  Kernel k = pointwise("k_bad", {DType::I32}, DType::I32, 4, [](auto& l) { return op(Op::Exp, DType::I32, {l[0]}); });
  EXPECT_THROW(llvm_backend()->compile(k), BackendError);
}

}  // namespace
}  // namespace kfuse::test::llvmt
