// xbyak GEMM path (jit/xbyak/gemm*.cpp): contraction kernels built by hand, checked against a
// double-precision loop with a K-scaled tolerance; blocking edges, transposed and batched
// (broadcast) operands, epilogues, thread-count independence, declines, the disk-cache load
// (the checker: xbyak_gemm_check.hpp; the GEMV paths: test_xbyak_gemv.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <tuple>

#include "../../jit/xbyak/gemm.hpp"
#include "kfuse/half.hpp"
#include "kfuse/options.hpp"
#include "kfuse/profile.hpp"
#include "xbyak_gemm_check.hpp"

namespace kfuse::xbt {
namespace {

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
          set_threads(saved, threads);
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
      // Above the one-thread threshold: M split in rows (75 + 75, not whole tiles), N split in
      // vectors (48 + 32 columns).
      for (auto [M, N, K] : {std::tuple{150, 140, 70}, std::tuple{20, 80, 200}}) {
        Spec s;
        s.M = M, s.N = N, s.K = K;
        set_threads(saved, 1);
        auto one = run_check(s, isa, 3);
        set_threads(saved, 2);
        auto two = run_check(s, isa, 3);
        ASSERT_EQ(one.size(), two.size());
        EXPECT_EQ(0, std::memcmp(one.data(), two.data(), one.size() * 4)) << "path " << path << " M " << M;
      }
    }
  set_options(saved);
}

// Both paths run every whole vector of columns in place, edge tiles included (the smaller direct
// kernels, Ukrs::direct_tile, and the smaller packed kernels over full-size slivers,
// Ukrs::packed_tile): each tile shape of rows 1..MR x vectors 1..NR/W, plus a part-vector tail
// (the masked tail kernels), direct against packed bit for bit (the same FMA chain per element).
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

// Part-vector tails (1 and w - 1 columns, masked kernels on both paths), also across KC blocks,
// where the tail kernels add to C (K = 40 over blocks of 16): direct and packed, AVX-512's
// narrow tails forced on and off, all give the bits of the first.
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
          std::vector<float> first;
          for (int narrow = 0; narrow < (isa == Isa::Avx512 ? 2 : 1); ++narrow)
            for (int path : {2, 1}) {
              detail::xb::set_narrow_gemm_tails(narrow == 1);
              set_gemm_path(path);
              const auto got = run_check(s, isa, 5);
              if (first.empty()) first = got;
              ASSERT_EQ(got.size(), first.size());
              EXPECT_EQ(0, std::memcmp(got.data(), first.data(), got.size() * 4))
                  << detail::xb::isa_name(isa) << " " << s.M << "x" << s.N << "x" << K << " path " << path << " narrow "
                  << narrow;
            }
        }
      set_gemm_blocking(0, 0, 0);
    }
  }
  detail::xb::set_narrow_gemm_tails(std::nullopt);
}

// Narrow B past L2 (attention's P @ V, N = 64): by size, AVX-512 on AMD reads A in place
// whatever K (gemm_run.cpp, path_for), in tiles of 8 rows where A's rows fall into one L1 set;
// with the packed path's bits. K one block past KC (rows 4 * K bytes apart, spread over the
// sets) and K = 1024 (rows 4 KiB apart: one set).
TEST_F(XbyakGemm, NarrowColumnsPastL2MatchPackedBitwise) {
  using detail::xb::gemm_direct_tile_rows;
  EXPECT_EQ(gemm_direct_tile_rows(4096, 14, 32 << 10), 8);  // all rows in one set of 8 ways
  EXPECT_EQ(gemm_direct_tile_rows(8192, 14, 32 << 10), 8);
  EXPECT_EQ(gemm_direct_tile_rows(-4096, 14, 32 << 10), 8);  // (a flipped A)
  EXPECT_EQ(gemm_direct_tile_rows(4000, 14, 32 << 10), 14);
  EXPECT_EQ(gemm_direct_tile_rows(2048, 14, 32 << 10), 14);  // two sets, 7 rows each
  EXPECT_EQ(gemm_direct_tile_rows(2048, 14, 16 << 10), 8);   // ... of 4 ways: 4 rows each
  EXPECT_EQ(gemm_direct_tile_rows(4096, 6, 32 << 10), 6);    // AVX2's 6-row tile
  EXPECT_EQ(gemm_direct_tile_rows(4096, 14, 4 << 10), 1);    // (one way)
  EXPECT_EQ(gemm_direct_tile_rows(0, 14, 32 << 10), 14);     // a broadcast A: one line
  EXPECT_EQ(gemm_direct_tile_rows(16, 14, 32 << 10), 14);    // rows within lines
  for (Isa isa : isas()) {
    const auto blk = detail::xb::gemm_blocking(detail::xb::gemm_ukrs(isa));
    for (int64_t K : {blk.kc + 37, int64_t{1024}}) {
      Spec s;
      s.M = 400, s.N = 69, s.K = K;  // 0.9-1.8 MB: past half of a 1 MiB L2
      const std::string what = std::string(detail::xb::isa_name(isa)) + " K " + std::to_string(K);
      expect_paths_agree(s, isa, 0, 1, 9, what);
      // The epilogue after each row of tiles on the last k block (by rows), and the temp-C form.
      s.epi = [](ExprRef a, const std::vector<ExprRef>& in) {
        return un(Op::Relu, bin(Op::Add, bin(Op::Mul, a, f32c(0.5)), in[0]));
      };
      expect_paths_agree(s, isa, 0, 1, 10, what + " epilogue",
                         [](double a, double bn, double, double) { return std::max(0.5 * a + bn, 0.0); });
      s.epi = nullptr;
      s.extra_outputs = 1;
      expect_paths_agree(s, isa, 0, 1, 11, what + " two outputs");
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
        set_threads(saved, threads);
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
