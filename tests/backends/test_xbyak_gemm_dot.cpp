// xbyak GEMM on the dot-product kernels (jit/xbyak/gemm_pack_groups.hpp, gemm_ukrs_dot).
//
// bf16 x bf16 contractions on a CPU with AVX512_BF16 pack pairs of k and run vdpbf16ps kernels. Checked
// against fp64 loops over the same bf16 values (the K-scaled tolerance of xbyak_gemm_check.hpp:
// the products are exact, the sums f32) at every packer's edge: A row-major (register
// transposes of pairs, 14-row slivers), A transposed (lane by lane), B row-major (interleaved
// rows), B transposed (a linear layer's weight: transposes), odd K and odd last KC blocks, M and N
// edges, batches; 1 and 2 threads bitwise equal; and the instruction's documented difference.
//
// u8 x i8 with i32 sums on a CPU with AVX512_VNNI pack quads of k and run vpdpbusd kernels:
// exact, so checked equal to the integer sums, at the same edges (K not a multiple of 4 ends on
// a part-quad), and through the public API with a dequantising epilogue.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "../../jit/xbyak/gemm.hpp"
#include "kfuse/half.hpp"
#include "xbyak_gemm_check.hpp"

namespace kfuse::xbt {
namespace {

class XbyakGemmBf16 : public XbyakGemm {
 protected:
  void SetUp() override {
    if (!detail::xb::cpu_supports(Isa::Avx512) || !detail::xb::dot_gemm(detail::xb::DotKind::Bf16))
      GTEST_SKIP() << "the CPU lacks AVX512_BF16: bf16 contractions take the f32 kernels (test_xbyak_gemm.cpp)";
  }
  void TearDown() override {
    detail::xb::set_dot_gemm(std::nullopt);
    XbyakGemm::TearDown();
  }
};

// A contraction of A and B stored as `ab` (bf16, or u8 for u8 x i8), run_check's form.
Spec dot_spec(DType ab, int64_t M, int64_t N, int64_t K, bool ta = false, bool tb = false) {
  Spec s;
  s.ab_dt = ab;
  s.M = M, s.N = N, s.K = K, s.ta = ta, s.tb = tb;
  return s;
}
Spec bf16_spec(int64_t M, int64_t N, int64_t K, bool ta = false, bool tb = false) {
  return dot_spec(DType::BF16, M, N, K, ta, tb);
}
// Values of k per lane: 2 (bf16) or 4 (8-bit).
int64_t group_of(DType ab) { return ab == DType::BF16 ? 2 : 4; }

// Random sizes and every layout (A and B each row-major or transposed), and K around one and
// several groups and the 8 groups of a register transpose.
void check_random_sizes_and_layouts(DType ab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> sz(1, 67);
  for (int i = 0; i < 16; ++i) run_check(dot_spec(ab, sz(rng), sz(rng), sz(rng), i & 1, (i >> 1) & 1), Isa::Avx512, i);
  const int64_t g8 = 8 * group_of(ab);
  for (auto [M, N, K] : {std::tuple<int64_t, int64_t, int64_t>{1, 1, 1},
                         {1, 1, 2},
                         {3, 5, 3},
                         {2, 7, 5},
                         {14, 32, g8},
                         {15, 33, g8 + 1},
                         {29, 64, 2 * g8 - 1},
                         {1, 100, 300},
                         {200, 47, 129}})
    for (int t = 0; t < 4; ++t) run_check(dot_spec(ab, M, N, K, t & 1, t >> 1), Isa::Avx512, M + N + K);
}

// Small blocks: every loop of the nest several times; a KC block of groups covers G * kc of K,
// so K = 16 G j + 1 .. G - 1 ends on a block of a part-group (its lanes' high values zero).
void check_block_edges(DType ab) {
  const auto& u = detail::xb::gemm_ukrs(Isa::Avx512);
  const int64_t G = group_of(ab), B = 16 * G;
  set_gemm_blocking(2 * u.mr, 16, 2 * u.nr);
  for (int64_t dm : {-1, 0, 1})
    for (int64_t dn : {-1, 0, 1})
      for (int64_t K : {B - 1, B, B + 1, B + G - 1, 2 * B + 1, int64_t{3}})
        run_check(dot_spec(ab, 5 * u.mr + dm, 3 * u.nr + dn, K, false, dn == 1), Isa::Avx512);
  set_gemm_blocking(0, 0, 0);
  const auto blk = detail::xb::gemm_blocking(u);
  run_check(dot_spec(ab, u.mr + 1, u.nr - 1, G * blk.kc + 1), Isa::Avx512);  // one past a default block
}

// Batches (A and B broadcast over one batch dim each), and 1 and 2 threads bit for bit.
void check_batches_and_threads(DType ab) {
  Spec s = dot_spec(ab, 9, 21, 13);
  s.batch = {2, 3};
  s.a_bcast = {true, false};
  s.b_bcast = {false, true};
  run_check(s, Isa::Avx512);
  const Options saved = options();
  for (bool tb : {false, true}) {
    std::vector<float> outs[2];
    for (int threads : {1, 2}) {
      set_threads(saved, threads);
      outs[threads - 1] = run_check(dot_spec(ab, 301, 203, 517, false, tb), Isa::Avx512, 5);
    }
    set_options(saved);
    ASSERT_EQ(outs[0].size(), outs[1].size());
    EXPECT_EQ(0, std::memcmp(outs[0].data(), outs[1].data(), outs[0].size() * 4)) << "tb " << tb;
  }
}

TEST_F(XbyakGemmBf16, RandomSizesAndLayouts) { check_random_sizes_and_layouts(DType::BF16, 17); }
TEST_F(XbyakGemmBf16, BlockEdgesAndOddBlocks) { check_block_edges(DType::BF16); }
TEST_F(XbyakGemmBf16, BatchesAndThreads) { check_batches_and_threads(DType::BF16); }

TEST_F(XbyakGemmBf16, AnEpilogueOverBatches) {
  Spec s = bf16_spec(9, 21, 13, false, true);
  s.batch = {2, 3};
  s.a_bcast = {true, false};
  s.epi = [](ExprRef a, const std::vector<ExprRef>& in) { return un(Op::Relu, bin(Op::Add, a, in[0])); };
  run_check(s, Isa::Avx512, 3, [](double acc, double bn, double, double) { return std::max(acc + bn, 0.0); });
}

// vdpbf16ps flushes subnormal products and sums to zero (docs/semantics.md): 2^-66 * 2^-66 =
// 2^-132 is 0 on the pairs path and exact on the f32 kernels. (This is also how the test knows
// the pairs path ran.) Every other value of the checks above agrees with fp64 within the bound.
TEST_F(XbyakGemmBf16, SubnormalProductsFlushToZeroOnThePairsPath) {
  Spec s = bf16_spec(3, 5, 2);
  Kernel k = build(s);
  auto be = detail::xb::make_backend(Isa::Avx512);
  auto cr = be->compile(k, g_knobs);
  ASSERT_TRUE(cr.kernel) << cr.declined;
  std::vector<uint16_t> a(6, float_to_bf16_bits(0x1p-66f)), b(10, float_to_bf16_bits(0x1p-66f));
  b[6] = 0;  // column 1: one product (k = 0) per element, the others two
  std::vector<float> zeros(16, 0.0f), out(15, NAN);
  LaunchArgs args;
  args.buffers = {a.data(), b.data(), zeros.data(), zeros.data(), zeros.data(), out.data()};
  args.params = k.param_values();
  for (bool pairs : {true, false}) {
    detail::xb::set_dot_gemm(pairs);
    cr.kernel->run(args);
    for (int i = 0; i < 15; ++i) {
      const float want = pairs ? 0.0f : (i % 5 == 1 ? 0x1p-132f : 0x1p-131f);
      EXPECT_EQ(out[i], want) << "pairs " << pairs << " element " << i;
    }
  }
}

class XbyakGemmU8S8 : public XbyakGemm {
 protected:
  void SetUp() override {
    if (!detail::xb::cpu_supports(Isa::Avx512) || !detail::xb::dot_gemm(detail::xb::DotKind::U8S8))
      GTEST_SKIP() << "the CPU lacks AVX512_VNNI: u8 x i8 contractions with i32 sums run on LLVM";
  }
};

TEST_F(XbyakGemmU8S8, RandomSizesAndLayouts) { check_random_sizes_and_layouts(DType::U8, 19); }
TEST_F(XbyakGemmU8S8, BlockEdgesAndPartQuads) { check_block_edges(DType::U8); }
TEST_F(XbyakGemmU8S8, BatchesAndThreads) { check_batches_and_threads(DType::U8); }

// x @ W^T with both operands along K runs on the dot-rows kernels (gemm_dot_rows.cpp: rows of A
// and W read in place, 64 k a vector) up to 16 rows, and up to 64 with W past half of L2: every
// tile shape (4 x 4, and 2 x 8, 1 x 16 for one or two rows in all) and its edges, K around the
// 64-byte vector (the last under a byte mask), exact and equal to the packed path's values.
TEST_F(XbyakGemmU8S8, DotRowsEveryTileAndTail) {
  for (int64_t M : {1, 2, 3, 4, 5, 7, 16})
    for (int64_t N : {1, 5, 8, 16, 17, 33})
      for (int64_t K : {1, 3, 63, 64, 65, 130}) {
        const Spec s = dot_spec(DType::U8, M, N, K, false, true);
        expect_paths_agree(s, Isa::Avx512, 0, 1, M * 1000 + N * 10 + K,
                           "M " + std::to_string(M) + " N " + std::to_string(N) + " K " + std::to_string(K));
      }
  // W past half of L2: up to 64 rows; a batch of activations over one W folds into M.
  const int64_t K = 1031, N = probe::cache_sizes().l2 / 2 / K + 3;
  for (int64_t M : {17, 38, 64})
    expect_paths_agree(dot_spec(DType::U8, M, N, K, false, true), Isa::Avx512, 0, 1, M, "M " + std::to_string(M));
  Spec s = dot_spec(DType::U8, 9, N, K, false, true);
  s.batch = {3};
  s.b_bcast = {true};
  expect_paths_agree(s, Isa::Avx512, 0, 1, 7, "batched");
  // 1 and 2 threads bit for bit (the dequantising epilogue on these kernels:
  // Contraction.QuantisedU8TimesI8SumsInI32).
  const Options saved = options();
  std::vector<float> outs[2];
  for (int threads : {1, 2}) {
    set_threads(saved, threads);
    outs[threads - 1] = run_check(dot_spec(DType::U8, 12, 301, 517, false, true), Isa::Avx512, 5);
  }
  set_options(saved);
  ASSERT_EQ(outs[0].size(), outs[1].size());
  EXPECT_EQ(0, std::memcmp(outs[0].data(), outs[1].data(), outs[0].size() * 4));
}

// x @ W with W stored [K, N] (ONNX's MatMulInteger layout) past half of L2 runs on the
// dot-cols kernels (gemm_dot_cols.cpp: W's quads of k interleaved in registers) up to 32 rows:
// tiles of 1-6 rows, strips of 64 columns and their masked last vectors, blocks of
// kDotColsRows rows of W added into C, and a last part-quad (K % 4 = 1, 3); exact and equal to
// the packed path's values.
TEST_F(XbyakGemmU8S8, DotColsEveryTileAndTail) {
  const int64_t half_l2 = probe::cache_sizes().l2 / 2, B = detail::xb::kDotColsRows;
  for (auto [M, N, r] : {std::tuple<int64_t, int64_t, int64_t>{1, 1, 1},
                         {7, 1, 3},
                         {6, 17, 0},
                         {7, 17, 2},
                         {1, 65, 1},
                         {32, 65, 3},
                         {5, 130, 0},
                         {32, 130, 1}}) {
    const int64_t K = (half_l2 / N + B - 1) / B * B + r;
    expect_paths_agree(dot_spec(DType::U8, M, N, K, false, false), Isa::Avx512, 0, 1, M + N + K,
                       "M " + std::to_string(M) + " N " + std::to_string(N) + " K " + std::to_string(K));
  }
}

}  // namespace
}  // namespace kfuse::xbt
