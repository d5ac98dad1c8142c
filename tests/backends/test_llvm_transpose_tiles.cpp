// LLVM backend: pointwise kernels that read an input transposed walk their outer domain in tiles
// (jit/llvm/transpose_tiles.cpp, Lowerer::tiled_range). Which kernels take tiles, and that every
// point is written exactly once with the reference's value: tile and block edges (8 columns, 256
// rows), partial rows at both ends of a launch chunk (sequential chunks of any size emulate any
// thread split), 3-D and 4-D permutes, a fused binary op, an f64 and an i32 kernel; 8 x 8 tiles
// transposed in registers for every dtype.
#include "test_llvm_util.hpp"

namespace kfuse::test::llvmt {
namespace {

// out[o0, o1] = f(in[o1, o0]) (+ y[o0, o1]): a transposed read of in0 ([o1, o0] row-major).
Kernel transposed(DType t, int64_t rows, int64_t cols, bool add) {
  Kernel k = outer2d(std::string("k_transpose_") + dtype_name(t) + (add ? "_add" : ""), ir::KernelKind::Pointwise, t,
                     rows, cols);
  ExprRef x = load(0, t, iadd(imul(var(Space::Outer, 1), param(0)), var(Space::Outer, 0)));
  if (add) {
    k.buffers.insert(k.buffers.begin() + 1, {"in1", t, false});
    x = op(Op::Add, t, {x, load(1, t, iadd(imul(var(Space::Outer, 0), param(1)), var(Space::Outer, 1)))});
  }
  Phase ph;
  ph.stores.push_back({add ? 2 : 1, iadd(imul(var(Space::Outer, 0), param(1)), var(Space::Outer, 1)), x});
  k.phases = {ph};
  return k;
}

// out[o0, o1] = in0[o1, o0] * in1[o1, o0] + in2[o0, o1]: two transposed reads and one along the
// output's rows.
Kernel two_transposed(int64_t rows, int64_t cols) {
  const DType t = DType::F32;
  Kernel k = outer2d("k_transpose2", ir::KernelKind::Pointwise, t, rows, cols);
  k.buffers = {{"in0", t, false}, {"in1", t, false}, {"in2", t, false}, {"out0", t, true}};
  auto tr = [&](int b) { return load(b, t, iadd(imul(var(Space::Outer, 1), param(0)), var(Space::Outer, 0))); };
  ExprRef along = iadd(imul(var(Space::Outer, 0), param(1)), var(Space::Outer, 1));
  Phase ph;
  ph.stores.push_back({3, along, op(Op::Add, t, {op(Op::Mul, t, {tr(0), tr(1)}), load(2, t, along)})});
  k.phases = {ph};
  return k;
}

// out[a, b, c, ..] = in[permuted position]: `perm` maps output dims to input dims, `ext` are the
// output extents (params 0..n-1).
Kernel permuted(const std::vector<int64_t>& ext, const std::vector<int>& perm) {
  Kernel k;
  k.name = "k_permute";
  k.kind = ir::KernelKind::Pointwise;
  k.buffers = {{"in0", DType::F32, false}, {"out0", DType::F32, true}};
  const int n = static_cast<int>(ext.size());
  for (int d = 0; d < n; ++d) {
    k.params.push_back({"outer" + std::to_string(d), ext[static_cast<size_t>(d)]});
    k.outer.push_back(param(d));
  }
  // input extents: in dim perm[d] has extent ext[d]
  std::vector<int> out_of(static_cast<size_t>(n));
  for (int d = 0; d < n; ++d) out_of[static_cast<size_t>(perm[static_cast<size_t>(d)])] = d;
  ExprRef in_idx = iconst(0), out_idx = iconst(0);
  for (int d = 0; d < n; ++d) {
    out_idx = iadd(imul(out_idx, param(d)), var(Space::Outer, d));
    const int od = out_of[static_cast<size_t>(d)];  // the output dim that walks input dim d
    in_idx = iadd(imul(in_idx, param(od)), var(Space::Outer, od));
  }
  Phase ph;
  ph.stores.push_back({1, out_idx, load(0, DType::F32, in_idx)});
  k.phases = {ph};
  return k;
}

std::vector<Buf> inputs_for(const Kernel& k, size_t n, uint64_t seed) {
  std::vector<Buf> in;
  for (const auto& b : k.buffers)
    if (!b.output) {
      Buf x(b.dtype, n);
      const auto v = rand_values(n, seed++, -100, 100);
      for (size_t i = 0; i < n; ++i) x.set(i, b.dtype == DType::I32 ? std::round(v[i]) : v[i]);
      in.push_back(std::move(x));
    }
  return in;
}

TEST(LlvmTransposeTiles, WhichKernelsTakeTiles) {
  using detail::llvmjit::plan_transpose_tile;
  EXPECT_GT(plan_transpose_tile(transposed(DType::F32, 5, 7, false)), 0);
  EXPECT_GT(plan_transpose_tile(transposed(DType::F32, 5, 7, true)), 0);
  EXPECT_GT(plan_transpose_tile(permuted({3, 4, 5, 6}, {0, 1, 3, 2})), 0);  // the last two axes swap
  EXPECT_GT(plan_transpose_tile(permuted({2, 37, 19}, {0, 2, 1})), 0);
  EXPECT_EQ(plan_transpose_tile(permuted({3, 4, 5, 6}, {0, 2, 1, 3})), 0);  // rows of 6 stay contiguous
  // The input's contiguous axis is walked by output dim 1, not the one before the innermost:
  // tiles of the two innermost output dims would not reuse its lines.
  EXPECT_EQ(plan_transpose_tile(permuted({3, 4, 5, 6}, {0, 3, 1, 2})), 0);
  EXPECT_EQ(plan_transpose_tile(permuted({30, 40}, {0, 1})), 0);  // a plain copy
  Kernel one_dim = permuted({30}, {0});
  EXPECT_EQ(plan_transpose_tile(one_dim), 0);
}

// Which transposed loads an 8 x 8 tile reads as vectors and transposes in registers.
TEST(LlvmTransposeTiles, WhichLoadsAreTransposedInRegisters) {
  using detail::llvmjit::transpose_tile_loads;
  EXPECT_EQ(transpose_tile_loads(transposed(DType::F32, 5, 7, false)).size(), 1u);
  const Kernel add = transposed(DType::F32, 5, 7, true);
  ASSERT_EQ(transpose_tile_loads(add).size(), 1u);  // (in1 is read along the output's rows)
  EXPECT_EQ(transpose_tile_loads(add)[0]->index, 0);
  EXPECT_EQ(transpose_tile_loads(two_transposed(9, 9)).size(), 2u);
  EXPECT_EQ(transpose_tile_loads(permuted({2, 37, 19}, {0, 2, 1})).size(), 1u);
  EXPECT_TRUE(transpose_tile_loads(permuted({3, 4, 5, 6}, {0, 3, 1, 2})).empty());  // not tiled
  // A masked load (a pad's) keeps the per-point walk: its lanes may not all be readable.
  Kernel masked = transposed(DType::F32, 5, 7, false);
  ExprRef& v = masked.phases[0].stores[0].value;
  v = load(v->index, v->dtype, v->args[0], op(Op::Lt, DType::Bool, {var(Space::Outer, 0), iconst(3)}));
  EXPECT_GT(detail::llvmjit::plan_transpose_tile(masked), 0);
  EXPECT_TRUE(transpose_tile_loads(masked).empty());
  // Reversed along the rows (a flip): the 8 elements of a column are not one ascending vector.
  Kernel flipped = transposed(DType::F32, 5, 7, false);
  ExprRef& f = flipped.phases[0].stores[0].value;
  f = load(0, DType::F32, iadd(imul(var(Space::Outer, 1), param(0)), isub(iconst(4), var(Space::Outer, 0))));
  EXPECT_GT(detail::llvmjit::plan_transpose_tile(flipped), 0);
  EXPECT_TRUE(transpose_tile_loads(flipped).empty());
  // A kernel larger than the bound would unroll 64 copies of itself.
  Kernel big = transposed(DType::F32, 5, 7, false);
  ExprRef& b = big.phases[0].stores[0].value;
  for (int i = 0; i < 60; ++i) b = op(Op::Add, DType::F32, {b, constant(i, DType::F32)});
  EXPECT_GT(detail::llvmjit::plan_transpose_tile(big), 0);
  EXPECT_TRUE(transpose_tile_loads(big).empty());
}

TEST(LlvmTransposeTiles, EveryPointOnceAtTileAndChunkEdges) {
  KFUSE_REQUIRE_LLVM();
  // rows x cols of the output: tile edges (8 columns), block edges (256 rows), a single row or
  // column, and odd sizes
  const std::pair<int64_t, int64_t> shapes[] = {{1, 1},   {1, 9},   {9, 1},    {8, 8},     {7, 9},
                                                {17, 33}, {256, 8}, {257, 17}, {300, 513}, {513, 300}};
  for (DType t : {DType::F32, DType::F64, DType::I32})
    for (bool add : {false, true})
      for (auto [r, c] : shapes) {
        const Kernel k = transposed(t, r, c, add);
        ASSERT_GT(detail::llvmjit::plan_transpose_tile(k), 0);
        const auto in = inputs_for(k, static_cast<size_t>(r * c), 3);
        const std::string what = std::to_string(r) + "x" + std::to_string(c);
        const auto whole = check_vs_reference(k, in, {static_cast<size_t>(r * c)}, {}, what);
        // chunks that end mid-row, hold less than a row, or span several blocks
        auto ck = compile_with(*llvm_backend(), k);
        for (int64_t chunk : {int64_t{1}, int64_t{5}, c + 3, 3 * c - 1, 257 * c + 1}) {
          const auto part = run_on(*chunked(k, *ck, chunk), k, in, {static_cast<size_t>(r * c)});
          EXPECT_TRUE(same_bits(part, whole)) << what << " chunk " << chunk;
        }
      }
}

// 8 x 8 tiles transposed in registers (transpose_tile8): every dtype's loads and vector stores,
// two transposed inputs, chunks of 16 blocks, groups of 8 rows that cross a run of the
// next-to-innermost dim (the per-point walk), launch chunks that split tiles.
TEST(LlvmTransposeTiles, RegisterTransposedTilesMatchTheReference) {
  KFUSE_REQUIRE_LLVM();
  const std::pair<int64_t, int64_t> shapes[] = {{8, 8}, {16, 9}, {23, 130}, {130, 23}, {64, 263}};
  for (DType t : {DType::U8, DType::I8, DType::F16, DType::BF16, DType::I64, DType::Bool})
    for (auto [r, c] : shapes) {
      const Kernel k = transposed(t, r, c, false);
      ASSERT_EQ(detail::llvmjit::transpose_tile_loads(k).size(), 1u);
      check_vs_reference(k, inputs_for(k, static_cast<size_t>(r * c), 7), {static_cast<size_t>(r * c)}, {},
                         std::string(dtype_name(t)) + " " + std::to_string(r) + "x" + std::to_string(c));
    }
  for (auto [r, c] : shapes) {
    const Kernel k = two_transposed(r, c);
    const auto in = inputs_for(k, static_cast<size_t>(r * c), 11);
    const std::string what = "two transposed " + std::to_string(r) + "x" + std::to_string(c);
    const auto whole = check_vs_reference(k, in, {static_cast<size_t>(r * c)}, {}, what);
    auto ck = compile_with(*llvm_backend(), k);
    for (int64_t chunk : {int64_t{3}, 8 * c + 5, 9 * c}) {
      const auto part = run_on(*chunked(k, *ck, chunk), k, in, {static_cast<size_t>(r * c)});
      EXPECT_TRUE(same_bits(part, whole)) << what << " chunk " << chunk;
    }
  }
  // batched: runs of 64 (whole groups), 21 (groups that cross into the next batch), 8
  const std::vector<int64_t> batched[] = {{4, 64, 128}, {3, 21, 130}, {5, 8, 17}, {2, 2, 3, 19, 40}};
  for (const auto& ext : batched) {
    std::vector<int> perm(ext.size());
    for (size_t d = 0; d < ext.size(); ++d) perm[d] = static_cast<int>(d);
    std::swap(perm[ext.size() - 1], perm[ext.size() - 2]);
    const Kernel k = permuted(ext, perm);
    ASSERT_EQ(detail::llvmjit::transpose_tile_loads(k).size(), 1u);
    int64_t n = 1;
    for (int64_t e : ext) n *= e;
    check_vs_reference(k, inputs_for(k, static_cast<size_t>(n), 13), {static_cast<size_t>(n)}, {},
                       ::testing::PrintToString(ext));
  }
}

// A tile's rows are vectors (Lowerer::tiled_range: 16 columns on AVX-512 hosts for f32, 8 for
// f64 or AVX2), its math one vector call per row; the points outside whole tiles (the columns
// past the last tile, groups of fewer than 8 rows, partial rows at chunk ends) call the scalar
// wrapper of the same vector variant (vector_math.cpp). So tanh(in0^T * in1) must match the
// reference and give the same bits however a launch is chunked: column counts a multiple of 16,
// of 8 but not 16, and odd.
TEST(LlvmTransposeTiles, MathOverTransposedTilesIsChunkIndependent) {
  KFUSE_REQUIRE_LLVM();
  const std::pair<int64_t, int64_t> shapes[] = {{8, 16}, {9, 24}, {40, 48}, {23, 130}, {130, 23}, {64, 263}};
  for (DType t : {DType::F32, DType::F64})
    for (auto [r, c] : shapes) {
      Kernel k = transposed(t, r, c, true);
      Phase& ph = k.phases[0];
      ph.stores[0].value =
          op(Op::Tanh, t, {op(Op::Mul, t, {ph.stores[0].value->args[0], ph.stores[0].value->args[1]})});
      ASSERT_EQ(detail::llvmjit::transpose_tile_loads(k).size(), 1u);
      auto in = inputs_for(k, static_cast<size_t>(r * c), 17);
      for (auto& b : in)  // tanh's interesting range: |x * y| up to about 3
        for (size_t i = 0; i < b.size(); ++i) b.set(i, b.get(i) / 60);
      const std::string what = std::string(dtype_name(t)) + " tanh " + std::to_string(r) + "x" + std::to_string(c);
      const auto whole = check_vs_reference(k, in, {static_cast<size_t>(r * c)}, {0, 4}, what);
      auto ck = compile_with(*llvm_backend(), k);
      for (int64_t chunk : {int64_t{1}, int64_t{7}, 8 * c + 5, 9 * c}) {
        const auto part = run_on(*chunked(k, *ck, chunk), k, in, {static_cast<size_t>(r * c)});
        EXPECT_TRUE(same_bits(part, whole)) << what << " chunk " << chunk;
      }
    }
}

TEST(LlvmTransposeTiles, PermutesMatchTheReference) {
  KFUSE_REQUIRE_LLVM();
  const std::pair<std::vector<int64_t>, std::vector<int>> cases[] = {
      {{2, 37, 19}, {0, 2, 1}},        // batched transpose
      {{3, 4, 5, 6}, {0, 1, 3, 2}},    // the last two axes swap
      {{3, 4, 5, 6}, {0, 3, 1, 2}},    // not tiled: the row-by-row walk
      {{5, 3, 260, 9}, {2, 0, 3, 1}},  // blocks of 256 rows across leading dims
      {{1, 1, 1, 300}, {3, 1, 2, 0}}};
  for (const auto& [ext, perm] : cases) {
    const Kernel k = permuted(ext, perm);
    int64_t n = 1;
    for (int64_t e : ext) n *= e;
    check_vs_reference(k, inputs_for(k, static_cast<size_t>(n), 5), {static_cast<size_t>(n)}, {},
                       ::testing::PrintToString(ext));
  }
}

}  // namespace
}  // namespace kfuse::test::llvmt
