// The xbyak GEMM tests' checker (test_xbyak_gemm.cpp, test_xbyak_gemv.cpp): a contraction kernel
// built by hand from a Spec, run on xbyak (the GEMM path must take it) and checked against fp64
// loops with a K-scaled tolerance; the GEMM knobs it compiles with; path-against-path bitwise checks.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "../../jit/xbyak/gemm.hpp"
#include "kfuse/half.hpp"
#include "kfuse/options.hpp"
#include "test_xbyak_util.hpp"

namespace kfuse::xbt {

// The options run_check compiles with: the GEMM knobs Options::gemm_path and gemm_blocking,
// which a kernel keeps from its compile.
inline Options g_knobs;
inline void set_gemm_path(int path) { g_knobs.gemm_path = path == 0 ? "auto" : path == 1 ? "packed" : "direct"; }
inline void set_gemm_blocking(int64_t mc, int64_t kc, int64_t nc) { g_knobs.gemm_blocking = {mc, kc, nc}; }

struct Spec {
  std::vector<int64_t> batch;  // batch extents
  int64_t M = 1, N = 1, K = 1;
  bool ta = false, tb = false;         // A stored K x M, B stored N x K
  std::vector<bool> a_bcast, b_bcast;  // per batch dim: the operand does not move along it
  // epilogue: out = f(acc, bias_n[n], bias_m[m], res[m, n]) (inputs 2, 3, 4 when used)
  std::function<ExprRef(ExprRef acc, const std::vector<ExprRef>& in)> epi;
  int extra_outputs = 0;  // more stores of epi2(acc) (temp C path)
  // A's and B's storage: f32, bf16 (loads cast to f32), or u8: A u8 times B i8, cast to i32,
  // i32 sums and outputs (the epilogue then sees an i32 accumulator)
  DType ab_dt = DType::F32;
};

// The storage of A and B and the dtype of the sums and outputs of a Spec.
inline DType a_dtype(const Spec& s) { return s.ab_dt; }
inline DType b_dtype(const Spec& s) { return s.ab_dt == DType::U8 ? DType::I8 : s.ab_dt; }
inline DType sum_dtype(const Spec& s) { return s.ab_dt == DType::U8 ? DType::I32 : DType::F32; }

inline int64_t prod(const std::vector<int64_t>& v) {
  int64_t p = 1;
  for (auto x : v) p *= x;
  return p;
}

// Element strides of an operand's batch dims (0 where broadcast), its matrix of `mat` elements.
inline std::vector<int64_t> batch_strides(const Spec& s, const std::vector<bool>& bc, int64_t mat) {
  std::vector<int64_t> st(s.batch.size(), 0);
  int64_t run = mat;
  for (size_t d = s.batch.size(); d-- > 0;) {
    bool b = d < bc.size() && bc[d];
    st[d] = b ? 0 : run;
    if (!b) run *= s.batch[d];
  }
  return st;
}
inline int64_t operand_size(const Spec& s, const std::vector<bool>& bc, int64_t mat) {
  int64_t n = mat;
  for (size_t d = 0; d < s.batch.size(); ++d)
    if (!(d < bc.size() && bc[d])) n *= s.batch[d];
  return n;
}

// Builds the contraction. Buffers: in0 A, in1 B, in2 bias_n [N], in3 bias_m [M], in4 res [batch, M, N], outputs.
inline Kernel build(const Spec& s) {
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
  const DType st = sum_dtype(s);
  auto operand = [&](int buf, DType dt, const ExprRef& idx) {
    ExprRef l = load(buf, dt, idx);
    return dt == st ? l : op(Op::Cast, st, {l});
  };
  k.buffers[0].dtype = a_dtype(s);
  k.buffers[1].dtype = b_dtype(s);
  for (size_t b = 5; b < k.buffers.size(); ++b) k.buffers[b].dtype = st;
  k.accs.push_back({AccKind::Sum, st, op(Op::Mul, st, {operand(0, a_dtype(s), ai), operand(1, b_dtype(s), bi)})});
  k.phases.push_back(reduce_phase({0}));
  Phase once;
  ExprRef a = acc(0, st);
  std::vector<ExprRef> in = {load(2, DType::F32, n), load(3, DType::F32, m), load(4, DType::F32, ci)};
  once.stores.push_back({5, ci, s.epi ? s.epi(a, in) : a});
  for (int o = 0; o < s.extra_outputs; ++o) once.stores.push_back({6 + o, ci, bin(Op::Mul, a, f32c(o + 2.0))});
  k.phases.push_back(once);
  return k;
}

struct Data {
  std::vector<std::vector<float>> bufs;   // (A and B stored narrower: their values as floats)
  std::vector<std::vector<uint8_t>> raw;  // A and B as stored, when Spec::ab_dt is not f32
};

inline Data make_data(const Spec& s, uint64_t seed) {
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
  if (s.ab_dt == DType::BF16)
    for (int i = 0; i < 2; ++i) {
      auto& st = d.raw.emplace_back();
      for (float& x : d.bufs[static_cast<size_t>(i)]) {
        const uint16_t h = float_to_bf16_bits(x);
        st.insert(st.end(), {static_cast<uint8_t>(h), static_cast<uint8_t>(h >> 8)});
        x = bf16_bits_to_float(h);
      }
    }
  if (s.ab_dt == DType::U8)  // A: u8 across its range, B: i8 across its range (x in [-1, 1))
    for (int i = 0; i < 2; ++i) {
      auto& st = d.raw.emplace_back();
      for (float& x : d.bufs[static_cast<size_t>(i)]) {
        const int v = i == 0 ? static_cast<int>((x + 1) * 127.99f) : static_cast<int>(std::floor(x * 128));
        st.push_back(static_cast<uint8_t>(v));
        x = static_cast<float>(v);
      }
    }
  return d;
}

// Runs on xbyak (the GEMM path must take it) and checks against fp64 loops; returns output 0.
inline std::vector<float> run_check(const Spec& s, Isa isa, uint64_t seed = 1,
                                    double (*epi64)(double, double, double, double) = nullptr) {
  Kernel k = build(s);
  auto be = detail::xb::make_backend(isa);
  auto cr = be->compile(k, g_knobs);
  EXPECT_TRUE(cr.kernel) << cr.declined;
  if (!cr.kernel) return {};
  Data d = make_data(s, seed);
  LaunchArgs args;
  for (auto& b : d.bufs) args.buffers.push_back(b.data());
  for (size_t i = 0; i < d.raw.size(); ++i) args.buffers[i] = d.raw[i].data();
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
        double got = d.bufs[5][ci];
        if (sum_dtype(s) == DType::I32) {  // exact (the sums fit: K * 255 * 128 < 2^31)
          int32_t i;
          std::memcpy(&i, &d.bufs[5][ci], 4);
          got = i, tol = 0;
        }
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

// Rows of an f32 W [N, K] that take it past half of L2 (the swapped form's threshold), N not a
// multiple of the microkernel's MR (so its row tiles have an edge).
inline int64_t swapped_w_rows(const detail::xb::Ukrs& u, int64_t l2, int64_t K) {
  return (l2 / 2 / (4 * K) + u.mr) / u.mr * u.mr + 5;
}

// The options `base` with `threads` pool threads (tests comparing 1 and 2 threads).
inline void set_threads(const Options& base, int threads) {
  Options o = base;
  o.num_threads = threads;
  set_options(o);
}

// The same Spec on two GEMM paths (set_gemm_path's numbers), each checked against fp64 by
// run_check: bit for bit the same output.
inline void expect_paths_agree(const Spec& s, Isa isa, int path, int other, uint64_t seed, const std::string& what,
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

}  // namespace kfuse::xbt
