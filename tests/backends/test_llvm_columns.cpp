// LLVM backend, column kernels (outer = columns, reduce = rows): the interchanged tile lowering
// of jit/llvm/column_tiles.cpp against the reference backend and the fp64 reference evaluator.
//
// Hand-built kernels run with the default tile width and with forced narrow tiles (4, 16 lanes,
// Options::llvm_column_tile) so that small odd shapes still cover several tiles, the column-count
// tail, tiles cut by chunk boundaries (chunks of 1, 7, 64 columns) and the point-by-point
// dispatch for one column: every kind of accumulator (Sum/Prod/Max/Min incl. NaN and +-inf,
// ArgMax/ArgMin with ties and NaN, integer and bool), multi-phase kernels (x - mean(x, 0)),
// multi-dim outer and reduce domains. Results must also be bitwise identical across tile widths
// and chunkings (a column always folds its rows in order). Graph-level cases run the public API
// with backends = {llvm} (no fallback allowed) against reference_values, including keepdim,
// x - mean(x, 0, keepdim), 3-D reductions, broadcast operands and a transposed (non-contiguous)
// input, which keeps the point-by-point path.
//
// Tolerances: a tiled f32 column sum is a sequential f32 sum (up to R roundings), checked on
// positive values where that stays within rtol 2e-5 for R <= 129; Max/Min/Arg/integer/bool and
// the integer-valued centering kernel are exact.
#include <kfuse/explain.hpp>
#include <kfuse/options.hpp>
#include <kfuse/stats.hpp>

#include "runtime/plan.hpp"
#include "test_llvm_util.hpp"
#include "test_util.hpp"

namespace kfuse::test::llvmt {
namespace {

const int64_t kTiles[] = {0, 4, 16};

// x[r, c] of a row-major [R, C] input with C = param 0.
ExprRef cell(int buf, DType dt) {
  return load(buf, dt, iadd(imul(var(Space::Reduce, 0), param(0)), var(Space::Outer, 0)));
}

Kernel column_base(const std::string& name, std::vector<BufferParam> bufs, int64_t R, int64_t C) {
  Kernel k;
  k.name = name;
  k.kind = ir::KernelKind::Column;
  k.buffers = std::move(bufs);
  k.params = {{"outer0", C}};
  k.outer = {param(0)};
  k.reduce = {R};
  return k;
}

// out[c] = reduce_r x[r, c]
Kernel column_reduce(AccKind kind, DType in, DType accdt, int64_t R, int64_t C) {
  return single_reduce(std::string("k_col_") + acc_kind_name(kind) + "_" + dtype_name(in), ir::KernelKind::Column, kind,
                       in, accdt, C, R, cell(0, in));
}

// out0[r, c] = x[r, c] - mean_c (a second reduce phase that stores), out1[c] = mean_c,
// out2[c] = max_c - min_c (two accumulators folded in the same phase).
Kernel center_columns(DType dt, int64_t R, int64_t C) {
  Kernel k = column_base(std::string("k_center_") + dtype_name(dt),
                         {{"in0", dt, false}, {"out0", dt, true}, {"out1", dt, true}, {"out2", dt, true}}, R, C);
  ExprRef x = cell(0, dt);
  ExprRef mean = op(Op::Div, dt, {acc(0, dt), constant(static_cast<double>(R), dt)});
  k.accs = {{AccKind::Sum, dt, x}, {AccKind::Max, dt, x}, {AccKind::Min, dt, x}};
  Phase p0, p1, p2;
  p0.over_reduce = p1.over_reduce = true;
  p0.accs = {0, 1, 2};
  p1.stores = {{1, iadd(imul(var(Space::Reduce, 0), param(0)), var(Space::Outer, 0)), op(Op::Sub, dt, {x, mean})}};
  p2.stores = {{2, var(Space::Outer, 0), mean}, {3, var(Space::Outer, 0), op(Op::Sub, dt, {acc(1, dt), acc(2, dt)})}};
  k.phases = {p0, p1, p2};
  return k;
}

std::vector<std::pair<int64_t, int64_t>> odd_shapes() {
  return {{37, 53}, {1, 5}, {5, 1}, {2, 2}, {0, 7}, {7, 0}, {129, 17}, {3, 3}, {9, 2050}};
}

/// Checks `k` against the reference backend for every forced tile width, and that all tile
/// widths and chunkings give the same bits.
void check_tiles(const Kernel& k, const std::vector<Buf>& in, const std::vector<size_t>& out_sizes, Tol tol,
                 const std::string& what) {
  auto ref = run_on(*compile_with(*ref_backend(), k), k, in, out_sizes);
  std::vector<Buf> first;
  for (int64_t t : kTiles) {
    auto ck = compile_with(*llvm_backend(), k, llvm_knobs(t));
    auto got = run_on(*ck, k, in, out_sizes);
    for (size_t o = 0; o < got.size(); ++o)
      for (size_t i = 0, bad = 0; i < got[o].size() && bad < 3; ++i)
        if (!close(got[o].get(i), ref[o].get(i), got[o].dt, tol.rtol, tol.ulps) && ++bad)
          ADD_FAILURE() << what << " tile " << t << " out" << o << "[" << i << "]: llvm " << got[o].get(i)
                        << " reference " << ref[o].get(i) << "\n"
                        << (bad == 1 ? print_kernel(k) : "");
    if (first.empty()) first = got;
    EXPECT_TRUE(same_bits(first, got)) << what << ": tile " << t << " changed bits";
    for (int64_t chunk : {1, 7, 64})
      EXPECT_TRUE(same_bits(first, run_on(*chunked(k, *ck, chunk, t), k, in, out_sizes)))
          << what << ": tile " << t << " chunk " << chunk;
  }
}

TEST(LlvmColumns, FloatAccumulatorsOnOddShapes) {
  KFUSE_REQUIRE_LLVM();
  for (auto [R, C] : odd_shapes())
    for (DType dt : {DType::F32, DType::F64})
      for (AccKind kind : {AccKind::Sum, AccKind::Prod, AccKind::Max, AccKind::Min, AccKind::ArgMax, AccKind::ArgMin}) {
        const size_t n = static_cast<size_t>(R * C);
        std::vector<double> x;
        if (kind == AccKind::Sum) x = rand_values(n, 11, 0.25, 2.0);
        else if (kind == AccKind::Prod) x = rand_values(n, 12, 0.9, 1.1);
        else {
          x = rand_values(n, 13, -3, 3);
          // NaN in some columns (at different rows), -inf/+inf in others, ties in column 1
          for (size_t i = 3; i < n; i += 29) x[i] = NAN;
          for (size_t i = 5; i < n; i += 31) x[i] = (i / 31) % 2 ? INFINITY : -INFINITY;
          if (C > 1)
            for (int64_t r = 0; r < R; ++r) x[r * C + 1] = static_cast<double>(r % 3);
        }
        bool arg = kind == AccKind::ArgMax || kind == AccKind::ArgMin;
        Tol tol =
            kind == AccKind::Sum || kind == AccKind::Prod ? (dt == DType::F32 ? Tol{2e-5, 4} : Tol{1e-12, 4}) : Tol{};
        check_tiles(column_reduce(kind, dt, arg ? DType::I64 : dt, R, C), {Buf::from(dt, x)}, {static_cast<size_t>(C)},
                    tol,
                    std::string(acc_kind_name(kind)) + " " + dtype_name(dt) + " [" + std::to_string(R) + "," +
                        std::to_string(C) + "]");
      }
}

// A row kernel reading its rows across memory (the reduction over the last axis of a transposed
// view: sum(transpose(x), 1)) is a column kernel in memory and takes the tiles too; an ordinary
// row kernel (rows contiguous) keeps the point path.
TEST(LlvmColumns, RowKernelsOverTransposedRowsTakeTiles) {
  KFUSE_REQUIRE_LLVM();
  Kernel plain = column_reduce(AccKind::Sum, DType::F32, DType::F32, 5, 7);
  plain.kind = ir::KernelKind::Row;
  plain.accs[0].value = load(0, DType::F32, iadd(imul(var(Space::Outer, 0), iconst(5)), var(Space::Reduce, 0)));
  EXPECT_EQ(detail::llvmjit::plan_column_tile(plain), 0);
  for (auto [R, C] : odd_shapes())
    for (AccKind kind : {AccKind::Sum, AccKind::Max, AccKind::ArgMin}) {
      const bool arg = kind == AccKind::ArgMin;
      Kernel k = column_reduce(kind, DType::F32, arg ? DType::I64 : DType::F32, R, C);
      k.kind = ir::KernelKind::Row;
      if (R > 0) {  // (an empty reduce: no tiles)
        ASSERT_GT(detail::llvmjit::plan_column_tile(k), 0);
      }
      const size_t n = static_cast<size_t>(R * C);
      std::vector<double> x = rand_values(n, 21, kind == AccKind::Sum ? 0.25 : -3.0, 2.0);
      for (size_t i = 4; i < n && kind != AccKind::Sum; i += 23) x[i] = NAN;
      check_tiles(k, {Buf::from(DType::F32, x)}, {static_cast<size_t>(C)}, kind == AccKind::Sum ? Tol{2e-5, 4} : Tol{},
                  std::string("row ") + acc_kind_name(kind) + " [" + std::to_string(R) + "," + std::to_string(C) + "]");
    }
}

TEST(LlvmColumns, IntegerAndBoolAccumulators) {
  KFUSE_REQUIRE_LLVM();
  for (auto [R, C] : {std::pair<int64_t, int64_t>{37, 53}, {5, 1}, {3, 3}, {0, 7}, {129, 17}}) {
    const size_t n = static_cast<size_t>(R * C);
    std::string shape = " [" + std::to_string(R) + "," + std::to_string(C) + "]";
    for (DType dt : {DType::I32, DType::I64}) {
      for (AccKind kind : {AccKind::Sum, AccKind::Prod, AccKind::Max, AccKind::Min, AccKind::ArgMax, AccKind::ArgMin}) {
        bool arg = kind == AccKind::ArgMax || kind == AccKind::ArgMin;
        // products of -1, 0, 1 only: exact, no overflow
        auto x = kind == AccKind::Prod ? random_ints(n, 20, -1, 1) : random_ints(n, 21, -1000, 1000);
        check_tiles(column_reduce(kind, dt, arg ? DType::I64 : dt, R, C), {Buf::from(dt, x)}, {static_cast<size_t>(C)},
                    {}, std::string(acc_kind_name(kind)) + " " + dtype_name(dt) + shape);
      }
    }
    // bool: any (Max), all (Min), Sum/Prod as or/and, and a count (Sum into i64); bool slots are i8
    auto b = random_ints(n, 22, 0, 1);
    for (int64_t r = 0; r < R && C > 2; ++r) b[r * C] = 0, b[r * C + 2] = 1;  // an all-false and an all-true column
    for (AccKind kind : {AccKind::Sum, AccKind::Prod, AccKind::Max, AccKind::Min, AccKind::ArgMax})
      check_tiles(column_reduce(kind, DType::Bool, kind == AccKind::ArgMax ? DType::I64 : DType::Bool, R, C),
                  {Buf::from(DType::Bool, b)}, {static_cast<size_t>(C)}, {},
                  std::string("bool ") + acc_kind_name(kind) + shape);
    check_tiles(column_reduce(AccKind::Sum, DType::Bool, DType::I64, R, C), {Buf::from(DType::Bool, b)},
                {static_cast<size_t>(C)}, {}, "bool count" + shape);
  }
}

// Integer-valued inputs keep every sum exact, so x - mean (which cancels) must match the
// reference exactly (random reals with an absolute tolerance: LlvmColumnGraphs).
TEST(LlvmColumns, MultiPhaseCentering) {
  KFUSE_REQUIRE_LLVM();
  for (auto [R, C] : odd_shapes())
    for (DType dt : {DType::F32, DType::F64}) {
      auto x = random_ints(static_cast<size_t>(R * C), 31, -8, 8);
      check_tiles(center_columns(dt, R, C), {Buf::from(dt, x)},
                  {static_cast<size_t>(R * C), static_cast<size_t>(C), static_cast<size_t>(C)}, Tol{},
                  std::string("center ") + dtype_name(dt) + " [" + std::to_string(R) + "," + std::to_string(C) + "]");
    }
}

// sum over axis 1 of [A, B, C]: outer [A, C] (tiles along C inside each A), reduce [B]; and over
// axes {0, 1}: outer [C], reduce [A, B] (the lane loop under a two-deep reduce nest), with a
// lane-invariant operand w[a] (step 0 along the lane) and a per-column one v[c].
TEST(LlvmColumns, MultiDimOuterAndReduceDomains) {
  KFUSE_REQUIRE_LLVM();
  const int64_t A = 5, B = 7, C = 19;
  auto x = rand_values(A * B * C, 41, 0.5, 1.5);
  {
    Kernel k = outer2d("k_sum_axis1", ir::KernelKind::Column, DType::F32, A, C);
    k.reduce = {B};
    auto idx =
        iadd(imul(iadd(imul(var(Space::Outer, 0), iconst(B)), var(Space::Reduce, 0)), param(1)), var(Space::Outer, 1));
    k.accs = {{AccKind::Sum, DType::F32, load(0, DType::F32, idx)}};
    Phase p0, p1;
    p0.over_reduce = true;
    p0.accs = {0};
    p1.stores = {{1, iadd(imul(var(Space::Outer, 0), param(1)), var(Space::Outer, 1)), acc(0, DType::F32)}};
    k.phases = {p0, p1};
    check_tiles(k, {Buf::from(DType::F32, x)}, {A * C}, {2e-5, 4}, "sum axis 1 of [A,B,C]");
  }
  {
    Kernel k;
    k.name = "k_wsum_axes01";
    k.kind = ir::KernelKind::Column;
    k.buffers = {
        {"in0", DType::F32, false}, {"in1", DType::F32, false}, {"in2", DType::F32, false}, {"out0", DType::F32, true}};
    k.params = {{"outer0", C}};
    k.outer = {param(0)};
    k.reduce = {A, B};
    auto idx =
        iadd(imul(iadd(imul(var(Space::Reduce, 0), iconst(B)), var(Space::Reduce, 1)), param(0)), var(Space::Outer, 0));
    auto w = load(1, DType::F32, var(Space::Reduce, 0));
    auto v = load(2, DType::F32, var(Space::Outer, 0));
    k.accs = {{AccKind::Sum, DType::F32,
               op(Op::Mul, DType::F32, {load(0, DType::F32, idx), op(Op::Add, DType::F32, {w, v})})}};
    Phase p0, p1;
    p0.over_reduce = true;
    p0.accs = {0};
    p1.stores = {{3, var(Space::Outer, 0), acc(0, DType::F32)}};
    k.phases = {p0, p1};
    check_tiles(k,
                {Buf::from(DType::F32, x), Buf::from(DType::F32, rand_values(A, 42, 0.5, 1)),
                 Buf::from(DType::F32, rand_values(C, 43, 0.5, 1))},
                {C}, {2e-5, 4}, "weighted sum over axes {0,1}");
  }
}

// A tiled kernel's lane loop is vectorised (the IR after O3 has float vectors).
TEST(LlvmColumns, TiledKernelsAreVectorised) {
  KFUSE_REQUIRE_LLVM();
  auto ck = compile_with(*llvm_backend(), column_reduce(AccKind::Sum, DType::F32, DType::F32, 64, 100));
  EXPECT_NE(ck->source.find(" x float>"), std::string::npos) << ck->source;
}

// ---- the public API on the llvm backend vs the fp64 reference evaluator ----

class LlvmColumnGraphs : public LlvmOnly {
 protected:
  // Evaluates `ys` (no kernel may fall back) and compares with the reference evaluator.
  void check(const std::vector<Tensor>& ys, double rtol, double atol, const std::string& what) {
    reset_counters();
    eval(ys);
    EXPECT_EQ(counters().fallbacks, 0u) << what;
    auto ref = reference_values(ys);
    for (size_t i = 0; i < ys.size(); ++i)
      EXPECT_TRUE(all_close(values(ys[i]), ref[i], rtol, atol)) << what << " output " << i;
  }
};

TEST_F(LlvmColumnGraphs, ReductionsOverAxisZero) {
  for (auto [R, C] : odd_shapes()) {
    std::string what = "[" + std::to_string(R) + "," + std::to_string(C) + "]";
    Tensor x = make_tensor(random_values(static_cast<size_t>(R * C), 51, 0.5, 1.5), {R, C});
    if (R > 1 && C > 1) { EXPECT_EQ(explain(sum(x, 0)).kernels.at(0).kind, "column") << what; }
    check({sum(x, 0), sum(x, 0, true), mean(x, 0), mean(x, 0, true), prod(x * 0.2 + 0.9, Axes{0})}, 2e-5, 1e-6,
          "sum/mean/prod " + what);
    check({x - mean(x, 0, true)}, 2e-5, 1e-5, "centering " + what);
    if (R == 0) continue;  // max/min/arg of an empty axis are errors
    check({(x - mean(x, 0, true)) / (max(x, 0, true) - min(x, 0, true) + 1.0)}, 2e-5, 1e-5, "scaling " + what);
    std::vector<double> v = random_values(static_cast<size_t>(R * C), 52, -3, 3);
    for (size_t i = 2; i < v.size(); i += 23) v[i] = kNaN;
    for (size_t i = 4; i < v.size(); i += 37) v[i] = -kInf;
    Tensor y = make_tensor(v, {R, C});
    check({max(y, 0), min(y, 0, true), argmax(y, 0), argmin(y, 0)}, 0, 0, "max/min/arg with NaN " + what);
    Tensor yd = make_tensor(v, {R, C}, DType::F64);
    check({max(yd, 0), min(yd, 0), sum(yd * yd, 0)}, 1e-12, 1e-12, "f64 " + what);
  }
}

TEST_F(LlvmColumnGraphs, WideColumnsAndFusedExpressions) {
  // several default-width tiles and a tail, 3-D column reductions, a broadcast bias, var/std
  Tensor x = make_tensor(random_values(33 * 4500, 61, 0.5, 1.5), {33, 4500});
  Tensor b = make_tensor(random_values(4500, 62, -1, 1), {4500});
  check({sum(x, 0), max(x, 0), sum(x + b, 0), x - mean(x, 0, true), var(x, {0}), std(x, {0}, 0)}, 2e-5, 1e-5,
        "[33,4500]");
  Tensor z = make_tensor(random_values(6 * 11 * 37, 63, 0.5, 1.5), {6, 11, 37});
  check({sum(z, 1), mean(z, 1, true), max(z, Axes{0, 1}), z - mean(z, Axes{0, 1}, true)}, 2e-5, 1e-5, "3-D");
}

// A column kernel whose reduce extent is a small constant is unrolled whole. LLVM 19's SLP
// vectoriser gathered such a kernel's input rows in one lane order and stored its results in
// another: with R = 5 (found by the random-DAG sweep, seed 77899), rows 1 and 3 of
// max(m, fma(t, x, t)) were exchanged, t = maximum(m, randn), m its column max. The pipeline
// runs without SLP (jit/llvm/optimize.cpp). Every R of 1..20 and a few column counts.
TEST_F(LlvmColumnGraphs, UnrolledShortColumnsKeepTheirRows) {
  for (int64_t C : {1, 3})
    for (int64_t R = 1; R <= 20; ++R) {
      std::string what = "[" + std::to_string(R) + "," + std::to_string(C) + "]";
      // (x > 0: fma(t, x, t) = t (1 + x) exceeds the column max m, so an exchange shows)
      Tensor x = make_tensor(random_values(static_cast<size_t>(R * C), 81, 0.1, 1), {R, C});
      Tensor r = randn({R, C}, 77899);
      Tensor m = max(r, 0, true).expand({R, C});
      Tensor t = maximum(m, r);
      check({maximum(m, fma(t, x, t)), x + x}, 2e-5, 1e-5, "randn rows " + what);
      Tensor y = make_tensor(random_values(static_cast<size_t>(R * C), 82, -2, 2), {R, C});
      Tensor my = max(y, 0, true).expand({R, C});
      Tensor ty = maximum(my, y);
      check({maximum(my, fma(ty, x, ty))}, 2e-5, 1e-5, "input rows " + what);
    }
}

// The column tile the LLVM backend plans for each column kernel of `ys` (0: point by point).
// There must be one: a plan without column kernels would take no tile for another reason.
std::vector<int64_t> column_tiles(const std::vector<Tensor>& ys) {
  std::vector<NodeRef> roots;
  for (const Tensor& y : ys) roots.push_back(y.node());
  auto plan = detail::make_plan(roots, /*compile=*/false, options());
  std::vector<int64_t> tiles;
  for (const auto& pk : plan->kernels)
    if (pk.lowered.kernel.kind == ir::KernelKind::Column)
      tiles.push_back(detail::llvmjit::plan_column_tile(pk.lowered.kernel));
  EXPECT_FALSE(tiles.empty()) << "no column kernel";
  return tiles;
}

TEST_F(LlvmColumnGraphs, TransposedInputKeepsThePointPath) {
  // transpose(y) is [53, 37] with the reduce axis (its rows) contiguous in y: not lane-contiguous
  Tensor y = make_tensor(random_values(37 * 53, 71, 0.5, 1.5), {37, 53});
  Tensor t = transpose(y);
  std::vector<Tensor> ys = {sum(t, 0), mean(t, 0, true), t - mean(t, 0, true), max(t, 0)};
  // a transposed operand beside a contiguous one in the same column kernel
  Tensor x = make_tensor(random_values(53 * 37, 72, 0.5, 1.5), {53, 37});
  std::vector<Tensor> mixed = {sum(x * t, 0), x - mean(t, 0, true)};
  // The plans first: once mean(t, 0, true) is evaluated, x - mean(t, 0, true) is only a pointwise
  // kernel. The control: the same reduction of a contiguous input is tiled, so 0 below is the
  // analysis refusing the transposed access, not a planner that never tiles.
  for (int64_t tile : column_tiles({sum(y, 0)})) EXPECT_GT(tile, 0) << "contiguous sum(y, 0)";
  for (const Tensor& out : ys)
    for (int64_t tile : column_tiles({out})) EXPECT_EQ(tile, 0) << "transpose";
  for (const Tensor& out : mixed)
    for (int64_t tile : column_tiles({out})) EXPECT_EQ(tile, 0) << "mixed";
  check(ys, 2e-5, 1e-5, "transpose");
  check(mixed, 2e-5, 1e-5, "mixed");
}

}  // namespace
}  // namespace kfuse::test::llvmt
