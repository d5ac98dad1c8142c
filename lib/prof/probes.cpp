// The machine probes behind kfuse::machine() and the bench's ceilings (one definition of a
// ceiling): streaming memory kernels (read, write, write with streaming stores, copy, triad)
// and independent FMA chains in registers. Moved here from bench/triad.cpp and bench/fma_peak.cpp.
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <thread>
#include <vector>

#include "kfuse/error.hpp"
#include "kfuse/profile.hpp"

namespace kfuse::probe {
namespace {

struct FreeDeleter {
  void operator()(float* p) const { std::free(p); }
};
using Buf = std::unique_ptr<float[], FreeDeleter>;

Buf alloc(int64_t n) {
  size_t bytes = (static_cast<size_t>(n) * sizeof(float) + 63) / 64 * 64;
  return Buf(static_cast<float*>(std::aligned_alloc(64, bytes)));
}

bool has_avx2() {
  static const bool v = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return v;
}

// Every range [lo, hi) below has lo and hi multiples of 16 floats (64 bytes). The AVX2 versions
// carry a target attribute: the library is built for the baseline ISA and dispatches at run time.
__attribute__((target("avx2,fma"))) float read_avx2(const float* b, int64_t lo, int64_t hi) {
  __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
  for (int64_t i = lo; i < hi; i += 16) {
    s0 = _mm256_add_ps(s0, _mm256_load_ps(b + i));
    s1 = _mm256_add_ps(s1, _mm256_load_ps(b + i + 8));
  }
  float t[8];
  _mm256_storeu_ps(t, _mm256_add_ps(s0, s1));
  return t[0] + t[7];
}
__attribute__((target("avx2,fma"))) void write_avx2(float* a, float v, bool nt, int64_t lo, int64_t hi) {
  const __m256 x = _mm256_set1_ps(v);
  if (nt)
    for (int64_t i = lo; i < hi; i += 8) _mm256_stream_ps(a + i, x);
  else
    for (int64_t i = lo; i < hi; i += 8) _mm256_store_ps(a + i, x);
  _mm_sfence();
}
__attribute__((target("avx2,fma"))) void copy_avx2(float* a, const float* b, int64_t lo, int64_t hi) {
  for (int64_t i = lo; i < hi; i += 8) _mm256_stream_ps(a + i, _mm256_load_ps(b + i));
  _mm_sfence();
}
__attribute__((target("avx2,fma"))) void triad_avx2(float* a, const float* b, const float* c, float s, int64_t lo,
                                                    int64_t hi) {
  const __m256 vs = _mm256_set1_ps(s);
  for (int64_t i = lo; i < hi; i += 8)
    _mm256_stream_ps(a + i, _mm256_fmadd_ps(vs, _mm256_load_ps(c + i), _mm256_load_ps(b + i)));
  _mm_sfence();
}

float read_sse(const float* b, int64_t lo, int64_t hi) {
  __m128 s = _mm_setzero_ps();
  for (int64_t i = lo; i < hi; i += 4) s = _mm_add_ps(s, _mm_load_ps(b + i));
  return _mm_cvtss_f32(s);
}
void write_sse(float* a, float v, bool nt, int64_t lo, int64_t hi) {
  const __m128 x = _mm_set1_ps(v);
  if (nt)
    for (int64_t i = lo; i < hi; i += 4) _mm_stream_ps(a + i, x);
  else
    for (int64_t i = lo; i < hi; i += 4) _mm_store_ps(a + i, x);
  _mm_sfence();
}
void copy_sse(float* a, const float* b, int64_t lo, int64_t hi) {
  for (int64_t i = lo; i < hi; i += 4) _mm_stream_ps(a + i, _mm_load_ps(b + i));
  _mm_sfence();
}
void triad_sse(float* a, const float* b, const float* c, float s, int64_t lo, int64_t hi) {
  const __m128 vs = _mm_set1_ps(s);
  for (int64_t i = lo; i < hi; i += 4)
    _mm_stream_ps(a + i, _mm_add_ps(_mm_load_ps(b + i), _mm_mul_ps(vs, _mm_load_ps(c + i))));
  _mm_sfence();
}

struct Arrays {
  int64_t n = 0;
  Buf a, b, c;
};

// Allocated once per size and reused (first touch costs more than a pass).
Arrays& arrays(int64_t n) {
  static Arrays arr;
  n = (n + 63) / 64 * 64;
  if (arr.n != n) {
    arr.a = alloc(n);
    arr.b = alloc(n);
    arr.c = alloc(n);
    arr.n = n;
    for (int64_t i = 0; i < n; ++i) {
      arr.a[i] = 0;
      arr.b[i] = 1.0f + static_cast<float>(i % 7);
      arr.c[i] = 0.5f * static_cast<float>(i % 5);
    }
  }
  return arr;
}

std::atomic<float> g_sink{0};  // keeps the read kernel's sum alive

void run_range(Stream kind, Arrays& A, float s, int64_t lo, int64_t hi) {
  const bool v = has_avx2();
  switch (kind) {
    case Stream::Read:
      g_sink.store(v ? read_avx2(A.b.get(), lo, hi) : read_sse(A.b.get(), lo, hi), std::memory_order_relaxed);
      break;
    case Stream::Write: v ? write_avx2(A.a.get(), s, false, lo, hi) : write_sse(A.a.get(), s, false, lo, hi); break;
    case Stream::WriteNT: v ? write_avx2(A.a.get(), s, true, lo, hi) : write_sse(A.a.get(), s, true, lo, hi); break;
    case Stream::Copy: v ? copy_avx2(A.a.get(), A.b.get(), lo, hi) : copy_sse(A.a.get(), A.b.get(), lo, hi); break;
    case Stream::Triad:
      v ? triad_avx2(A.a.get(), A.b.get(), A.c.get(), s, lo, hi)
        : triad_sse(A.a.get(), A.b.get(), A.c.get(), s, lo, hi);
      break;
  }
}

// Bytes per element each kernel moves (no write-allocate counted: the write-allocate of
// ordinary stores is what makes Write slower than WriteNT).
double bytes_per_element(Stream kind) {
  switch (kind) {
    case Stream::Read: return 4;
    case Stream::Write: return 4;
    case Stream::WriteNT: return 4;
    case Stream::Copy: return 8;
    case Stream::Triad: return 12;
  }
  return 0;
}

// Independent FMA chains in registers, inline asm: compilers keep an array of accumulators in
// memory, which measures store forwarding instead. 12 (AVX2) / 16 (AVX-512) chains cover the
// FMA latency times the FMA ports of current x86 cores. `pd` selects the f64 form.
#define KFUSE_FMA12(OP, R)                                                                                            \
  OP " %%" R "14, %%" R "15, %%" R "0\n " OP " %%" R "14, %%" R "15, %%" R "1\n " OP " %%" R "14, %%" R "15, %%" R    \
     "2\n " OP " %%" R "14, %%" R "15, %%" R "3\n " OP " %%" R "14, %%" R "15, %%" R "4\n " OP " %%" R "14, %%" R     \
     "15, %%" R "5\n " OP " %%" R "14, %%" R "15, %%" R "6\n " OP " %%" R "14, %%" R "15, %%" R "7\n " OP " %%" R     \
     "14, %%" R "15, %%" R "8\n " OP " %%" R "14, %%" R "15, %%" R "9\n " OP " %%" R "14, %%" R "15, %%" R "10\n " OP \
     " %%" R "14, %%" R "15, %%" R "11\n"
#define KFUSE_FMA_CLOBBERS                                                                                            \
  "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm14", "xmm15", \
      "cc"

__attribute__((target("avx2,fma"))) void fma_loop_avx2_ps(int64_t iters) {
  asm volatile("vxorps %%ymm14, %%ymm14, %%ymm14\n vxorps %%ymm15, %%ymm15, %%ymm15\n1:\n" KFUSE_FMA12(
                   "vfmadd231ps", "ymm") "dec %0\n jnz 1b\n vzeroupper\n"
               : "+r"(iters)
               :
               : KFUSE_FMA_CLOBBERS);
}
__attribute__((target("avx2,fma"))) void fma_loop_avx2_pd(int64_t iters) {
  asm volatile("vxorpd %%ymm14, %%ymm14, %%ymm14\n vxorpd %%ymm15, %%ymm15, %%ymm15\n1:\n" KFUSE_FMA12(
                   "vfmadd231pd", "ymm") "dec %0\n jnz 1b\n vzeroupper\n"
               : "+r"(iters)
               :
               : KFUSE_FMA_CLOBBERS);
}

#define KFUSE_FMA16_512(OP)                                                                                   \
  OP " %%zmm30, %%zmm31, %%zmm0\n " OP " %%zmm30, %%zmm31, %%zmm1\n " OP " %%zmm30, %%zmm31, %%zmm2\n " OP    \
     " %%zmm30, %%zmm31, %%zmm3\n " OP " %%zmm30, %%zmm31, %%zmm4\n " OP " %%zmm30, %%zmm31, %%zmm5\n " OP    \
     " %%zmm30, %%zmm31, %%zmm6\n " OP " %%zmm30, %%zmm31, %%zmm7\n " OP " %%zmm30, %%zmm31, %%zmm8\n " OP    \
     " %%zmm30, %%zmm31, %%zmm9\n " OP " %%zmm30, %%zmm31, %%zmm10\n " OP " %%zmm30, %%zmm31, %%zmm11\n " OP  \
     " %%zmm30, %%zmm31, %%zmm12\n " OP " %%zmm30, %%zmm31, %%zmm13\n " OP " %%zmm30, %%zmm31, %%zmm14\n " OP \
     " %%zmm30, %%zmm31, %%zmm15\n"
#define KFUSE_FMA512_CLOBBERS                                                                                         \
  "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", \
      "xmm14", "xmm15", "xmm30", "xmm31", "cc"

// A function NAME(iters) of 16 independent chains of OP on zmm registers, compiled for TARGET.
#define KFUSE_ZMM_CHAINS(NAME, TARGET, OP)                                                                    \
  __attribute__((target(TARGET))) void NAME(int64_t iters) {                                                  \
    asm volatile("vpxord %%zmm30, %%zmm30, %%zmm30\n vpxord %%zmm31, %%zmm31, %%zmm31\n1:\n" KFUSE_FMA16_512( \
                     OP) "dec %0\n jnz 1b\n vzeroupper\n"                                                     \
                 : "+r"(iters)                                                                                \
                 :                                                                                            \
                 : KFUSE_FMA512_CLOBBERS);                                                                    \
  }
KFUSE_ZMM_CHAINS(fma_loop_avx512_ps, "avx512f", "vfmadd231ps")
KFUSE_ZMM_CHAINS(fma_loop_avx512_pd, "avx512f", "vfmadd231pd")
// vdpbf16ps (AVX-512 BF16): each lane adds two bf16 products (4 FLOPs) to its f32 chain.
KFUSE_ZMM_CHAINS(dot_loop_avx512_bf16, "avx512f,avx512bf16", "vdpbf16ps")
// vpdpbusd (AVX-512 VNNI): each lane adds four u8 x i8 products (8 integer ops) to its i32 chain.
KFUSE_ZMM_CHAINS(dot_loop_avx512_u8s8, "avx512f,avx512vnni", "vpdpbusd")

// Runs fn(t) on `threads` threads (the caller's thread is one of them) and returns the seconds.
template <typename Fn>
double timed_on_threads(int threads, Fn fn) {
  auto t0 = std::chrono::steady_clock::now();
  if (threads == 1) {
    fn(0);
  } else {
    std::vector<std::thread> ts;
    for (int t = 1; t < threads; ++t) ts.emplace_back(fn, t);
    fn(0);
    for (auto& th : ts) th.join();
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

bool avx512() {
  static const bool z = __builtin_cpu_supports("avx512f");
  return z;
}

const char* fma_kind() { return avx512() ? "avx512 (zmm)" : has_avx2() ? "avx2 (ymm)" : "none"; }

const char* stream_kind() { return has_avx2() ? "avx non-temporal stores" : "sse non-temporal stores"; }

double stream_gbps(Stream kind, int threads, int64_t n, int passes) {
  Arrays& A = arrays(n);
  threads = std::max(1, threads);
  const int64_t N = A.n;
  const int64_t chunk = (N / threads + 63) / 64 * 64;
  double best = 1e30;
  for (int p = 0; p < std::max(1, passes); ++p) {
    float s = 0.5f + 0.001f * static_cast<float>(p);
    best = std::min(best, timed_on_threads(threads, [&](int t) {
                      int64_t lo = std::min<int64_t>(N, t * chunk), hi = std::min<int64_t>(N, lo + chunk);
                      if (t == threads - 1) hi = N;
                      run_range(kind, A, s, lo, hi);
                    }));
  }
  return bytes_per_element(kind) * static_cast<double>(N) / best / 1e9;
}

double triad_gbps(int threads, int64_t n, int passes) { return stream_gbps(Stream::Triad, threads, n, passes); }

double fma_peak_gflops(DType dtype, int threads, int trials, int64_t iters) {
  if (dtype != DType::F32 && dtype != DType::F64 && dtype != DType::BF16 && dtype != DType::I8)
    throw UserError("probe::fma_peak_gflops: dtype " + std::string(dtype_name(dtype)) +
                    " has no FMA probe; use f32, f64, bf16 or i8");
  if (!has_avx2()) return 0;  // no FMA instructions: the caller's roof stays unknown
  const bool z = avx512();
  const bool f64 = dtype == DType::F64, bf16 = dtype == DType::BF16, i8 = dtype == DType::I8;
  static const bool dot = z && __builtin_cpu_supports("avx512bf16");
  static const bool vnni = z && __builtin_cpu_supports("avx512vnni");
  if ((bf16 && !dot) || (i8 && !vnni)) return 0;
  const double lanes = (z ? 64.0 : 32.0) / (f64 ? 8.0 : 4.0);
  const double flops_per_iter = (z ? 16 : 12) * lanes * (i8 ? 8 : bf16 ? 4 : 2);
  threads = std::max(1, threads);
  double best = 0;
  for (int trial = 0; trial < std::max(1, trials); ++trial) {
    double s = timed_on_threads(threads, [&](int) {
      if (bf16) dot_loop_avx512_bf16(iters);
      else if (i8) dot_loop_avx512_u8s8(iters);
      else if (z) f64 ? fma_loop_avx512_pd(iters) : fma_loop_avx512_ps(iters);
      else f64 ? fma_loop_avx2_pd(iters) : fma_loop_avx2_ps(iters);
    });
    best = std::max(best, flops_per_iter * static_cast<double>(iters) * threads / s * 1e-9);
  }
  return best;
}

}  // namespace kfuse::probe
