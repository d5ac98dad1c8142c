// xbyak GEMM path (jit/xbyak/gemm*.cpp): contraction kernels built by hand, checked against a
// double-precision loop with a K-scaled tolerance; blocking edges, transposed and batched
// (broadcast) operands, epilogues, thread-count independence, declines, the disk-cache load.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <tuple>

#include "../../jit/xbyak/gemm.hpp"
#include "kfuse/half.hpp"
#include "kfuse/options.hpp"
#include "kfuse/profile.hpp"
#include "test_xbyak_util.hpp"

namespace kfuse::xbt {
namespace {

// The options run_check compiles with: the GEMM knobs Options::gemm_path and gemm_blocking,
// which a kernel keeps from its compile.
Options g_knobs;
void set_gemm_path(int path) { g_knobs.gemm_path = path == 0 ? "auto" : path == 1 ? "packed" : "direct"; }
void set_gemm_blocking(int64_t mc, int64_t kc, int64_t nc) { g_knobs.gemm_blocking = {mc, kc, nc}; }

struct Spec {
  std::vector<int64_t> batch;  // batch extents
  int64_t M = 1, N = 1, K = 1;
  bool ta = false, tb = false;         // A stored K x M, B stored N x K
  std::vector<bool> a_bcast, b_bcast;  // per batch dim: the operand does not move along it
  // epilogue: out = f(acc, bias_n[n], bias_m[m], res[m, n]) (inputs 2, 3, 4 when used)
  std::function<ExprRef(ExprRef acc, const std::vector<ExprRef>& in)> epi;
  int extra_outputs = 0;  // more stores of epi2(acc) (temp C path)
};

int64_t prod(const std::vector<int64_t>& v) {
  int64_t p = 1;
  for (auto x : v) p *= x;
  return p;
}

// Element strides of an operand's batch dims (0 where broadcast), its matrix of `mat` elements.
std::vector<int64_t> batch_strides(const Spec& s, const std::vector<bool>& bc, int64_t mat) {
  std::vector<int64_t> st(s.batch.size(), 0);
  int64_t run = mat;
  for (size_t d = s.batch.size(); d-- > 0;) {
    bool b = d < bc.size() && bc[d];
    st[d] = b ? 0 : run;
    if (!b) run *= s.batch[d];
  }
  return st;
}
int64_t operand_size(const Spec& s, const std::vector<bool>& bc, int64_t mat) {
  int64_t n = mat;
  for (size_t d = 0; d < s.batch.size(); ++d)
    if (!(d < bc.size() && bc[d])) n *= s.batch[d];
  return n;
}

// Builds the contraction. Buffers: in0 A, in1 B, in2 bias_n [N], in3 bias_m [M], in4 res [batch, M, N], outputs.
Kernel build(const Spec& s) {
  const int nb = static_cast<int>(s.batch.size());
  Kernel k = skeleton("k_gemm", ir::KernelKind::Contraction, 5, 1 + s.extra_outputs);
  for (int d = 0; d < nb; ++d) {
    k.params.push_back({"outer" + std::to_string(d), s.batch[d]});
    k.outer.push_back(param(d));
  }
  k.params.push_back({"outer" + std::to_string(nb), s.M});
  k.params.push_back({"outer" + std::to_string(nb + 1), s.N});
  const ExprRef M = param(nb), N = param(nb + 1);
  k.outer.push_back(M);
  k.outer.push_back(N);
  k.reduce.push_back(s.K);
  const ExprRef m = var(Space::Outer, nb), n = var(Space::Outer, nb + 1), kk = var(Space::Reduce, 0);
  auto boff = [&](const std::vector<int64_t>& st) {
    ExprRef e = iconst(0);
    for (int d = 0; d < nb; ++d) e = iadd(e, imul(var(Space::Outer, d), iconst(st[d])));
    return e;
  };
  const auto sa = batch_strides(s, s.a_bcast, s.M * s.K), sb = batch_strides(s, s.b_bcast, s.K * s.N),
             sc = batch_strides(s, {}, s.M * s.N);
  ExprRef ai = iadd(boff(sa), s.ta ? iadd(imul(kk, M), m) : iadd(imul(m, iconst(s.K)), kk));
  ExprRef bi = iadd(boff(sb), s.tb ? iadd(imul(n, iconst(s.K)), kk) : iadd(imul(kk, N), n));
  ExprRef ci = iadd(boff(sc), iadd(imul(m, N), n));
  k.accs.push_back({AccKind::Sum, DType::F32, bin(Op::Mul, load(0, DType::F32, ai), load(1, DType::F32, bi))});
  k.phases.push_back(reduce_phase({0}));
  Phase once;
  ExprRef a = acc(0, DType::F32);
  std::vector<ExprRef> in = {load(2, DType::F32, n), load(3, DType::F32, m), load(4, DType::F32, ci)};
  once.stores.push_back({5, ci, s.epi ? s.epi(a, in) : a});
  for (int o = 0; o < s.extra_outputs; ++o) once.stores.push_back({6 + o, ci, bin(Op::Mul, a, f32c(o + 2.0))});
  k.phases.push_back(once);
  return k;
}

struct Data {
  std::vector<std::vector<float>> bufs;
};

Data make_data(const Spec& s, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  auto fill = [&](int64_t n) {
    std::vector<float> v(static_cast<size_t>(std::max<int64_t>(n, 1)));
    for (auto& x : v) x = u(rng);
    return v;
  };
  const int64_t c = prod(s.batch) * s.M * s.N;
  Data d;
  d.bufs.push_back(fill(operand_size(s, s.a_bcast, s.M * s.K)));
  d.bufs.push_back(fill(operand_size(s, s.b_bcast, s.K * s.N)));
  d.bufs.push_back(fill(s.N));
  d.bufs.push_back(fill(s.M));
  d.bufs.push_back(fill(c));
  for (int o = 0; o <= s.extra_outputs; ++o) d.bufs.push_back(std::vector<float>(std::max<int64_t>(c, 1), NAN));
  return d;
}

// Runs on xbyak (the GEMM path must take it) and checks against fp64 loops; returns output 0.
std::vector<float> run_check(const Spec& s, Isa isa, uint64_t seed = 1,
                             double (*epi64)(double, double, double, double) = nullptr) {
  Kernel k = build(s);
  auto be = detail::xb::make_backend(isa);
  auto cr = be->compile(k, g_knobs);
  EXPECT_TRUE(cr.kernel) << cr.declined;
  if (!cr.kernel) return {};
  Data d = make_data(s, seed);
  LaunchArgs args;
  for (auto& b : d.bufs) args.buffers.push_back(b.data());
  args.params = k.param_values();
  cr.kernel->run(args);
  const int nb = static_cast<int>(s.batch.size());
  const auto sa = batch_strides(s, s.a_bcast, s.M * s.K), sb = batch_strides(s, s.b_bcast, s.K * s.N);
  const int64_t nbat = prod(s.batch);
  int bad = 0;
  for (int64_t bi = 0; bi < nbat; ++bi) {
    int64_t ao = 0, bo = 0, rest = bi;
    for (int dd = nb; dd-- > 0;) {
      ao += rest % s.batch[dd] * sa[dd];
      bo += rest % s.batch[dd] * sb[dd];
      rest /= s.batch[dd];
    }
    for (int64_t m = 0; m < s.M; ++m)
      for (int64_t n = 0; n < s.N; ++n) {
        double acc = 0, mag = 0;
        for (int64_t kk = 0; kk < s.K; ++kk) {
          double a = d.bufs[0][ao + (s.ta ? kk * s.M + m : m * s.K + kk)];
          double b = d.bufs[1][bo + (s.tb ? n * s.K + kk : kk * s.N + n)];
          acc += a * b;
          mag += std::fabs(a * b);
        }
        const int64_t ci = (bi * s.M + m) * s.N + n;
        double want = epi64 ? epi64(acc, d.bufs[2][n], d.bufs[3][m], d.bufs[4][ci]) : acc;
        double tol = 4.0 * (s.K + 2) * 6e-8 * (mag + std::fabs(want) + 1.0);
        float got = d.bufs[5][ci];
        if (!(std::fabs(got - want) <= tol) && bad++ < 5)
          ADD_FAILURE() << detail::xb::isa_name(isa) << " M=" << s.M << " N=" << s.N << " K=" << s.K << " ta=" << s.ta
                        << " tb=" << s.tb << " batch " << bi << " [" << m << "," << n << "]: got " << got << " want "
                        << want;
        for (int o = 0; o < s.extra_outputs; ++o) {
          float g2 = d.bufs[6 + o][ci];
          if (!(std::fabs(g2 - acc * (o + 2.0)) <= tol * (o + 2)) && bad++ < 5)
            ADD_FAILURE() << "extra output " << o << " [" << m << "," << n << "]: got " << g2 << " want "
                          << acc * (o + 2);
        }
      }
  }
  return d.bufs[5];
}

// The same Spec on two GEMM paths (set_gemm_path's numbers), each checked against fp64 by
// run_check: bit for bit the same output.
void expect_paths_agree(const Spec& s, Isa isa, int path, int other, uint64_t seed, const std::string& what,
                        double (*epi64)(double, double, double, double) = nullptr) {
  set_gemm_path(path);
  auto one = run_check(s, isa, seed, epi64);
  set_gemm_path(other);
  auto two = run_check(s, isa, seed, epi64);
  ASSERT_EQ(one.size(), two.size()) << what;
  EXPECT_EQ(0, std::memcmp(one.data(), two.data(), one.size() * 4)) << what;
}

class XbyakGemm : public ::testing::Test {
 protected:
  void TearDown() override { g_knobs = Options{}; }
};

TEST_F(XbyakGemm, RandomSizesAllPaths) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> sz(1, 67);
  for (Isa isa : isas())
    for (int path = 0; path < 3; ++path) {
      set_gemm_path(path);
      for (int i = 0; i < 8; ++i) {
        Spec s;
        s.M = sz(rng), s.N = sz(rng), s.K = sz(rng);
        s.ta = i & 1, s.tb = (i >> 1) & 1;
        run_check(s, isa, i);
      }
      for (auto [M, N, K] : {std::tuple{1, 1, 1}, {1, 67, 33}, {67, 1, 5}, {2, 40, 17}, {1, 200, 300}}) {
        Spec s;
        s.M = M, s.N = N, s.K = K;
        run_check(s, isa);
      }
    }
}

TEST_F(XbyakGemm, BlockEdges) {
  for (Isa isa : isas()) {
    const auto& u = detail::xb::gemm_ukrs(isa);
    set_gemm_path(1);
    set_gemm_blocking(2 * u.mr, 16, 2 * u.nr);  // small blocks: every loop of the nest runs several times
    for (int64_t dm : {-1, 0, 1})
      for (int64_t dn : {-1, 0, 1})
        for (int64_t K : {15, 16, 17, 33, 3}) {
          Spec s;
          s.M = 2 * u.mr + dm + 3 * u.mr, s.N = 2 * u.nr + dn + u.nr, s.K = K;
          s.tb = dn == 1;
          run_check(s, isa);
        }
    set_gemm_blocking(0, 0, 0);
    const auto blk = detail::xb::gemm_blocking(u);
    Spec s;  // default blocking, K one past a KC block
    s.M = u.mr + 1, s.N = u.nr - 1, s.K = blk.kc + 1;
    run_check(s, isa);
    // Forced blocks below one micro-tile are one tile (rounded down to 0 they stepped by 0
    // forever: AVX-512's 14-row tile hung the knob test's mc = 8).
    set_gemm_blocking(1, 16, 1);
    Spec t;
    t.M = 2 * u.mr + 3, t.N = 2 * u.nr + 5, t.K = 40;
    run_check(t, isa);
    set_gemm_blocking(0, 0, 0);
  }
}

// The default blocking derived from this CPU's caches: whole micro-tiles, and a B panel of at
// most 4 MiB whatever L3 the OS reports (a VM reports the whole socket's: 480 MiB had made a
// 16 MiB panel, 15% slower). A problem wider than one panel crosses NC blocks with it.
TEST_F(XbyakGemm, DefaultBlockingFitsTheCaches) {
  for (Isa isa : isas()) {
    const auto& u = detail::xb::gemm_ukrs(isa);
    const auto blk = detail::xb::gemm_blocking(u);
    EXPECT_EQ(blk.mc % u.mr, 0);
    EXPECT_EQ(blk.nc % u.nr, 0);
    EXPECT_GE(blk.nc, u.nr);
    EXPECT_LE(blk.kc * blk.nc * 4, int64_t{4} << 20) << "kc " << blk.kc << " nc " << blk.nc;
    set_gemm_path(1);
    Spec s;
    s.M = u.mr + 2, s.N = blk.nc + u.nr + 3, s.K = 7;
    run_check(s, isa);
  }
}

TEST_F(XbyakGemm, ZeroSizes) {
  for (Isa isa : isas())
    for (auto [M, N] : {std::pair{0, 5}, {5, 0}, {0, 0}}) {
      Spec s;
      s.M = M, s.N = N, s.K = 4;
      run_check(s, isa);
    }
}

TEST_F(XbyakGemm, BatchedWithBroadcast) {
  for (Isa isa : isas())
    for (int path = 0; path < 3; ++path) {
      set_gemm_path(path);
      Spec s;
      s.batch = {2, 3};
      s.M = 9, s.N = 21, s.K = 13;
      s.a_bcast = {true, false};
      s.b_bcast = {false, true};
      s.tb = path == 2;
      run_check(s, isa);
      s.a_bcast = {true, true};  // a weight shared by every batch
      s.b_bcast = {};
      run_check(s, isa);
    }
}

// Batch dims over which B does not move fold into M (a linear layer over [batch, seq, K]
// activations): one product over all rows, whose tasks may start and end inside a batch. The
// epilogue's per-row input (bias by m) must still see m within its batch, and the per-(b, m, n)
// residual its batch; the results must equal the packed path's on 1 and 2 threads, bit for bit.
// Cases: rows split over two threads across batch boundaries; x @ W^T whose folded rows reach the
// swapped form (3 x 8 rows, W past half of L2) and the GEMV (2 x 2 rows).
TEST_F(XbyakGemm, BatchesFoldIntoM) {
  const Options saved = options();
  const int64_t l2 = probe::cache_sizes().l2;
  auto epi = [](ExprRef a, const std::vector<ExprRef>& in) { return bin(Op::Add, bin(Op::Add, a, in[1]), in[2]); };
  auto epi64 = [](double a, double, double bm, double r) { return a + bm + r; };
  for (Isa isa : isas()) {
    const int64_t kc = detail::xb::gemm_blocking(detail::xb::gemm_ukrs(isa)).kc;
    struct Case {
      std::vector<int64_t> batch;
      int64_t M, N, K;
      bool tb;
    };
    for (const Case& c : {Case{{4, 3}, 7, 40, 100, false}, Case{{3}, 8, l2 / 2 / (4 * (kc + 6)) + 9, kc + 6, true},
                          Case{{2}, 2, 300, 37, true}}) {
      Spec s;
      s.batch = c.batch, s.M = c.M, s.N = c.N, s.K = c.K, s.tb = c.tb;
      s.b_bcast.assign(c.batch.size(), true);
      s.epi = epi;
      std::vector<float> outs[2][2];
      for (int path : {0, 1})
        for (int threads : {1, 2}) {
          Options o = saved;
          o.num_threads = threads;
          set_options(o);
          set_gemm_path(path);
          outs[path][threads - 1] = run_check(s, isa, 13, epi64);
        }
      set_options(saved);
      for (const auto* other : {&outs[0][1], &outs[1][0], &outs[1][1]}) {
        ASSERT_EQ(outs[0][0].size(), other->size());
        EXPECT_EQ(0, std::memcmp(outs[0][0].data(), other->data(), other->size() * 4))
            << detail::xb::isa_name(isa) << " " << c.M << "x" << c.N << "x" << c.K << (c.tb ? " B^T" : "");
      }
    }
  }
}

TEST_F(XbyakGemm, BitwiseIndependentOfThreads) {
  const Options saved = options();
  for (Isa isa : isas())
    for (int path = 0; path < 3; ++path) {
      set_gemm_path(path);
      set_gemm_blocking(path == 1 ? 24 : 0, path == 1 ? 32 : 0, path == 1 ? 64 : 0);
      Spec s;
      s.M = 150, s.N = 140, s.K = 70;  // above the one-thread threshold
      Options o = saved;
      o.num_threads = 1;
      set_options(o);
      auto one = run_check(s, isa, 3);
      o.num_threads = 2;
      set_options(o);
      auto two = run_check(s, isa, 3);
      ASSERT_EQ(one.size(), two.size());
      EXPECT_EQ(0, std::memcmp(one.data(), two.data(), one.size() * 4)) << "path " << path;
    }
  set_options(saved);
}

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
          Options o = saved;
          o.num_threads = threads;
          set_options(o);
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
// of MR), K past KC and in several chunks of A^T (kb < K: the whole C^T kept until the last
// chunk), a transposed (strided) x, a batch with W broadcast, an epilogue, 1 and 2 threads.
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
      s.N = (l2 / 2 / (4 * s.K) + u.mr) / u.mr * u.mr + 5;  // W past half of L2, N % MR != 0
      if (c.batched) s.batch = {2}, s.b_bcast = {true};
      double (*epi64)(double, double, double, double) = nullptr;
      if (c.epi) {
        s.epi = [](ExprRef a, const std::vector<ExprRef>& in) { return un(Op::Relu, bin(Op::Add, a, in[0])); };
        epi64 = [](double a, double bn, double, double) { return std::max(a + bn, 0.0); };
      }
      for (int threads : {1, 2}) {
        Options o = saved;
        o.num_threads = threads;
        set_options(o);
        expect_paths_agree(s, isa, 0, 1, 11,
                           std::to_string(s.M) + "x" + std::to_string(s.N) + "x" + std::to_string(s.K) +
                               (c.ta ? " A^T" : "") + " threads " + std::to_string(threads),
                           epi64);
      }
    }
  }
  set_options(saved);
}

// Both paths run every whole vector of columns in place, edge tiles included (the smaller direct
// kernels, Ukrs::direct_tile, and the smaller packed kernels over full-size slivers,
// Ukrs::packed_tile): each tile shape of rows 1..MR x vectors 1..NR/W, plus a part-vector tail
// (through a scratch tile), direct against packed bit for bit (the same FMA chain per element).
// On the last k block the epilogue runs per group of columns while they are in L2 (about a
// quarter of L2 over mc rows): tall blocks make the groups narrow, so a block of N has several,
// and the scratch-C form (two outputs) too.
TEST_F(XbyakGemm, EpilogueFollowsColumnGroups) {
  for (Isa isa : isas()) {
    const auto& u = detail::xb::gemm_ukrs(isa);
    set_gemm_path(1);
    // The epilogue runs per row of tiles across a group of columns on the last k block: a full
    // block of kc, its blocks of N holding two groups and a part of one, rows ending in a part tile.
    const int64_t kc = 512, ew = detail::xb::gemm_epilogue_columns(u, kc);
    set_gemm_blocking(2 * u.mr, kc, 2 * ew + u.nr);
    Spec s;
    s.M = 3 * u.mr + 5, s.N = 2 * (2 * ew + u.nr) + 6, s.K = 2 * kc;
    s.epi = [](ExprRef a, const std::vector<ExprRef>& in) {
      return un(Op::Relu, bin(Op::Add, bin(Op::Mul, a, f32c(0.5)), in[0]));
    };
    run_check(s, isa, 4, [](double a, double bn, double, double) { return std::max(0.5 * a + bn, 0.0); });
    s.epi = nullptr;
    s.extra_outputs = 1;
    run_check(s, isa, 5);
  }
}

// Part-vector tails (1 and w - 1 columns, masked kernels on both paths) also across KC blocks,
// where the tail kernels add to C (K = 40 over blocks of 16).
TEST_F(XbyakGemm, DirectEdgeTilesMatchPackedBitwise) {
  for (Isa isa : isas()) {
    const auto& u = detail::xb::gemm_ukrs(isa);
    for (int64_t K : {13, 40}) {
      if (K == 40) set_gemm_blocking(4 * u.mr, 16, 4 * u.nr);
      for (int64_t M = 1; M <= u.mr + 1; ++M)
        for (int64_t N : {int64_t{u.w}, int64_t{u.nr}, int64_t{u.nr + u.w}, int64_t{u.nr + u.w + 3}, int64_t{u.nr + 1},
                          int64_t{2 * u.nr - 1}}) {
          Spec s;
          s.M = M + (M == u.mr + 1 ? u.mr : 0), s.N = N, s.K = K;
          expect_paths_agree(s, isa, 2, 1, 5,
                             std::string(detail::xb::isa_name(isa)) + " " + std::to_string(s.M) + "x" +
                                 std::to_string(s.N) + "x" + std::to_string(K));
        }
      set_gemm_blocking(0, 0, 0);
    }
  }
}

TEST_F(XbyakGemm, Epilogues) {
  for (Isa isa : isas())
    for (int path = 0; path < 2; ++path) {
      set_gemm_path(path);
      Spec s;
      s.M = 37, s.N = 29, s.K = 19;
      s.batch = {2};  // the in-place epilogue reads the accumulator through the output's batch index
      // alpha * acc + bias[n], relu
      s.epi = [](ExprRef a, const std::vector<ExprRef>& in) {
        return un(Op::Relu, bin(Op::Add, bin(Op::Mul, a, f32c(0.5)), in[0]));
      };
      run_check(s, isa, 1, [](double a, double bn, double, double) { return std::max(0.5 * a + bn, 0.0); });
      // bias[m] and a residual indexed by (m, n), tanh
      s.epi = [](ExprRef a, const std::vector<ExprRef>& in) {
        return bin(Op::Add, un(Op::Tanh, bin(Op::Add, a, in[1])), in[2]);
      };
      run_check(s, isa, 2, [](double a, double, double bm, double r) { return std::tanh(a + bm) + r; });
      // two outputs: C goes through a scratch block
      s.epi = nullptr;
      s.extra_outputs = 1;
      s.batch = {3};
      run_check(s, isa, 3);
    }
}

TEST_F(XbyakGemm, EpilogueOnLargeBlocks) {
  for (Isa isa : isas()) {
    const auto& u = detail::xb::gemm_ukrs(isa);
    set_gemm_path(1);
    set_gemm_blocking(2 * u.mr, 8, 2 * u.nr);  // the epilogue runs per finished MC x NC block
    Spec s;
    s.M = 5 * u.mr + 1, s.N = 3 * u.nr + 3, s.K = 20;
    s.epi = [](ExprRef a, const std::vector<ExprRef>& in) { return bin(Op::Sub, a, in[2]); };
    run_check(s, isa, 4, [](double a, double, double, double r) { return a - r; });
    s.epi = nullptr;
    s.extra_outputs = 2;
    run_check(s, isa, 5);
  }
}

TEST_F(XbyakGemm, Declines) {
  for (Isa isa : isas()) {
    auto be = detail::xb::make_backend(isa);
    Spec s;
    s.M = 4, s.N = 4, s.K = 4;
    Kernel k = build(s);
    Kernel f64 = k;
    f64.accs[0].dtype = DType::F64;
    auto r = be->compile(f64);
    EXPECT_FALSE(r.kernel);
    EXPECT_NE(r.declined.find("f64 accumulator"), std::string::npos) << r.declined;
    Kernel pro = k;  // a prologue op the pointwise emitter lacks
    const auto& v = pro.accs[0].value;
    pro.accs[0].value = bin(Op::Mul, un(Op::Sin, v->args[0]), v->args[1]);
    r = be->compile(pro);
    EXPECT_FALSE(r.kernel);
    EXPECT_NE(r.declined.find("contraction prologue of A"), std::string::npos) << r.declined;
    Kernel two = k;  // an operand expression reading two buffers
    two.accs[0].value = bin(Op::Mul, bin(Op::Add, v->args[0], load(2, DType::F32, var(Space::Reduce, 0))), v->args[1]);
    r = be->compile(two);
    EXPECT_FALSE(r.kernel);
    EXPECT_NE(r.declined.find("reads two loads"), std::string::npos) << r.declined;
    Kernel pw = k;  // an epilogue op the pointwise emitter lacks
    pw.phases[1].stores[0].value = un(Op::Sin, acc(0, DType::F32));
    r = be->compile(pw);
    EXPECT_FALSE(r.kernel);
    EXPECT_NE(r.declined.find("contraction epilogue"), std::string::npos) << r.declined;
  }
}

// Stores x (exact in dt) as element i of a buffer of dtype dt.
void store_as(DType dt, uint8_t* p, int64_t i, double x) {
  auto put = [&](auto v) { std::memcpy(p + i * sizeof v, &v, sizeof v); };
  switch (dt) {
    case DType::F32: put(static_cast<float>(x)); break;
    case DType::F64: put(x); break;
    case DType::F16: put(float_to_f16_bits(static_cast<float>(x))); break;
    case DType::BF16: put(float_to_bf16_bits(static_cast<float>(x))); break;
    case DType::I8: put(static_cast<int8_t>(x)); break;
    case DType::U8: put(static_cast<uint8_t>(x)); break;
    case DType::I32: put(static_cast<int32_t>(x)); break;
    case DType::I64: put(static_cast<int64_t>(x)); break;
    default: FAIL() << "dtype";
  }
}

// Operands stored in other dtypes (a Cast to f32 of the load) and element-wise prologues are
// applied while packing: pa(A) x pb(B) against fp64 loops over the same converted values, on the
// packed path whatever the size (GEMV and small shapes included), 1 and 2 threads bitwise equal.
TEST_F(XbyakGemm, ProloguesAndStoredDtypes) {
  struct Case {
    DType a_dt, b_dt;
    bool ta, tb;
    int64_t M, N, K;
  };
  const Case cases[] = {
      {DType::F16, DType::F32, false, false, 1, 33, 20},   {DType::F32, DType::BF16, false, false, 37, 29, 70},
      {DType::I8, DType::U8, true, true, 13, 40, 9},       {DType::F64, DType::I32, false, true, 50, 3, 300},
      {DType::F32, DType::F16, false, true, 130, 150, 66}, {DType::F32, DType::F32, true, false, 2, 17, 5},
      {DType::F16, DType::F16, false, false, 20, 40, 33},  {DType::BF16, DType::I64, false, false, 14, 9, 17}};
  const Options saved = options();
  for (Isa isa : isas())
    for (const Case& c : cases) {
      // A through -(x) * 0.5 + 1 (a non-zero f(0): padded rows must not leak), B through relu.
      Spec s;
      s.M = c.M, s.N = c.N, s.K = c.K, s.ta = c.ta, s.tb = c.tb;
      Kernel k = build(s);
      k.buffers[0].dtype = c.a_dt;
      k.buffers[1].dtype = c.b_dt;
      const auto& v = k.accs[0].value;
      auto as_f32 = [](const ExprRef& l, DType dt) {
        ExprRef t = load(l->index, dt, l->args[0]);
        return dt == DType::F32 ? t : op(Op::Cast, DType::F32, {t});
      };
      ExprRef a = bin(Op::Add, bin(Op::Mul, un(Op::Neg, as_f32(v->args[0], c.a_dt)), f32c(0.5)), f32c(1.0));
      ExprRef b = un(Op::Relu, as_f32(v->args[1], c.b_dt));
      k.accs[0].value = bin(Op::Mul, a, b);
      auto be = detail::xb::make_backend(isa);
      auto cr = be->compile(k);
      ASSERT_TRUE(cr.kernel) << cr.declined;
      // always packed: KFUSE_TUNE must not time a "direct" form that would run packed anyway
      EXPECT_EQ(cr.kernel->variants(), (std::vector<std::string>{"by size", "packed"}));
      // Inputs: small integers and halves (exact in every dtype here), stored in each dtype.
      std::mt19937 rng(11);
      std::uniform_int_distribution<int> u(-6, 6);
      auto fill = [&](DType dt, int64_t n, std::vector<double>& vals) {
        std::vector<uint8_t> bytes(static_cast<size_t>(n) * dtype_size(dt) + 8);
        vals.resize(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) {
          double x = u(rng) * (is_float(dt) ? 0.5 : 1.0);
          if (dt == DType::U8) x = std::fabs(x);
          vals[i] = x;
          store_as(dt, bytes.data(), i, x);
        }
        return bytes;
      };
      std::vector<double> av, bv;
      auto abuf = fill(c.a_dt, c.M * c.K, av), bbuf = fill(c.b_dt, c.K * c.N, bv);
      std::vector<float> unused(static_cast<size_t>(std::max<int64_t>(c.M, c.N) * c.M * c.N + 1), 0.0f);
      std::vector<float> outs[2];
      for (int threads : {1, 2}) {
        Options o = saved;
        o.num_threads = threads;
        set_options(o);
        std::vector<float>& out = outs[threads - 1];
        out.assign(static_cast<size_t>(c.M * c.N), NAN);
        LaunchArgs args;
        args.buffers = {abuf.data(), bbuf.data(), unused.data(), unused.data(), unused.data(), out.data()};
        args.params = k.param_values();
        cr.kernel->run(args);
      }
      set_options(saved);
      EXPECT_EQ(0, std::memcmp(outs[0].data(), outs[1].data(), outs[0].size() * 4));
      int bad = 0;
      for (int64_t m = 0; m < c.M; ++m)
        for (int64_t n = 0; n < c.N; ++n) {
          double want = 0;
          for (int64_t kk = 0; kk < c.K; ++kk) {
            double x = av[c.ta ? kk * c.M + m : m * c.K + kk], y = bv[c.tb ? n * c.K + kk : kk * c.N + n];
            want += (-x * 0.5 + 1.0) * std::max(y, 0.0);
          }
          const float got = outs[0][m * c.N + n];
          if (!(std::fabs(got - want) <= 1e-6 * (std::fabs(want) + c.K)) && bad++ < 5)
            ADD_FAILURE() << dtype_name(c.a_dt) << " x " << dtype_name(c.b_dt) << " [" << m << "," << n << "]: got "
                          << got << " want " << want;
        }
    }
}

// f16 and bf16 weights (A in f32, no prologue) are read in place by the GEMV paths, converted as
// they are loaded, for up to 2 x kGemvRows rows (AVX-512: up to 64, in two sweeps past 32; AVX2 in two sweeps past 4;
// along K, a linear layer's W^T, whatever the size): bit for bit what the packed path gives (the same f32 values, the
// same chains), on 1 and 2 threads, and within the K-scaled tolerance of fp64 over the converted values. Edges: K past
// one KC block and not a multiple of 16, N with a part-vector tail, one and several rows. With more rows and W past
// half of L2 the swapped form (gemm_swapped.cpp) converts W a tile of rows at a time: the same bits too (N not a
// multiple of MR, rows padded to whole vectors). Along K, every transposed-GEMV form the CPU runs (gemv_t_forms: up
// to 12 rows in one sweep in the AVX-512VL form).
TEST_F(XbyakGemm, HalfWeightsReadInPlaceByTheGemvPaths) {
  const Options saved = options();
  for (Isa isa : isas()) {
    const int64_t kc = detail::xb::gemm_blocking(detail::xb::gemm_ukrs(isa)).kc;
    const int64_t mr = detail::xb::gemm_ukrs(isa).mr, l2 = probe::cache_sizes().l2;
    auto past_half_l2 = [&](int64_t K) { return (l2 / 2 / (2 * K) + mr) / mr * mr + 3; };
    for (DType b_dt : {DType::F16, DType::BF16})
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
        k.accs[0].value = bin(Op::Mul, v->args[0], op(Op::Cast, DType::F32, {load(1, b_dt, v->args[1]->args[0])}));
        std::mt19937 rng(static_cast<uint32_t>(M * 131 + N * 7 + K));
        std::uniform_real_distribution<float> u(-1, 1);
        std::vector<float> a(static_cast<size_t>(M * K));
        for (auto& x : a) x = u(rng);
        std::vector<uint16_t> b(static_cast<size_t>(K * N));
        std::vector<double> bv(b.size());
        for (size_t i = 0; i < b.size(); ++i) {
          b[i] = b_dt == DType::F16 ? float_to_f16_bits(u(rng)) : float_to_bf16_bits(u(rng));
          bv[i] = b_dt == DType::F16 ? f16_bits_to_float(b[i]) : bf16_bits_to_float(b[i]);
        }
        std::vector<float> unused(static_cast<size_t>(M * N + N + M + 1), 0.0f), outs[2][2];
        const std::string what = std::string(detail::xb::isa_name(isa)) + " " + dtype_name(b_dt) + " " +
                                 std::to_string(M) + "x" + std::to_string(N) + "x" + std::to_string(K) +
                                 (tb ? " B^T" : "");
        for (auto form : gemv_t_forms(tb)) {
          detail::xb::set_gemv_t_form(form);
          for (int path : {0, 1}) {
            set_gemm_path(path);
            auto cr = detail::xb::make_backend(isa)->compile(k, g_knobs);
            ASSERT_TRUE(cr.kernel) << cr.declined;
            for (int threads : {1, 2}) {
              Options o = saved;
              o.num_threads = threads;
              set_options(o);
              std::vector<float>& out = outs[path][threads - 1];
              out.assign(static_cast<size_t>(M * N), NAN);
              LaunchArgs args;
              args.buffers = {a.data(), b.data(), unused.data(), unused.data(), unused.data(), out.data()};
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
}

TEST_F(XbyakGemm, LoadsFromItsBinary) {
  for (Isa isa : isas()) {
    auto be = detail::xb::make_backend(isa);
    Spec s;
    s.M = 7, s.N = 9, s.K = 5;
    s.epi = [](ExprRef a, const std::vector<ExprRef>& in) { return bin(Op::Add, a, in[0]); };
    Kernel k = build(s);
    auto cr = be->compile(k);
    ASSERT_TRUE(cr.kernel) << cr.declined;
    auto ld = be->load(k, cr.kernel->binary);
    ASSERT_TRUE(ld);
    Data d1 = make_data(s, 9), d2 = make_data(s, 9);
    LaunchArgs a1, a2;
    for (auto& b : d1.bufs) a1.buffers.push_back(b.data());
    for (auto& b : d2.bufs) a2.buffers.push_back(b.data());
    a1.params = a2.params = k.param_values();
    cr.kernel->run(a1);
    ld->run(a2);
    EXPECT_EQ(0, std::memcmp(d1.bufs[5].data(), d2.bufs[5].data(), d1.bufs[5].size() * 4));
  }
}

}  // namespace
}  // namespace kfuse::xbt
