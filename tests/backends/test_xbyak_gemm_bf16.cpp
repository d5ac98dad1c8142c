// xbyak GEMM on bf16 pairs (jit/xbyak/gemm_pack_pairs.hpp, gemm_ukrs_bf16): bf16 x bf16
// contractions on a CPU with AVX512_BF16 pack pairs of k and run vdpbf16ps kernels. Checked
// against fp64 loops over the same bf16 values (the K-scaled tolerance of xbyak_gemm_check.hpp:
// the products are exact, the sums f32) at every packer's edge: A row-major (register
// transposes of pairs, 14-row slivers), A transposed (lane by lane), B row-major (interleaved
// rows), B transposed (a linear layer's weight: transposes), odd K and odd last KC blocks, M and N
// edges, batches; 1 and 2 threads bitwise equal; and the instruction's documented difference.
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
    if (!detail::xb::cpu_supports(Isa::Avx512) || !detail::xb::bf16_dot_gemm())
      GTEST_SKIP() << "the CPU lacks AVX512_BF16: bf16 contractions take the f32 kernels (test_xbyak_gemm.cpp)";
  }
  void TearDown() override {
    detail::xb::set_bf16_dot_gemm(std::nullopt);
    XbyakGemm::TearDown();
  }
};

Spec bf16_spec(int64_t M, int64_t N, int64_t K, bool ta = false, bool tb = false) {
  Spec s;
  s.ab_dt = DType::BF16;
  s.M = M, s.N = N, s.K = K, s.ta = ta, s.tb = tb;
  return s;
}

TEST_F(XbyakGemmBf16, RandomSizesAndLayouts) {
  std::mt19937 rng(17);
  std::uniform_int_distribution<int> sz(1, 67);
  for (int i = 0; i < 16; ++i) run_check(bf16_spec(sz(rng), sz(rng), sz(rng), i & 1, (i >> 1) & 1), Isa::Avx512, i);
  for (auto [M, N, K] : {std::tuple{1, 1, 1},
                         {1, 1, 2},
                         {3, 5, 3},
                         {14, 32, 16},
                         {15, 33, 17},
                         {29, 64, 31},
                         {1, 100, 300},
                         {200, 47, 129}})
    for (int t = 0; t < 4; ++t) run_check(bf16_spec(M, N, K, t & 1, t >> 1), Isa::Avx512, M + N + K);
}

// Small blocks: every loop of the nest several times; a KC block of pairs covers 2 * kc of K,
// so K = 2 * 16 * j + 1 ends on a block of one value (a pair with its high half zero).
TEST_F(XbyakGemmBf16, BlockEdgesAndOddBlocks) {
  const auto& u = detail::xb::gemm_ukrs(Isa::Avx512);
  set_gemm_blocking(2 * u.mr, 16, 2 * u.nr);
  for (int64_t dm : {-1, 0, 1})
    for (int64_t dn : {-1, 0, 1})
      for (int64_t K : {31, 32, 33, 65, 3})
        run_check(bf16_spec(5 * u.mr + dm, 3 * u.nr + dn, K, false, dn == 1), Isa::Avx512);
  set_gemm_blocking(0, 0, 0);
  const auto blk = detail::xb::gemm_blocking(u);
  run_check(bf16_spec(u.mr + 1, u.nr - 1, 2 * blk.kc + 1), Isa::Avx512);  // one past a block of pairs
}

TEST_F(XbyakGemmBf16, BatchesWithBroadcastAndEpilogues) {
  Spec s = bf16_spec(9, 21, 13);
  s.batch = {2, 3};
  s.a_bcast = {true, false};
  s.b_bcast = {false, true};
  run_check(s, Isa::Avx512);
  s.tb = true;
  s.epi = [](ExprRef a, const std::vector<ExprRef>& in) { return un(Op::Relu, bin(Op::Add, a, in[0])); };
  run_check(s, Isa::Avx512, 3, [](double acc, double bn, double, double) { return std::max(acc + bn, 0.0); });
}

TEST_F(XbyakGemmBf16, OneAndTwoThreadsAgreeBitwise) {
  const Options saved = options();
  for (bool tb : {false, true}) {
    std::vector<float> outs[2];
    for (int threads : {1, 2}) {
      set_threads(saved, threads);
      outs[threads - 1] = run_check(bf16_spec(301, 203, 517, false, tb), Isa::Avx512, 5);
    }
    set_options(saved);
    ASSERT_EQ(outs[0].size(), outs[1].size());
    EXPECT_EQ(0, std::memcmp(outs[0].data(), outs[1].data(), outs[0].size() * 4)) << "tb " << tb;
  }
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
    detail::xb::set_bf16_dot_gemm(pairs);
    cr.kernel->run(args);
    for (int i = 0; i < 15; ++i) {
      const float want = pairs ? 0.0f : (i % 5 == 1 ? 0x1p-132f : 0x1p-131f);
      EXPECT_EQ(out[i], want) << "pairs " << pairs << " element " << i;
    }
  }
}

}  // namespace
}  // namespace kfuse::xbt
