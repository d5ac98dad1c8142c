#include "fma_peak.hpp"

#include <algorithm>
#include <chrono>
#include <thread>
#include <vector>

namespace kbench {
namespace {

// Independent FMA chains in registers, inline asm: compilers keep an array of accumulators in
// memory, which measures store forwarding instead. 12 (AVX2) / 16 (AVX-512) chains cover the
// FMA latency times the FMA ports of current x86 cores.
void fma_loop_avx2(int64_t iters) {
  asm volatile(
      "vxorps %%ymm14, %%ymm14, %%ymm14\n vxorps %%ymm15, %%ymm15, %%ymm15\n"
      "1:\n"
      "vfmadd231ps %%ymm14, %%ymm15, %%ymm0\n vfmadd231ps %%ymm14, %%ymm15, %%ymm1\n"
      "vfmadd231ps %%ymm14, %%ymm15, %%ymm2\n vfmadd231ps %%ymm14, %%ymm15, %%ymm3\n"
      "vfmadd231ps %%ymm14, %%ymm15, %%ymm4\n vfmadd231ps %%ymm14, %%ymm15, %%ymm5\n"
      "vfmadd231ps %%ymm14, %%ymm15, %%ymm6\n vfmadd231ps %%ymm14, %%ymm15, %%ymm7\n"
      "vfmadd231ps %%ymm14, %%ymm15, %%ymm8\n vfmadd231ps %%ymm14, %%ymm15, %%ymm9\n"
      "vfmadd231ps %%ymm14, %%ymm15, %%ymm10\n vfmadd231ps %%ymm14, %%ymm15, %%ymm11\n"
      "dec %0\n jnz 1b\n vzeroupper\n"
      : "+r"(iters)
      :
      : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm14",
        "xmm15", "cc");
}
constexpr int kFmaAvx2 = 12;

__attribute__((target("avx512f"))) void fma_loop_avx512(int64_t iters) {
  asm volatile(
      "vpxord %%zmm30, %%zmm30, %%zmm30\n vpxord %%zmm31, %%zmm31, %%zmm31\n"
      "1:\n"
      "vfmadd231ps %%zmm30, %%zmm31, %%zmm0\n vfmadd231ps %%zmm30, %%zmm31, %%zmm1\n"
      "vfmadd231ps %%zmm30, %%zmm31, %%zmm2\n vfmadd231ps %%zmm30, %%zmm31, %%zmm3\n"
      "vfmadd231ps %%zmm30, %%zmm31, %%zmm4\n vfmadd231ps %%zmm30, %%zmm31, %%zmm5\n"
      "vfmadd231ps %%zmm30, %%zmm31, %%zmm6\n vfmadd231ps %%zmm30, %%zmm31, %%zmm7\n"
      "vfmadd231ps %%zmm30, %%zmm31, %%zmm8\n vfmadd231ps %%zmm30, %%zmm31, %%zmm9\n"
      "vfmadd231ps %%zmm30, %%zmm31, %%zmm10\n vfmadd231ps %%zmm30, %%zmm31, %%zmm11\n"
      "vfmadd231ps %%zmm30, %%zmm31, %%zmm12\n vfmadd231ps %%zmm30, %%zmm31, %%zmm13\n"
      "vfmadd231ps %%zmm30, %%zmm31, %%zmm14\n vfmadd231ps %%zmm30, %%zmm31, %%zmm15\n"
      "dec %0\n jnz 1b\n vzeroupper\n"
      : "+r"(iters)
      :
      : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12",
        "xmm13", "xmm14", "xmm15", "xmm30", "xmm31", "cc");
}
constexpr int kFmaAvx512 = 16;

}  // namespace

bool fma_peak_avx512() {
  static const bool z = __builtin_cpu_supports("avx512f");
  return z;
}

const char* fma_peak_kind() { return fma_peak_avx512() ? "avx512 (zmm)" : "avx2 (ymm)"; }

double fma_peak_gflops(int threads, int trials, int64_t iters) {
  const bool z = fma_peak_avx512();
  const double flops_per_iter = z ? kFmaAvx512 * 16 * 2 : kFmaAvx2 * 8 * 2;
  threads = std::max(1, threads);
  double best = 0;
  for (int trial = 0; trial < trials; ++trial) {
    std::vector<std::thread> ts;
    auto t0 = std::chrono::steady_clock::now();
    for (int t = 0; t < threads; ++t) ts.emplace_back([&] { z ? fma_loop_avx512(iters) : fma_loop_avx2(iters); });
    for (auto& t : ts) t.join();
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, flops_per_iter * static_cast<double>(iters) * threads / s * 1e-9);
  }
  return best;
}

}  // namespace kbench
