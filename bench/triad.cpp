#include "triad.hpp"

#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <thread>
#include <vector>

namespace kbench {
namespace {

struct FreeDeleter {
  void operator()(float* p) const { std::free(p); }
};
using Buf = std::unique_ptr<float[], FreeDeleter>;

Buf alloc(int64_t n) {
  size_t bytes = (static_cast<size_t>(n) * sizeof(float) + 63) / 64 * 64;
  return Buf(static_cast<float*>(std::aligned_alloc(64, bytes)));
}

// a[lo, hi) = b + s * c with streaming stores; lo and hi are multiples of 16.
void triad_range(float* a, const float* b, const float* c, float s, int64_t lo, int64_t hi) {
#if defined(__AVX512F__)
  const __m512 vs = _mm512_set1_ps(s);
  for (int64_t i = lo; i < hi; i += 16)
    _mm512_stream_ps(a + i, _mm512_fmadd_ps(vs, _mm512_load_ps(c + i), _mm512_load_ps(b + i)));
#elif defined(__AVX__)
  const __m256 vs = _mm256_set1_ps(s);
  for (int64_t i = lo; i < hi; i += 8)
    _mm256_stream_ps(a + i, _mm256_add_ps(_mm256_load_ps(b + i), _mm256_mul_ps(vs, _mm256_load_ps(c + i))));
#else
  const __m128 vs = _mm_set1_ps(s);
  for (int64_t i = lo; i < hi; i += 4)
    _mm_stream_ps(a + i, _mm_add_ps(_mm_load_ps(b + i), _mm_mul_ps(vs, _mm_load_ps(c + i))));
#endif
  _mm_sfence();
}

struct Arrays {
  int64_t n = 0;
  Buf a, b, c;
};

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

}  // namespace

const char* triad_kind() {
#if defined(__AVX512F__)
  return "avx512 non-temporal stores";
#elif defined(__AVX__)
  return "avx non-temporal stores";
#else
  return "sse non-temporal stores";
#endif
}

double triad_gbps(int threads, int64_t n, int passes) {
  Arrays& A = arrays(n);
  threads = std::max(1, threads);
  const int64_t N = A.n;
  const int64_t chunk = (N / threads + 63) / 64 * 64;
  double best = 1e30;
  for (int p = 0; p < passes; ++p) {
    float s = 0.5f + 0.001f * static_cast<float>(p);
    auto t0 = std::chrono::steady_clock::now();
    if (threads == 1) {
      triad_range(A.a.get(), A.b.get(), A.c.get(), s, 0, N);
    } else {
      std::vector<std::thread> ts;
      for (int t = 0; t < threads; ++t) {
        int64_t lo = std::min<int64_t>(N, t * chunk), hi = std::min<int64_t>(N, lo + chunk);
        if (t == threads - 1) hi = N;
        ts.emplace_back(triad_range, A.a.get(), A.b.get(), A.c.get(), s, lo, hi);
      }
      for (auto& th : ts) th.join();
    }
    double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::min(best, dt);
  }
  volatile float sink = A.a[N / 2];
  (void)sink;
  return 12.0 * static_cast<double>(N) / best / 1e9;
}

}  // namespace kbench
