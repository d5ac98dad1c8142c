// matmul as a fused "contraction" kernel (README "Matmul"): the kernel's IR form (the contract
// GEMM backends recognise), what the partitioner fuses into it, plan caching, and results on
// the reference interpreter, LLVM and the default backend chain against the fp64 reference
// evaluator.
//
// Tolerance of a float result y = epilogue(sum_k a_k * b_k): each product and each of the K
// additions rounds once, so |y - exact| <= 4 * K * eps * sum_k |a_k| |b_k| (the factor 4 covers
// the product rounding and a reassociated order), plus 2 * eps * |y| for a short epilogue
// (bias add, relu, scale). eps = 2^-24 (f32) or 2^-53 (f64); sum_k |a_k| |b_k| is computed by
// the oracle as matmul(abs(a), abs(b)). Integers are exact and wrap in their dtype.
#include <kfuse/cache.hpp>
#include <kfuse/explain.hpp>
#include <kfuse/options.hpp>
#include <kfuse/stats.hpp>

#include <cstring>
#include <limits>
#include <map>
#include <random>

#include "backend/backend.hpp"
#include "fusion/lower_group.hpp"
#include "fusion/partition.hpp"
#include "test_util.hpp"

namespace kfuse::test {
namespace {

double eps_of(DType dt) { return dt == DType::F64 ? 0x1p-53 : 0x1p-24; }

// y against the oracle with the K-scaled bound above; `bound` = matmul(abs(a), abs(b)) in the
// shape of y (broadcast by the caller when the epilogue broadcasts).
::testing::AssertionResult matmul_close(const Tensor& y, const Tensor& bound, int64_t K) {
  auto got = values(y), ref = reference_values(y), s = reference_values(bound);
  if (got.size() != ref.size() || s.size() != ref.size())
    return ::testing::AssertionFailure() << "sizes " << got.size() << " " << ref.size() << " " << s.size();
  const double eps = eps_of(y.dtype());
  for (size_t i = 0; i < got.size(); ++i) {
    if (!is_float(y.dtype())) {
      if (got[i] != ref[i])
        return ::testing::AssertionFailure() << "element " << i << ": " << got[i] << " vs " << ref[i];
      continue;
    }
    double tol = 4 * static_cast<double>(K) * eps * s[i] + 2 * eps * std::fabs(ref[i]);
    if (!close(got[i], ref[i], 0, tol))
      return ::testing::AssertionFailure() << "element " << i << ": got " << got[i] << ", expected " << ref[i]
                                           << " (tolerance " << tol << ", K " << K << ")";
  }
  return ::testing::AssertionSuccess();
}

Tensor rnd(const Shape& s, uint64_t seed, DType dt = DType::F32) {
  return make_tensor(random_values(static_cast<size_t>(count_of(s)), seed), s, dt);
}

// ---- backends: reference interpreter, LLVM, the default chain ----

class Contraction : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    saved_ = options();
    if (GetParam() != "default" && !detail::find_backend(GetParam()))
      GTEST_SKIP() << "backend " << GetParam() << " is not built in";
    Options o = saved_;
    o.backends = GetParam() == "default" ? std::vector<std::string>{} : std::vector<std::string>{GetParam()};
    set_options(o);
    reset_counters();
  }
  void TearDown() override {
    // A named backend runs every contraction itself (LLVM must not decline one).
    if (GetParam() != "default") { EXPECT_EQ(counters().fallbacks, 0u); }
    set_options(saved_);
  }
  Options saved_;
};

TEST_P(Contraction, RandomShapesAndEdgeSizes) {
  std::mt19937_64 g(7);
  std::vector<std::array<int64_t, 3>> mnk = {{1, 9, 5}, {9, 1, 5}, {9, 5, 1}, {1, 1, 1},
                                             {0, 4, 3}, {4, 0, 3}, {4, 3, 0}};
  for (int i = 0; i < 5; ++i) mnk.push_back({1 + int64_t(g() % 67), 1 + int64_t(g() % 67), 1 + int64_t(g() % 67)});
  uint64_t seed = 100;
  // every shape in f32; f64 on a few (each K is a compile: keep the test cheap)
  const size_t f64_from = mnk.size() - 3;
  for (DType dt : {DType::F32, DType::F64})
    for (size_t i = dt == DType::F64 ? f64_from : 0; i < mnk.size(); ++i) {
      auto [M, N, K] = mnk[i];
      SCOPED_TRACE(std::string(dtype_name(dt)) + " M " + std::to_string(M) + " N " + std::to_string(N) + " K " +
                   std::to_string(K));
      Tensor a = rnd({M, K}, ++seed, dt), b = rnd({K, N}, ++seed, dt);
      EXPECT_TRUE(matmul_close(matmul(a, b), matmul(abs(a), abs(b)), K));
    }
}

TEST_P(Contraction, EmptyKGivesZerosThroughTheEpilogue) {
  Tensor a = rnd({3, 0}, 1), b = rnd({0, 4}, 2), bias = rnd({4}, 3);
  Tensor y = relu(matmul(a, b) + bias);
  auto bv = values(bias);
  std::vector<double> expect;
  for (int i = 0; i < 3; ++i)
    for (double x : bv) expect.push_back(std::max(x, 0.0));
  EXPECT_TRUE(all_close(values(y), expect, 0, 0));
}

TEST_P(Contraction, TransposedSlicedAndReshapedOperands) {
  Tensor at = rnd({13, 7}, 11), b = rnd({13, 5}, 12), bt = rnd({5, 13}, 13);
  // A^T @ B and A^T @ B^T: strides only
  EXPECT_TRUE(matmul_close(matmul(at.transpose(), b), matmul(abs(at.transpose()), abs(b)), 13));
  EXPECT_TRUE(
      matmul_close(matmul(at.transpose(), bt.transpose()), matmul(abs(at.transpose()), abs(bt.transpose())), 13));
  // every other row and column
  Tensor big = rnd({20, 27}, 14);
  Tensor as = big.slice({Range{1, std::nullopt, 2}, Range{0, std::nullopt, 2}});  // [10, 14]
  Tensor bs = rnd({28, 6}, 15).slice({Range{0, std::nullopt, 2}, Range::all()});  // [14, 6]
  EXPECT_TRUE(matmul_close(matmul(as, bs), matmul(abs(as), abs(bs)), 14));
  // a buffer reshaped [6, 5] -> [2, 3, 5]; batch of 2
  Tensor r = rnd({6, 5}, 16).reshape({2, 3, 5}), w = rnd({2, 5, 4}, 17);
  EXPECT_TRUE(matmul_close(matmul(r, w), matmul(abs(r), abs(w)), 5));
}

TEST_P(Contraction, BroadcastBatchAndOneDimensionalOperands) {
  Tensor c = rnd({3, 1, 4, 5}, 21), d = rnd({2, 5, 6}, 22);
  EXPECT_TRUE(matmul_close(matmul(c, d), matmul(abs(c), abs(d)), 5));
  Tensor m4 = rnd({4, 5}, 26);  // a matrix against a batch: the matrix broadcasts (stride 0)
  EXPECT_TRUE(matmul_close(matmul(m4, d), matmul(abs(m4), abs(d)), 5));
  Tensor m = rnd({5, 6}, 23), v = rnd({5}, 24), mt = rnd({6, 5}, 25);
  EXPECT_TRUE(matmul_close(matmul(v, m), matmul(abs(v), abs(m)), 5));    // [5] @ [5, 6] -> [6]
  EXPECT_TRUE(matmul_close(matmul(mt, v), matmul(abs(mt), abs(v)), 5));  // [6, 5] @ [5] -> [6]
  EXPECT_TRUE(matmul_close(matmul(v, v), matmul(abs(v), abs(v)), 5));    // dot -> []
  EXPECT_TRUE(matmul_close(matmul(v, d), matmul(abs(v), abs(d)), 5));    // [5] @ [2, 5, 6] -> [2, 6]
}

TEST_P(Contraction, IntegersAreExactAndWrap) {
  for (DType dt : {DType::I32, DType::I64}) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor a = make_tensor(random_ints(23 * 17, 31, -50, 50), {23, 17}, dt);
    Tensor b = make_tensor(random_ints(17 * 9, 32, -50, 50), {17, 9}, dt);
    Tensor y = matmul(a, b) * 3 + 1;
    EXPECT_EQ(y.dtype(), dt);
    EXPECT_TRUE(matmul_close(y, y, 17));
  }
  // i32 products and sums past 2^31 wrap (two's complement), as every i32 op does.
  Tensor a = make_tensor(random_ints(4 * 6, 33, 40000, 60000), {4, 6}, DType::I32);
  Tensor b = make_tensor(random_ints(6 * 3, 34, 40000, 60000), {6, 3}, DType::I32);
  auto av = values(a), bv = values(b), got = values(matmul(a, b));
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 3; ++j) {
      uint32_t s = 0;
      for (int k = 0; k < 6; ++k) s += static_cast<uint32_t>(av[i * 6 + k]) * static_cast<uint32_t>(bv[k * 3 + j]);
      EXPECT_EQ(got[i * 3 + j], static_cast<double>(static_cast<int32_t>(s))) << i << "," << j;
    }
  // mixed dtypes promote; the cast folds into the operand load
  Tensor ia = make_tensor(random_ints(8 * 4, 35, -9, 9), {8, 4}, DType::I32), fb = rnd({4, 3}, 36);
  EXPECT_TRUE(matmul_close(matmul(ia, fb), matmul(abs(ia), abs(fb)), 4));
}

// f16/bf16 matmul: products exact in f32, summed in f32, rounded to the dtype once
// (docs/semantics.md). a = 1 + 3 * 2^-7 (exact in both): a * a - 1 = 2^-7 * 6.0703125 is exact
// in f16 and rounds to 2^-7 * 6.0625 in bf16; rounding the product a * a to the dtype first
// (the element-wise rule) gives 2^-7 * 6.125 (f16) or 2^-7 * 6 (bf16). Then random shapes
// against the f32 matmul of the same values rounded once: within one ulp of the dtype (2^-8
// or 2^-11 of |y|) plus the f32 sum's bound.
TEST_P(Contraction, HalfPrecisionProductsAreExactAndRoundOnce) {
  const double a = 1 + 3 * 0x1p-7;
  for (DType dt : {DType::F16, DType::BF16}) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor x = make_tensor({a, -1.0}, {1, 2}, dt), w = make_tensor({a, 1.0}, {2, 1}, dt);
    const double expect = dt == DType::F16 ? 0x1p-7 * 6.0703125 : 0x1p-7 * 6.0625;
    EXPECT_EQ(values(matmul(x, w))[0], expect);
    EXPECT_EQ(values(relu(matmul(x, w) * 2.0))[0], 2 * expect);  // an epilogue of the rounded value
    const double ulp = dt == DType::F16 ? 0x1p-11 : 0x1p-8;
    uint64_t seed = 120;
    for (auto [M, N, K] : std::vector<std::array<int64_t, 3>>{{1, 9, 33}, {19, 21, 64}, {40, 37, 131}}) {
      Tensor p = rnd({M, K}, ++seed, dt), q = rnd({K, N}, ++seed, dt);
      Tensor f = matmul(p.cast(DType::F32), q.cast(DType::F32));
      auto got = values(matmul(p, q)), ref = reference_values(f), s = reference_values(matmul(abs(p), abs(q)));
      ASSERT_EQ(got.size(), ref.size());
      for (size_t i = 0; i < got.size(); ++i) {
        const double tol = ulp * std::fabs(ref[i]) + 4 * static_cast<double>(K) * 0x1p-24 * s[i];
        ASSERT_NEAR(got[i], ref[i], tol) << "element " << i << " of [" << M << "," << K << "] @ [" << K << "," << N
                                         << "]";
      }
    }
  }
}

// A quantised linear layer: u8 activations times i8 weights, summed in i32 (exact; the xbyak
// GEMM's vpdpbusd kernels where the CPU has AVX512_VNNI), then dequantised in the epilogue.
// Sizes cross the kernels' quads of k (K = 1, 3, 70, 131), the dot-rows kernels' 64 k (55, 64,
// 200) and their tiles; [8201, 261] (each thread's half past half of L2) takes the dot-cols kernels for W [K, N].
TEST_P(Contraction, QuantisedU8TimesI8SumsInI32) {
  uint64_t seed = 140;
  for (auto [M, N, K] : std::vector<std::array<int64_t, 3>>{{1, 1, 1},
                                                            {5, 3, 3},
                                                            {37, 29, 70},
                                                            {20, 67, 131},
                                                            {3, 21, 200},
                                                            {16, 40, 64},
                                                            {5, 19, 55},
                                                            {2, 261, 8201}}) {
    SCOPED_TRACE("M " + std::to_string(M) + " N " + std::to_string(N) + " K " + std::to_string(K));
    Tensor a = make_tensor(random_ints(static_cast<size_t>(M * K), ++seed, 0, 255), {M, K}, DType::U8);
    Tensor w = make_tensor(random_ints(static_cast<size_t>(K * N), ++seed, -128, 127), {K, N}, DType::I8);
    // (the dequantised result first: evaluated, y would be an input of z's kernel, not fused)
    Tensor bias = rnd({N}, ++seed);
    Tensor z = matmul(a, w).cast(DType::F32) * 0.002 + bias;  // i32 -> f32 rounds once, as the cast does
    EXPECT_TRUE(all_close(values(z), reference_values(z), 1e-6, 1e-6));
    Tensor y = matmul(a, w);
    ASSERT_EQ(y.dtype(), DType::I32);
    EXPECT_TRUE(matmul_close(y, y, K));  // (integers: equal)
    Tensor wt = make_tensor(random_ints(static_cast<size_t>(K * N), ++seed, -128, 127), {N, K}, DType::I8);
    Tensor yt = matmul(a, transpose(wt));  // W stored [N, K], as a linear layer keeps it
    EXPECT_TRUE(matmul_close(yt, yt, K));
    // Both operands slices of wider rows, read in place (xbyak's dot-rows kernels for up to 16
    // rows; at K = 55 W's rows are 64 bytes apart, 5 past a line: the kernels' head of 59 k
    // covers all of K), dequantised in the epilogue.
    Tensor aw = make_tensor(random_ints(static_cast<size_t>(M * (K + 7)), ++seed, 0, 255), {M, K + 7}, DType::U8);
    Tensor ww =
        make_tensor(random_ints(static_cast<size_t>((N + 2) * (K + 9)), ++seed, -128, 127), {N + 2, K + 9}, DType::I8);
    Tensor as = aw.slice({{0, M}, {3, K + 3}}), ws = ww.slice({{1, N + 1}, {5, K + 5}});
    Tensor ys = matmul(as, transpose(ws));
    EXPECT_TRUE(matmul_close(ys, ys, K));
    Tensor zs = matmul(as, transpose(ws)).cast(DType::F32) * 0.002 + bias;
    EXPECT_TRUE(all_close(values(zs), reference_values(zs), 1e-6, 1e-6));
  }
}

TEST_P(Contraction, FusedEpilogues) {
  Tensor x = rnd({19, 33}, 41), w = rnd({33, 21}, 42), bias = rnd({21}, 43);
  Tensor s = matmul(abs(x), abs(w));
  EXPECT_TRUE(matmul_close(relu(matmul(x, w) + bias), s, 33));
  Tensor a = rnd({33, 19}, 44);
  EXPECT_TRUE(matmul_close(matmul(a.transpose(), w) * 0.5, matmul(abs(a.transpose()), abs(w)) * 0.5, 33));
  // scaled and negated operands fold into the loads
  EXPECT_TRUE(matmul_close(matmul(-x, w * 2.0), s * 2.0, 33));
}

// The product and an epilogue of it, both results: one kernel with two outputs (the GEMM
// backends sum into a scratch C, which the epilogue reads). Rows for each of xbyak's paths (1
// and 2 rows: GEMV), batches folded into M (B broadcast) and a batch per task.
TEST_P(Contraction, ProductAndItsEpilogueAsTwoResults) {
  struct Case {
    Shape a, b;
  };
  uint64_t seed = 60;
  for (const Case& c : {Case{{1, 7}, {7, 29}}, Case{{2, 5}, {5, 19}}, Case{{2, 3, 5}, {5, 7}}, Case{{3, 1, 9}, {9, 21}},
                        Case{{2, 2, 9}, {9, 21}}, Case{{2, 19, 13}, {2, 13, 23}}, Case{{3, 37, 11}, {11, 45}}}) {
    SCOPED_TRACE(shape_str(c.a) + " @ " + shape_str(c.b));
    Tensor a = rnd(c.a, ++seed), b = rnd(c.b, ++seed), bias = rnd({c.b.back()}, ++seed);
    Tensor y = matmul(a, b), z = relu(y + bias);
    eval({y, z});
    const int64_t K = c.b[c.b.size() - 2];
    Tensor bound = matmul(abs(a), abs(b));
    EXPECT_TRUE(matmul_close(y, bound, K));
    EXPECT_TRUE(matmul_close(z, bound + abs(bias), K));
  }
}

TEST_P(Contraction, OneAndTwoThreadsAgreeBitwise) {
  auto run = [&](int threads) {
    Options o = options();
    o.num_threads = threads;
    set_options(o);
    Tensor x = rnd({67, 45}, 51), w = rnd({45, 61}, 52), bias = rnd({61}, 53);
    return (relu(matmul(x, w) + bias)).to_vector<float>();
  };
  auto one = run(1), two = run(2);
  ASSERT_EQ(one.size(), two.size());
  EXPECT_EQ(std::memcmp(one.data(), two.data(), one.size() * sizeof(float)), 0);
}

INSTANTIATE_TEST_SUITE_P(Backends, Contraction, ::testing::Values("reference", "llvm", "default"),
                         [](const auto& info) { return info.param; });

// LLVM runs a contraction with contiguous B rows as tiles of output columns (column_tiles.cpp):
// narrow forced tiles (several tiles and a tail per row) give the same bits as the default.
TEST(ContractionLlvm, ColumnTilesOfAnyWidthAgreeBitwise) {
  if (!detail::find_backend("llvm")) GTEST_SKIP() << "LLVM backend not built in";
  Options saved = options(), o = saved;
  o.backends = {"llvm"};
  o.cache_mode = "off";  // every width compiles its own code
  std::vector<std::vector<float>> outs;
  for (int64_t tile : {0, 4, 16}) {
    o.llvm_column_tile = tile;
    set_options(o);
    reset_counters();
    Tensor x = rnd({2, 9, 11}, 101), w = rnd({11, 37}, 102), b = rnd({37}, 103);
    Tensor y = relu(matmul(x, w) + b);
    EXPECT_TRUE(matmul_close(y, matmul(abs(x), abs(w)), 11)) << "tile " << tile;
    EXPECT_EQ(counters().fallbacks, 0u);
    EXPECT_EQ(counters().kernels_compiled, 1u);  // compiled at this width, not taken from a cache
    outs.push_back(y.to_vector<float>());
  }
  set_options(saved);
  for (const auto& v : outs) EXPECT_EQ(std::memcmp(v.data(), outs[0].data(), v.size() * sizeof(float)), 0);
}

// Whole rows of a tiled contraction run as register blocks of 6 rows x 2-4 vectors of columns
// (Lowerer::row_block); partial rows, leftover rows and columns past the last whole block run as
// column tiles. Every element must have the column tile's bits whatever path computed it: a
// forced 4-lane tile (no row blocks: a block is wider) and launch chunks of 7 and 50 points
// (chunks that start inside rows) give the same bits as the default. K = 600 takes two cascade
// levels (64- and 512-point blocks), K = 130 one and a tail; 13 and 25 rows leave one row over
// (a column tile), 10, 28 and 509 (pieces of 255 and 254) several (a block repeating its last), 2
// batches of 13 rows put a block's rows in one batch only; N = 70 and 129 leave columns over.
// K > 1024 packs B and carries the sums across steps of K in the scratch: 1100 and 1030 take
// two steps, 770 f32 columns two blocks of columns, 509 rows per batch two pieces of rows (a
// float sum restarts from zero at every step, its levels carry it; an integer one carries it).
// With K in one step a piece takes all the rows: 520 rows with B packed (K past the AVX2 leaf,
// or B read along K) are one piece.
// A B read along K (b.transpose(): x @ w.T) is packed whatever K; its partial rows and the
// columns over run as column tiles that read it lane by lane. The row over runs its whole width
// as column tiles of up to 2048 lanes: N = 2100 gives it two, with 13 rows and alone (a GEMV).
TEST(ContractionLlvm, RowBlocksAgreeBitwiseWithColumnTiles) {
  if (!detail::find_backend("llvm")) GTEST_SKIP() << "LLVM backend not built in";
  Options saved = options(), o = saved;
  o.backends = {"llvm"};
  o.cache_mode = "off";
  struct Case {
    DType dt;
    Shape a, b;
    bool bt = false;  // b is stored [N, K] and read transposed (x @ w.T)
  };
  const std::vector<Case> cases = {
      {DType::F32, {25, 600}, {600, 129}},      {DType::F64, {2, 13, 130}, {130, 70}},
      {DType::F64, {19, 8}, {8, 33}},           {DType::I32, {13, 70}, {70, 131}},
      {DType::I64, {2, 10, 65}, {2, 65, 40}},   {DType::F32, {13, 1100}, {1100, 770}},
      {DType::F64, {2, 509, 1030}, {1030, 40}}, {DType::I32, {14, 1100}, {1100, 70}},
      {DType::F64, {28, 300}, {70, 300}, true}, {DType::F32, {13, 1100}, {130, 1100}, true},
      {DType::F64, {13, 40}, {40, 2100}},       {DType::F64, {1, 130}, {130, 2100}},
      {DType::F32, {520, 200}, {200, 40}},      {DType::F64, {520, 150}, {33, 150}, true}};
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(dtype_name(c.dt)) + " " + shape_str(c.a) + " @ " + shape_str(c.b));
    Tensor a, b;
    if (is_float(c.dt)) a = rnd(c.a, 201, c.dt), b = rnd(c.b, 202, c.dt);
    else {
      a = make_tensor(random_ints(static_cast<size_t>(count_of(c.a)), 201, -40, 40), c.a, c.dt);
      b = make_tensor(random_ints(static_cast<size_t>(count_of(c.b)), 202, -40, 40), c.b, c.dt);
    }
    if (c.bt) b = b.transpose();
    Tensor bias = rnd({b.shape().back()}, 203, c.dt);
    std::vector<std::vector<double>> outs;  // (every value of these dtypes is exact in f64)
    for (auto [tile, chunk] : {std::pair<int64_t, int64_t>{0, 0}, {4, 0}, {0, 7}, {0, 50}}) {
      if (c.bt && tile > 0) continue;  // (no row blocks then: B read along K takes the point path)
      o.llvm_column_tile = tile;
      o.llvm_launch_chunk = chunk;
      set_options(o);
      reset_counters();
      Tensor y = relu(matmul(a, b) + bias);
      if (tile == 0 && chunk == 0) {
        EXPECT_TRUE(matmul_close(y, relu(matmul(abs(a), abs(b)) + abs(bias)), c.a.back()));
      }
      EXPECT_EQ(counters().fallbacks, 0u);
      outs.push_back(values(y));
    }
    for (size_t i = 1; i < outs.size(); ++i)
      EXPECT_EQ(std::memcmp(outs[i].data(), outs[0].data(), outs[0].size() * sizeof(double)), 0) << "variant " << i;
  }
  set_options(saved);
}

// ---- the IR form (the contract with GEMM backends) ----

bool mentions(const ir::ExprRef& e, ir::Space s, int dim) {
  if (e->kind == ir::ExprKind::Var) return e->space == s && e->index == dim;
  for (const auto& a : e->args)
    if (mentions(a, s, dim)) return true;
  return false;
}
void collect_loads(const ir::ExprRef& e, std::vector<const ir::Expr*>& out) {
  if (e->kind == ir::ExprKind::Load) out.push_back(e.get());
  for (const auto& a : e->args) collect_loads(a, out);
}

detail::LoweredKernel lower_only_group(const Tensor& y) {
  auto p = detail::partition_graph({y.node().get()});
  EXPECT_EQ(p.groups.size(), 1u);
  return detail::lower_group(p.groups.at(0));
}

TEST(ContractionIr, BatchedTransposedMatmulHasTheContractForm) {
  Tensor a = rnd({2, 7, 5}, 61), b = rnd({7, 3}, 62), bias = rnd({3}, 63);
  Tensor y = relu(matmul(a.permute({0, 2, 1}), b) * 0.5 + bias);  // [2, 5, 3], K = 7
  auto lk = lower_only_group(y);
  const ir::Kernel& k = lk.kernel;
  SCOPED_TRACE(ir::print_kernel(k));
  EXPECT_EQ(k.kind, ir::KernelKind::Contraction);
  ASSERT_EQ(k.outer.size(), 3u);
  EXPECT_EQ(k.reduce, std::vector<int64_t>{7});
  ASSERT_EQ(k.accs.size(), 1u);
  EXPECT_EQ(k.accs[0].kind, ir::AccKind::Sum);
  EXPECT_EQ(k.accs[0].dtype, DType::F32);
  const ir::ExprRef& v = k.accs[0].value;
  ASSERT_EQ(v->kind, ir::ExprKind::Op);
  EXPECT_EQ(v->op, Op::Mul);
  // pa depends on batch, m and k but not n; pb on batch, k and n but not m
  std::vector<const ir::Expr*> la, lb;
  collect_loads(v->args[0], la);
  collect_loads(v->args[1], lb);
  ASSERT_EQ(la.size(), 1u);
  ASSERT_EQ(lb.size(), 1u);
  EXPECT_FALSE(mentions(la[0]->args[0], ir::Space::Outer, 2));
  EXPECT_TRUE(mentions(la[0]->args[0], ir::Space::Outer, 1));
  EXPECT_TRUE(mentions(la[0]->args[0], ir::Space::Reduce, 0));
  EXPECT_FALSE(mentions(lb[0]->args[0], ir::Space::Outer, 1));
  EXPECT_TRUE(mentions(lb[0]->args[0], ir::Space::Outer, 2));
  EXPECT_FALSE(mentions(lb[0]->args[0], ir::Space::Outer, 0));  // b broadcasts over the batch: stride 0
  ASSERT_EQ(k.phases.size(), 2u);
  EXPECT_TRUE(k.phases[0].over_reduce);
  EXPECT_EQ(k.phases[0].accs, std::vector<int>{0});
  EXPECT_TRUE(k.phases[0].stores.empty());
  EXPECT_FALSE(k.phases[1].over_reduce);
  EXPECT_EQ(k.phases[1].stores.size(), 1u);
  EXPECT_EQ(k.num_inputs(), 3);  // a, b, bias: the transpose copies nothing
  EXPECT_NO_THROW(ir::verify_kernel(k));
  // The epilogue reads the accumulator and the bias at (batch, m, n).
  std::vector<const ir::Expr*> le;
  collect_loads(k.phases[1].stores[0].value, le);
  EXPECT_EQ(le.size(), 1u);
}

// ---- plans ----

TEST(ContractionPlans, EpiloguesFuseAndOperandsAreNotCopied) {
  Tensor x = rnd({16, 24}, 71), w = rnd({24, 8}, 72), b = rnd({8}, 73), a = rnd({24, 16}, 74);
  Explanation e1 = explain(relu(matmul(x, w) + b));
  ASSERT_EQ(e1.kernel_count(), 1u) << e1.text();
  EXPECT_EQ(e1.kernels[0].kind, "contraction") << e1.text();
  EXPECT_NE(e1.text().find("matmul;"), std::string::npos) << e1.text();
  EXPECT_NE(e1.text().find("relu;"), std::string::npos) << e1.text();
  Explanation e2 = explain(matmul(transpose(a), w) * 0.5);
  ASSERT_EQ(e2.kernel_count(), 1u) << e2.text();
  EXPECT_EQ(e2.kernels[0].inputs.size(), 2u) << e2.text();  // a and w themselves: no transposed copy
  Explanation e3 = explain(layer_norm(gelu(matmul(x, w) + b), {8}));
  EXPECT_LE(e3.kernel_count(), 2u) << e3.text();
  EXPECT_TRUE(all_close(values(layer_norm(gelu(matmul(x, w) + b), {8})),
                        reference_values(layer_norm(gelu(matmul(x, w) + b), {8})), 1e-4, 1e-5));
}

// Operands stored as f16/bf16/i8 (weights, say) and cheap operand producers (negation, scaling,
// casts) stay in the contraction kernel, and the xbyak GEMM takes it: packing converts to f32
// and applies the prologue (before: it declined, and the LLVM loop nest ran 4x slower).
TEST(ContractionPlans, StoredDtypesAndProloguesRunOnTheGemmPath) {
  const bool xbyak = detail::find_backend("xbyak") != nullptr;
  Tensor x = rnd({37, 40}, 75), b = rnd({29}, 76);
  for (DType wdt : {DType::F16, DType::BF16, DType::I8}) {
    Tensor w = wdt == DType::I8 ? (rnd({40, 29}, 77) * 4.0).cast(DType::I8) : rnd({40, 29}, 77, wdt);
    w.eval();
    auto make = [&] { return relu(matmul(-x * 0.5, w.cast(DType::F32)) + b); };
    Tensor bound = matmul(abs(x * 0.5), abs(w.cast(DType::F32))) + abs(b);
    EXPECT_TRUE(matmul_close(make(), bound, 40)) << dtype_name(wdt);
    Explanation e = explain(make());  // the cached program of the evaluation: its backends
    ASSERT_EQ(e.kernel_count(), 1u) << e.text();
    if (xbyak) { EXPECT_EQ(e.kernels[0].backend, "xbyak") << e.text(); }
  }
}

// The dequantising epilogue fuses: one kernel, on the xbyak GEMM where the CPU has VNNI.
TEST(ContractionPlans, QuantisedLinearLayerIsOneKernel) {
  Tensor a = make_tensor(random_ints(40 * 64, 150, 0, 255), {40, 64}, DType::U8);
  Tensor w = make_tensor(random_ints(64 * 48, 151, -128, 127), {64, 48}, DType::I8);
  Tensor b = rnd({48}, 152);
  auto make = [&] { return relu(matmul(a, w).cast(DType::F32) * 0.01 + b); };
  EXPECT_TRUE(all_close(values(make()), reference_values(make()), 1e-6, 1e-6));
  Explanation e = explain(make());
  ASSERT_EQ(e.kernel_count(), 1u) << e.text();
  // (the AVX-512 VNNI kernels: not where KFUSE_ISA=avx2 keeps xbyak to its AVX2 code)
  if (detail::find_backend("xbyak") && options().isa != "avx2" && __builtin_cpu_supports("avx512vnni") &&
      __builtin_cpu_supports("avx512bw")) {
    EXPECT_EQ(e.kernels[0].backend, "xbyak") << e.text();
  }
}

TEST(ContractionPlans, WhatDoesNotFuseIntoAContraction) {
  Tensor a = rnd({9, 6}, 81), b = rnd({6, 5}, 82), c = rnd({5, 4}, 83);
  auto reasons = [](const Explanation& e) {
    std::string s;
    for (const auto& bd : e.boundaries) s += bd.reason + "\n";
    return s;
  };
  // an expensive operand producer would be recomputed N times per element: materialised
  Explanation e1 = explain(matmul(exp(a), b));
  EXPECT_EQ(e1.kernel_count(), 2u) << e1.text();
  EXPECT_NE(reasons(e1).find("recomputed"), std::string::npos) << e1.text();
  // a reduction of the result, and a second contraction, run in kernels of their own
  Explanation e2 = explain(sum(matmul(a, b), 1));
  EXPECT_EQ(e2.kernel_count(), 2u) << e2.text();
  Explanation e3 = explain(matmul(matmul(a, b), c));
  EXPECT_EQ(e3.kernel_count(), 2u) << e3.text();
  EXPECT_NE(reasons(e3).find("one contraction per kernel"), std::string::npos) << e3.text();
  // a transpose of the result would need it at other points
  Explanation e4 = explain(matmul(a, b).transpose() + 1.0);
  EXPECT_EQ(e4.kernel_count(), 2u) << e4.text();
  for (const Tensor& y :
       {matmul(exp(a), b), sum(matmul(a, b), 1), matmul(matmul(a, b), c), matmul(a, b).transpose() + 1.0})
    EXPECT_TRUE(all_close(values(y), reference_values(y), 1e-5, 1e-5));
}

// Attention splits one projection into q, k and v by slicing a reshape of it. Each matmul reads
// its part of the projection in place (passes/slice_before_split.hpp): four kernels, no copy of
// the projection, which the shared reshape used to cost.
TEST(ContractionPlans, AttentionReadsItsQkvProjectionInPlace) {
  const int64_t B = 2, S = 5, H = 2, D = 3;
  Tensor x = rnd({B, S, H * D}, 91), w = rnd({H * D, 3 * H * D}, 92);
  auto make = [&] {
    Tensor qkv = matmul(x, w).reshape({B, S, 3, H, D});
    auto part = [&](int64_t i) {
      return qkv.slice({Range::all(), Range::all(), Range{i, i + 1}}).reshape({B, S, H, D}).permute({0, 2, 1, 3});
    };
    Tensor p = softmax(matmul(part(0), part(1).transpose(2, 3)) * 0.5, 3);
    return matmul(p, part(2));
  };
  Explanation e = explain(make());
  ASSERT_EQ(e.kernel_count(), 4u) << e.text();
  for (const auto& k : e.kernels) EXPECT_NE(k.kind, "pointwise") << e.text();
  EXPECT_TRUE(all_close(values(make()), reference_values(make()), 1e-5, 1e-5));
}

// A pre-norm decoder block (examples/transformer_block.cpp): 10 kernels: six contractions
// carrying the bias, the scales, the causal mask (index arithmetic), the GELU and both residual
// adds as epilogues; the two layer_norms and the softmax as row kernels; and one copy, of the
// attention output permuted back to [B, S, C] (its heads' columns are no single stride for the
// output projection's K).
TEST(ContractionPlans, DecoderBlockIsTenKernels) {
  const int64_t B = 2, S = 7, H = 2, D = 4, C = H * D;
  Tensor x = rnd({B, S, C}, 95), wqkv = rnd({C, 3 * C}, 96) * 0.25, wo = rnd({C, C}, 97) * 0.25;
  Tensor w1 = rnd({C, 4 * C}, 98) * 0.25, w2 = rnd({4 * C, C}, 99) * 0.25, bias = rnd({3 * C}, 100);
  Tensor i = reshape(arange(S), {S, 1}), j = reshape(arange(S), {1, S});
  auto make = [&] {
    Tensor qkv = reshape(matmul(layer_norm(x, {C}), wqkv) + bias, {B, S, 3, H, D});
    auto part = [&](int64_t p) {
      return permute(squeeze(slice(qkv, {Range::all(), Range::all(), Range{p, p + 1}}), 2), {0, 2, 1, 3});
    };
    Tensor s = matmul(part(0), transpose(part(1))) * 0.5;
    Tensor a = matmul(softmax(where(le(j, i), s, full({1}, -std::numeric_limits<double>::infinity())), -1), part(2));
    Tensor x1 = x + matmul(reshape(permute(a, {0, 2, 1, 3}), {B, S, C}), wo);
    return x1 + matmul(gelu(matmul(layer_norm(x1, {C}), w1), true), w2);
  };
  Explanation e = explain(make());
  ASSERT_EQ(e.kernel_count(), 10u) << e.text();
  std::map<std::string, int> kinds;
  for (const auto& k : e.kernels) ++kinds[k.kind];
  EXPECT_EQ(kinds["contraction"], 6) << e.text();
  EXPECT_EQ(kinds["row"], 3) << e.text();
  EXPECT_EQ(kinds["pointwise"], 1) << e.text();
  EXPECT_TRUE(all_close(values(make()), reference_values(make()), 1e-4, 1e-5));
}

// A recommender's dense features x = relu(x0 @ W + b) are read by the interaction's concat as
// [B, 1, D] rows and by the top MLP's concat as they are. The matmul's kernel writes x once; the
// first concat reads it through the reshape (it had written x and reshape(x), the same values,
// as two outputs). Where x is needed only through the reshape, one output too.
TEST(ContractionPlans, AReshapedResultIsReadThroughTheViewNotWrittenTwice) {
  const int64_t B = 11, K = 13, D = 6;
  Tensor x0 = rnd({B, K}, 101), w = rnd({K, D}, 102), b = rnd({D}, 103), e = rnd({B, D}, 104), f = rnd({B, 3}, 105);
  Tensor x = relu(matmul(x0, w) + b);
  Tensor inter = concat({reshape(x, {B, 1, D}), reshape(e, {B, 1, D})}, 1), top = concat({x, f}, 1);
  Explanation ex = explain({inter, top});
  ASSERT_EQ(ex.kernel_count(), 3u) << ex.text();
  for (const KernelReport& k : ex.kernels) {
    EXPECT_EQ(k.outputs.size(), 1u) << ex.text();
    if (k.kind != "contraction") {  // each concat reads x itself
      EXPECT_EQ(k.inputs.at(0), ex.kernels[0].outputs.at(0)) << ex.text();
    }
  }
  bool said = false;
  for (const auto& bd : ex.boundaries) said |= bd.reason.find("written for another kernel anyway") != std::string::npos;
  EXPECT_TRUE(said) << ex.text();
  EXPECT_TRUE(all_close(values(inter), reference_values(inter), 1e-5, 1e-5));
  EXPECT_TRUE(all_close(values(top), reference_values(top), 1e-5, 1e-5));
  Explanation only = explain(concat({reshape(x, {B, 1, D}), reshape(rnd({B, D}, 106), {B, 1, D})}, 1));
  ASSERT_EQ(only.kernel_count(), 2u) << only.text();
  EXPECT_EQ(only.kernels[0].outputs.size(), 1u) << only.text();
}

TEST(ContractionPlans, AGraphWithMatmulIsPlannedOnce) {
  auto make = [](uint64_t seed) {
    Tensor x = rnd({12, 10}, seed), w = rnd({10, 7}, seed + 1), b = rnd({7}, seed + 2);
    return relu(matmul(x, w) + b);
  };
  Tensor y1 = make(90);
  eval({y1});
  // Kernels compiled by the first evaluation leave the memory cache: a second PLAN would have
  // to compile or load them again; the cached program needs neither.
  clear_memory_cache();
  reset_counters();
  Tensor y2 = make(93);
  eval({y2});
  Counters c = counters();
  EXPECT_EQ(c.kernels_compiled, 0u);
  EXPECT_EQ(c.cache_misses, 0u);
  EXPECT_EQ(c.disk_loads, 0u);
  EXPECT_EQ(c.kernels_launched, 1u);
  Tensor y3 = make(96);
  EXPECT_FALSE(explain(y3).kernels.at(0).backend.empty()) << "no cached program for the structure";
  EXPECT_TRUE(matmul_close(y2, matmul(abs(rnd({12, 10}, 93)), abs(rnd({10, 7}, 94))), 10));
}

}  // namespace
}  // namespace kfuse::test
