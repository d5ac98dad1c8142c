// xbyak GEMV paths (jit/xbyak/gemv.cpp, gemm_swapped.cpp): a few rows of A against B streamed
// once, along N or transposed (x @ W^T), and the swapped form of x @ W^T, bit for bit what the
// packed path gives and within the K-scaled tolerance of fp64 (the checker: xbyak_gemm_check.hpp).
#include <gtest/gtest.h>

#include <optional>
#include <random>

#include "kfuse/half.hpp"
#include "kfuse/profile.hpp"
#include "xbyak_gemm_check.hpp"

namespace kfuse::xbt {
namespace {

// The transposed GEMV's forms to run (B contiguous along K): the CPU's choice, then each form
// this CPU runs (the zmm and AVX-512VL forms need AVX-512, whichever vendor's).
std::vector<std::optional<detail::xb::GemvTForm>> gemv_t_forms(bool tb) {
  using detail::xb::GemvTForm;
  std::vector<std::optional<GemvTForm>> forms{std::nullopt};
  if (!tb) return forms;
  forms.push_back(GemvTForm::Ymm);
  if (detail::xb::cpu_supports(Isa::Avx512)) forms.insert(forms.end(), {GemvTForm::Zmm, GemvTForm::YmmVl});
  return forms;
}

// GEMV (a few rows) streams B once for all its rows: along B's rows into rows of partial sums
// (gemv_rows) when B is contiguous along N (past half of L2: AVX2 5 and 6 rows in one pass as register
// tiles (gemv_rows_tiled_y), 7 and 8 in two passes of up to 4; AVX-512 up to 32 rows in one pass, as register tiles
// over 16 or 32 rows of B at a time (gemv_rows_tiled_z; one to four tiles of rows), and up to 64 in two past L3); 8
// rows of B transposed in registers (gemv_t_rows) when B is contiguous along K (x @ W^T, W [N, K]), in every form the
// CPU runs (gemv_t_forms). Every element is still the microkernels' FMA chain, k ascending per KC block, so both equal
// the packed path bit for bit: N tails past a vector and past the tiles' 32 columns (N mod 32 = 0, 3, 5, 9, 16, 17,
// 19), K tails past 4, 8 or 16 rows and past KC, one to 32 rows (48 rows: whichever path the size picks, the GEMV's
// two sweeps only where this B passes L3), two threads over the columns, a transposed (strided) A.
TEST_F(XbyakGemm, GemvMatchesPackedPathBitwise) {
  const Options saved = options();
  for (Isa isa : isas()) {
    const int64_t kc = detail::xb::gemm_blocking(detail::xb::gemm_ukrs(isa)).kc;
    for (auto [M, N, K, ta, tb] : {std::tuple<int64_t, int64_t, int64_t, bool, bool>{1, 203, 7, false, false},
                                   {2, 4099, kc + 6, true, false},
                                   {1, 40, 2 * kc + 3, false, false},
                                   {3, 1001, kc + 6, false, false},
                                   {4, 1001, 2 * kc + 3, true, false},
                                   {5, 4099, kc + 6, false, false},
                                   {7, 2001, 2 * kc + 3, true, false},
                                   {8, 1001, 2 * kc + 3, false, false},
                                   {6, 1043, kc + 6, true, false},
                                   {9, 1001, kc + 6, false, false},
                                   {10, 1040, kc + 6, true, false},
                                   {11, 1024, 2 * kc + 3, false, false},
                                   {12, 1029, kc + 6, false, false},
                                   {16, 1009, 2 * kc + 3, true, false},
                                   {23, 1027, kc + 6, false, false},
                                   {32, 1043, kc + 6, false, false},
                                   {29, 1035, kc + 6, true, false},
                                   {48, 1003, kc + 6, false, false},
                                   {1, 203, 7, false, true},
                                   {2, 37, kc + 6, true, true},
                                   {3, 1027, 2 * kc + 3, false, true},
                                   {4, 19, 13, false, true},
                                   {4, 64, 8, true, true},
                                   {6, 1001, 2 * kc + 3, false, true},
                                   {8, 300, kc + 6, true, true},
                                   {11, 1003, kc + 6, false, true},
                                   {12, 1001, 2 * kc + 3, true, true}}) {
      Spec s;
      s.M = M, s.N = N, s.K = K, s.ta = ta, s.tb = tb;
      for (auto form : gemv_t_forms(tb))
        for (int threads : {1, 2}) {
          detail::xb::set_gemv_t_form(form);
          set_threads(saved, threads);
          expect_paths_agree(s, isa, 0, 1, 9,
                             std::to_string(M) + "x" + std::to_string(N) + "x" + std::to_string(K) +
                                 (ta ? " A^T" : "") + (tb ? " B^T" : "") + " form " +
                                 std::to_string(form ? static_cast<int>(*form) : -1));
        }
      detail::xb::set_gemv_t_form(std::nullopt);
    }
  }
  set_options(saved);
}

// x @ W^T with 9 to kSwappedRows rows and W (f32) past half of L2 runs as C^T = W x^T
// (gemm_swapped.cpp): W read in place by the direct kernels, x packed. The same FMA chain per
// element, so it equals the packed path bit for bit, and the fp64 reference within tolerance:
// rows padded to whole vectors (9, 17, 33, tb), tiles of W rows with an edge (N not a multiple
// of MR; with K = kc on AVX-512, rows 4 KiB apart, tiles of the rows an L1 set's ways hold), K past KC and in several
// chunks of A^T (kb < K: the whole C^T kept until the last chunk), a transposed (strided) x, a batch with W broadcast,
// an epilogue, 1 and 2 threads.
TEST_F(XbyakGemm, SwappedLinearMatchesPackedPathBitwise) {
  const Options saved = options();
  const int64_t l2 = probe::cache_sizes().l2;
  for (Isa isa : isas()) {
    const auto& u = detail::xb::gemm_ukrs(isa);
    const int64_t kc = detail::xb::gemm_blocking(u).kc;
    struct Case {
      int64_t M, K;
      bool ta, batched, epi;
    };
    for (const Case& c : {Case{9, kc + 6, false, false, false}, Case{17, 2 * kc + 3, true, false, true},
                          Case{16, 7, false, true, false}, Case{33, kc, false, false, false},
                          Case{detail::xb::kSwappedRows, 0, false, false, true}}) {
      Spec s;
      s.M = c.M, s.tb = true, s.ta = c.ta;
      // K = 0: long enough for A^T to take more than one chunk of K
      s.K = c.K > 0 ? c.K : 3 * detail::xb::swapped_chunk(u, l2, c.M, int64_t{1} << 40, kc) + 5;
      if (c.K == 0) { ASSERT_GT(s.K, detail::xb::swapped_chunk(u, l2, c.M, s.K, kc)); }
      s.N = swapped_w_rows(u, l2, s.K);
      if (c.batched) s.batch = {2}, s.b_bcast = {true};
      double (*epi64)(double, double, double, double) = nullptr;
      if (c.epi) {
        s.epi = [](ExprRef a, const std::vector<ExprRef>& in) { return un(Op::Relu, bin(Op::Add, a, in[0])); };
        epi64 = [](double a, double bn, double, double) { return std::max(a + bn, 0.0); };
      }
      for (int threads : {1, 2}) {
        set_threads(saved, threads);
        expect_paths_agree(s, isa, 0, 1, 11,
                           std::to_string(s.M) + "x" + std::to_string(s.N) + "x" + std::to_string(s.K) +
                               (c.ta ? " A^T" : "") + " threads " + std::to_string(threads),
                           epi64);
      }
    }
  }
  set_options(saved);
}

// A contraction with several outputs sums into a scratch C (row stride: the task's columns), which
// the epilogue then reads: on every path, GEMV ones included, with N off any stride the paths use
// internally, and with batches, folded into M (B broadcast) or one task each. Two bugs found by
// sweeping the random-DAG property test and a matmul fuzzer past their CI seeds: the GEMV path
// along N passed the epilogue its partial sums' stride (N rounded up to an odd number of lines)
// instead of the scratch C's, so with 1 or 2 rows and N not 16 both outputs read the wrong rows;
// and the epilogue indexed the scratch C by M alone, so every batch of a folded launch read the
// first batch's rows.
TEST_F(XbyakGemm, SeveralOutputsOnEveryPath) {
  const Options saved = options();
  const int64_t l2 = probe::cache_sizes().l2;
  for (Isa isa : isas()) {
    const auto& u = detail::xb::gemm_ukrs(isa);
    const int64_t kc = detail::xb::gemm_blocking(u).kc;
    const int64_t swapped_n = swapped_w_rows(u, l2, kc + 6);
    struct Case {
      int64_t M, N, K;
      bool tb;
      std::vector<int64_t> batch;
      bool b_bcast;
    };
    for (const Case& c :
         {Case{1, 29, 19, false, {}, false},  // GEMV along N
          Case{2, 203, kc + 6, false, {}, false}, Case{5, 1001, kc + 6, false, {}, false},
          Case{1, 29, 19, true, {}, false},                                                    // GEMV along K (x @ W^T)
          Case{3, 37, kc + 6, true, {}, false}, Case{16, swapped_n, kc + 6, true, {}, false},  // swapped
          Case{4, 29, 19, false, {}, false},                                                   // direct
          Case{37, 45, 2 * kc + 3, false, {}, false}, Case{1, 29, 19, false, {3}, true},       // batches folded into M
          Case{7, 45, 19, false, {2, 3}, true}, Case{3, 37, 19, true, {2}, true},
          Case{7, 45, 19, false, {3}, false},  // a task per batch
          Case{2, 29, 19, false, {2}, false}}) {
      Spec s;
      s.M = c.M, s.N = c.N, s.K = c.K, s.tb = c.tb, s.batch = c.batch;
      s.b_bcast.assign(c.batch.size(), c.b_bcast);
      s.extra_outputs = 1;
      for (int threads : {1, 2}) {
        set_threads(saved, threads);
        expect_paths_agree(s, isa, 0, 1, 13,
                           std::to_string(c.M) + "x" + std::to_string(c.N) + "x" + std::to_string(c.K) +
                               (c.tb ? " B^T" : "") + " batches " + std::to_string(prod(c.batch)) +
                               (c.b_bcast ? " B broadcast" : "") + " threads " + std::to_string(threads));
      }
    }
  }
  set_options(saved);
}

// f16 and bf16 weights (A in f32, no prologue) are read in place by the GEMV paths, converted as
// they are loaded, for up to 2 x kGemvRows rows (AVX-512: up to 64, in two sweeps past 32; AVX2 in two sweeps past 4;
// along K, a linear layer's W^T, whatever the size): bit for bit what the packed path gives (the same f32 values, the
// same chains), on 1 and 2 threads, and within the K-scaled tolerance of fp64 over the converted values. Edges: K past
// one KC block and not a multiple of 16, N with a part-vector tail, one and several rows. With more rows and W past
// half of L2 the swapped form (gemm_swapped.cpp) converts W a tile of rows at a time: the same bits too (N not a
// multiple of MR, rows padded to whole vectors). Along K, every transposed-GEMV form the CPU runs (gemv_t_forms: up
// to 12 rows in one sweep in the AVX-512VL form). A in the weights' dtype too (bf16 or f16 activations): each task's
// rows of A are converted to f32 once and these paths run on them, again the packed path's bits (the pairs kernels of
// AVX512_BF16 forced off).
TEST_F(XbyakGemm, HalfWeightsReadInPlaceByTheGemvPaths) {
  const Options saved = options();
  detail::xb::set_dot_gemm(false);  // (bf16 x bf16 on AVX512_BF16: the pairs kernels, test_xbyak_gemm_dot.cpp)
  for (Isa isa : isas()) {
    const int64_t kc = detail::xb::gemm_blocking(detail::xb::gemm_ukrs(isa)).kc;
    const int64_t mr = detail::xb::gemm_ukrs(isa).mr, l2 = probe::cache_sizes().l2;
    auto past_half_l2 = [&](int64_t K) { return (l2 / 2 / (2 * K) + mr) / mr * mr + 3; };
    for (DType b_dt : {DType::F16, DType::BF16})
      for (DType a_dt : {DType::F32, b_dt})
        for (auto [M, N, K, tb] : {std::tuple<int64_t, int64_t, int64_t, bool>{1, 203, 7, false},
                                   {2, 4099, kc + 6, false},
                                   {1, 40, 2 * kc + 3, false},
                                   {3, 1001, kc + 6, false},
                                   {5, 1001, 2 * kc + 3, false},
                                   {8, 517, kc + 6, false},
                                   {6, 1043, 2 * kc + 3, false},
                                   {12, 1061, 2 * kc + 3, false},
                                   {14, 1040, 2 * kc + 3, false},
                                   {21, 1045, 2 * kc + 3, false},
                                   {29, 1037, kc + 6, false},
                                   {1, 203, 7, true},
                                   {2, 37, kc + 6, true},
                                   {3, 1027, 2 * kc + 3, true},
                                   {4, 19, 13, true},
                                   {1, 64, 2 * kc + 16, true},
                                   {6, 203, kc + 6, true},
                                   {8, 40, 13, true},
                                   {10, 1003, kc + 6, true},
                                   {16, past_half_l2(kc + 6), kc + 6, true},
                                   {33, past_half_l2(2 * kc + 3), 2 * kc + 3, true}}) {
          Spec s;
          s.M = M, s.N = N, s.K = K, s.tb = tb;
          Kernel k = build(s);
          k.buffers[1].dtype = b_dt;
          const auto& v = k.accs[0].value;
          ExprRef av = v->args[0];
          if (a_dt != DType::F32) {
            k.buffers[0].dtype = a_dt;
            av = op(Op::Cast, DType::F32, {load(0, a_dt, av->args[0])});
          }
          k.accs[0].value = bin(Op::Mul, av, op(Op::Cast, DType::F32, {load(1, b_dt, v->args[1]->args[0])}));
          std::mt19937 rng(static_cast<uint32_t>(M * 131 + N * 7 + K));
          std::uniform_real_distribution<float> u(-1, 1);
          std::vector<float> a(static_cast<size_t>(M * K));
          std::vector<uint16_t> ah(a.size());  // (a half A: its bits; a holds their values)
          for (size_t i = 0; i < a.size(); ++i) {
            a[i] = u(rng);
            if (a_dt == DType::F32) continue;
            ah[i] = a_dt == DType::F16 ? float_to_f16_bits(a[i]) : float_to_bf16_bits(a[i]);
            a[i] = a_dt == DType::F16 ? f16_bits_to_float(ah[i]) : bf16_bits_to_float(ah[i]);
          }
          std::vector<uint16_t> b(static_cast<size_t>(K * N));
          std::vector<double> bv(b.size());
          for (size_t i = 0; i < b.size(); ++i) {
            b[i] = b_dt == DType::F16 ? float_to_f16_bits(u(rng)) : float_to_bf16_bits(u(rng));
            bv[i] = b_dt == DType::F16 ? f16_bits_to_float(b[i]) : bf16_bits_to_float(b[i]);
          }
          std::vector<float> unused(static_cast<size_t>(M * N + N + M + 1), 0.0f), outs[2][2];
          const std::string what = std::string(detail::xb::isa_name(isa)) + " " + dtype_name(a_dt) + " x " +
                                   dtype_name(b_dt) + " " + std::to_string(M) + "x" + std::to_string(N) + "x" +
                                   std::to_string(K) + (tb ? " B^T" : "");
          for (auto form : gemv_t_forms(tb)) {
            detail::xb::set_gemv_t_form(form);
            for (int path : {0, 1}) {
              set_gemm_path(path);
              auto cr = detail::xb::make_backend(isa)->compile(k, g_knobs);
              ASSERT_TRUE(cr.kernel) << cr.declined;
              for (int threads : {1, 2}) {
                set_threads(saved, threads);
                std::vector<float>& out = outs[path][threads - 1];
                out.assign(static_cast<size_t>(M * N), NAN);
                LaunchArgs args;
                void* ap = a_dt == DType::F32 ? static_cast<void*>(a.data()) : ah.data();
                args.buffers = {ap, b.data(), unused.data(), unused.data(), unused.data(), out.data()};
                args.params = k.param_values();
                cr.kernel->run(args);
              }
            }
            set_options(saved);
            // by size (GEMV up to its row limits) on 2 threads, packed on 1 and 2: the bits of by size on 1
            for (const std::vector<float>* other : {&outs[0][1], &outs[1][0], &outs[1][1]})
              EXPECT_EQ(0, std::memcmp(outs[0][0].data(), other->data(), outs[0][0].size() * 4))
                  << what << " form " << (form ? static_cast<int>(*form) : -1);
          }
          detail::xb::set_gemv_t_form(std::nullopt);
          int bad = 0;
          for (int64_t m = 0; m < M; ++m)
            for (int64_t n = 0; n < N; ++n) {
              double want = 0, mag = 0;
              for (int64_t kk = 0; kk < K; ++kk) {
                const double x = a[m * K + kk] * bv[tb ? n * K + kk : kk * N + n];
                want += x;
                mag += std::fabs(x);
              }
              const float got = outs[0][0][m * N + n];
              if (!(std::fabs(got - want) <= 4.0 * (K + 2) * 6e-8 * (mag + 1.0)) && bad++ < 5)
                ADD_FAILURE() << what << " [" << m << "," << n << "]: got " << got << " want " << want;
            }
        }
  }
  detail::xb::set_dot_gemm(std::nullopt);
}

}  // namespace
}  // namespace kfuse::xbt
