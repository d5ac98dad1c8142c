// kfuse_gemm: the GEMM of one backend (a hand-built contraction kernel run through the backend
// directly, no planning or recording) against OpenBLAS (cblas_sgemm / cblas_dgemm) and oneDNN
// (dnnl_sgemm; it has no f64 GEMM) where installed, with the FMA peak of this machine for the
// dtype measured in the same run (kfuse::probe, lib/prof/probes.cpp: the probe of
// kfuse::machine()). The xbyak backend runs f32; LLVM runs every dtype (f64 is the use: the
// contraction of f64, i32 and i64 matmuls, and of f32 ones whose epilogue xbyak declines).
//
//   kfuse_gemm [--threads 1,2] [--min-time 0.3] [--filter 1024] [--backend xbyak|llvm] [--dtype f32|f64]
//              [--alternate] [--shapes 16x4096x4096t,64x64x64]
// --shapes: M x K x N (a trailing "t": B stored N x K) instead of the standard list.
// --alternate (with OpenBLAS): kfuse and OpenBLAS are also timed call for call in turn, and the
// median of the per-pair speed ratios is printed ("kfuse/openblas"): on a shared host whose
// speed moves 10-20% between minutes, the ratio of two separate medians moves with it.
// Prints per shape and thread count: the median ms over the runs, GFLOP/s and % of the measured
// peak for that count at the median, and the spread (fastest and slowest run, % of the median).
// "^T": B stored N x K (x @ w.T, the layout of a linear layer's weight).
// The kernels compile with the process's options, so KFUSE_GEMM_PATH (auto | packed | direct) and
// KFUSE_GEMM_BLOCKING (mc,kc,nc) apply: two runs compare a path or a blocking against the default.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "../jit/xbyak/xbyak_backend.hpp"
#include "backend/backend.hpp"
#include "ir/kernel.hpp"
#include "kfuse/options.hpp"

#include "kfuse/profile.hpp"

#ifdef KFUSE_BENCH_HAVE_OPENBLAS
extern "C" {
void cblas_sgemm(int order, int ta, int tb, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
                 int ldb, float beta, float* C, int ldc);
void cblas_dgemm(int order, int ta, int tb, int M, int N, int K, double alpha, const double* A, int lda,
                 const double* B, int ldb, double beta, double* C, int ldc);
void openblas_set_num_threads(int);
}
#endif
#ifdef KFUSE_BENCH_HAVE_DNNL
#include <dnnl.h>
#include <omp.h>
#endif

namespace {

using namespace kfuse;
using namespace kfuse::ir;
using Clock = std::chrono::steady_clock;

// ---- the contraction kernel: C[m, n] = sum_k A[m, k] * B[k, n], row-major (B^T: B[n, k]) ----
Kernel gemm_kernel(int64_t M, int64_t N, int64_t K, bool tb, DType dt) {
  Kernel k;
  k.name = "k_gemm";
  k.kind = ir::KernelKind::Contraction;
  k.buffers = {{"in0", dt, false}, {"in1", dt, false}, {"out0", dt, true}};
  k.params = {{"outer0", M}, {"outer1", N}};
  k.outer = {param(0), param(1)};
  k.reduce = {K};
  const ExprRef m = var(Space::Outer, 0), n = var(Space::Outer, 1), kk = var(Space::Reduce, 0);
  ExprRef a = load(0, dt, iadd(imul(m, iconst(K)), kk));
  ExprRef b = load(1, dt, tb ? iadd(imul(n, iconst(K)), kk) : iadd(imul(kk, param(1)), n));
  k.accs.push_back({AccKind::Sum, dt, op(Op::Mul, dt, {a, b})});
  Phase red;
  red.over_reduce = true;
  red.accs = {0};
  Phase once;
  once.stores.push_back({2, iadd(imul(m, param(1)), n), acc(0, dt)});
  k.phases = {red, once};
  return k;
}

struct Timing {
  double median, fastest, slowest;
};

// Seconds per call: a warm-up call, then at least 11 calls and until min_time has passed.
Timing time_it(const std::function<void()>& f, double min_time) {
  f();
  std::vector<double> t;
  double total = 0;
  while (total < min_time || t.size() < 11) {
    auto t0 = Clock::now();
    f();
    t.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    total += t.back();
  }
  std::sort(t.begin(), t.end());
  return {t[t.size() / 2], t.front(), t.back()};
}

std::vector<int> parse_list(const char* s) {
  std::vector<int> v;
  for (const char* p = s; *p;) {
    v.push_back(std::atoi(p));
    while (*p && *p != ',') ++p;
    if (*p) ++p;
  }
  return v;
}

template <class T>
int run(const std::shared_ptr<detail::Backend>& be, DType dt, const std::vector<int>& threads, double min_time,
        const std::string& filter, bool alternate, const std::string& shape_list) {
  std::printf("%s %s; FMA peak (%s, %s, measured now):", be->name().c_str(), dtype_name(dt), kfuse::probe::fma_kind(),
              dtype_name(dt));
  std::vector<double> peak;
  for (int t : threads) {
    peak.push_back(kfuse::probe::fma_peak_gflops(dt, t));
    std::printf("  %d thread%s %.1f GFLOP/s", t, t > 1 ? "s" : "", peak.back());
  }
  std::printf("\n%-26s %3s %-9s %10s %9s %7s  %s\n", "shape [M,K]x[K,N]", "thr", "impl", "median ms", "GFLOP/s",
              "%peak", "spread (fastest..slowest)");
  struct Shape {
    int64_t M, K, N;
    bool tb = false;
  };
  std::vector<Shape> shapes = {{64, 64, 64},       {256, 256, 256},   {512, 512, 512}, {1024, 1024, 1024},
                               {2048, 2048, 2048}, {1000, 999, 1001}, {1, 4096, 4096}, {512, 1024, 4096, true}};
  if (!shape_list.empty()) {
    shapes.clear();
    for (size_t at = 0; at < shape_list.size();) {
      size_t end = shape_list.find(',', at);
      if (end == std::string::npos) end = shape_list.size();
      const std::string one = shape_list.substr(at, end - at);
      long long m = 0, kk = 0, n = 0;
      if (std::sscanf(one.c_str(), "%lldx%lldx%lld", &m, &kk, &n) != 3 || m < 1 || kk < 1 || n < 1) {
        std::printf("--shapes: \"%s\" is not MxKxN (a trailing t: B stored N x K)\n", one.c_str());
        return 2;
      }
      shapes.push_back({m, kk, n, one.back() == 't'});
      at = end + 1;
    }
  }
  std::mt19937 rng(1);
  std::uniform_real_distribution<T> u(-1, 1);
  [[maybe_unused]] constexpr bool f32 = std::is_same_v<T, float>;
  for (const Shape& s : shapes) {
    char name[64];
    if (s.tb)
      std::snprintf(name, sizeof name, "[%lld,%lld]x[%lld,%lld]^T", (long long)s.M, (long long)s.K, (long long)s.N,
                    (long long)s.K);
    else
      std::snprintf(name, sizeof name, "[%lld,%lld]x[%lld,%lld]", (long long)s.M, (long long)s.K, (long long)s.K,
                    (long long)s.N);
    if (!filter.empty() && std::string(name).find(filter) == std::string::npos) continue;
    std::vector<T> A(s.M * s.K), B(s.K * s.N), C(s.M * s.N), R(s.M * s.N);
    for (auto& x : A) x = u(rng);
    for (auto& x : B) x = u(rng);
    Kernel k = gemm_kernel(s.M, s.N, s.K, s.tb, dt);
    auto cr = be->compile(k, options());
    if (!cr.kernel) {
      std::printf("%s: declined: %s\n", name, cr.declined.c_str());
      continue;
    }
    std::printf("%-26s compile %.3f ms\n", name, cr.kernel->compile_ms);
    LaunchArgs args;
    args.buffers = {A.data(), B.data(), C.data()};
    args.params = k.param_values();
    const double flops = 2.0 * s.M * s.N * s.K;
    for (size_t ti = 0; ti < threads.size(); ++ti) {
      const int t = threads[ti];
      auto row = [&](const char* impl, Timing tm) {
        double gf = flops / tm.median * 1e-9;
        std::printf("%-26s %3d %-9s %10.3f %9.1f %6.0f%%  %+.0f%%..%+.0f%%\n", name, t, impl, tm.median * 1e3, gf,
                    100 * gf / peak[ti], 100 * (tm.fastest / tm.median - 1), 100 * (tm.slowest / tm.median - 1));
        std::fflush(stdout);
      };
      Options o = options();
      o.num_threads = t;
      set_options(o);
      row("kfuse", time_it([&] { cr.kernel->run(args); }, min_time));
#ifdef KFUSE_BENCH_HAVE_OPENBLAS
      openblas_set_num_threads(t);
      auto blas = [&] {
        if constexpr (f32)
          cblas_sgemm(101, 111, s.tb ? 112 : 111, s.M, s.N, s.K, 1.0f, A.data(), s.K, B.data(), s.tb ? s.K : s.N, 0.0f,
                      R.data(), s.N);
        else
          cblas_dgemm(101, 111, s.tb ? 112 : 111, s.M, s.N, s.K, 1.0, A.data(), s.K, B.data(), s.tb ? s.K : s.N, 0.0,
                      R.data(), s.N);
      };
      row("openblas", time_it(blas, min_time));
      if (alternate) {
        std::vector<double> ratio;  // OpenBLAS time / kfuse time of each pair: kfuse's relative speed
        for (double total = 0; total < 2 * min_time || ratio.size() < 11;) {
          auto t0 = Clock::now();
          cr.kernel->run(args);
          auto t1 = Clock::now();
          blas();
          auto t2 = Clock::now();
          const double a = std::chrono::duration<double>(t1 - t0).count(),
                       b = std::chrono::duration<double>(t2 - t1).count();
          ratio.push_back(b / a);
          total += a + b;
        }
        std::sort(ratio.begin(), ratio.end());
        const size_t n = ratio.size();
        std::printf("%-26s %3d kfuse/openblas speed, %zu pairs in turn: median %.3f (quartiles %.3f..%.3f)\n", name, t,
                    n, ratio[n / 2], ratio[n / 4], ratio[n * 3 / 4]);
      }
#endif
#ifdef KFUSE_BENCH_HAVE_DNNL
      if constexpr (f32) {
        omp_set_num_threads(t);
        row("onednn", time_it(
                          [&] {
                            dnnl_sgemm('N', s.tb ? 'T' : 'N', s.M, s.N, s.K, 1.0f, A.data(), s.K, B.data(),
                                       s.tb ? s.K : s.N, 0.0f, R.data(), s.N);
                          },
                          min_time));
      }
#endif
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> threads = {1, 2};
  double min_time = 0.3;
  std::string filter, backend = "xbyak", dtype = "f32";
  bool alternate = false;
  std::string shape_list;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--threads" && i + 1 < argc) threads = parse_list(argv[++i]);
    else if (a == "--min-time" && i + 1 < argc) min_time = std::atof(argv[++i]);
    else if (a == "--filter" && i + 1 < argc) filter = argv[++i];
    else if (a == "--backend" && i + 1 < argc) backend = argv[++i];
    else if (a == "--dtype" && i + 1 < argc) dtype = argv[++i];
    else if (a == "--alternate") alternate = true;
    else if (a == "--shapes" && i + 1 < argc) shape_list = argv[++i];
  }
  if (dtype != "f32" && dtype != "f64") {
    std::printf("--dtype f32 or f64\n");
    return 2;
  }
  std::shared_ptr<detail::Backend> be;
  if (backend == "xbyak") {
    using detail::xb::Isa;
    // KFUSE_ISA=avx2 (Options::isa) runs the AVX2 kernels on an AVX-512 machine.
    const bool zmm = detail::xb::cpu_supports(Isa::Avx512) && options().isa != "avx2";
    be = detail::xb::make_backend(zmm ? Isa::Avx512 : Isa::Avx2);
  } else if (backend == "llvm") {
    be = detail::find_backend("llvm", options());
  } else {
    std::printf("--backend xbyak or llvm\n");
    return 2;
  }
  if (!be) {
    std::printf("backend %s unavailable (not built in, or xbyak without AVX2/FMA)\n", backend.c_str());
    return 0;
  }
  if (dtype == "f64") return run<double>(be, DType::F64, threads, min_time, filter, alternate, shape_list);
  return run<float>(be, DType::F32, threads, min_time, filter, alternate, shape_list);
}
