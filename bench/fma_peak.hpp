// The compute ceiling of the GEMM rows: the FMA peak of this machine, measured in the same run
// as the benchmark it is compared with (kfuse_compare, kfuse_gemm), as the triad is the memory
// ceiling of the other rows.
#pragma once
#include <cstdint>

namespace kbench {

/// Whether the probe (and so the xbyak GEMM) uses AVX-512 here; otherwise AVX2.
bool fma_peak_avx512();
/// f32 GFLOP/s of `threads` threads each running independent FMA chains in registers (no memory
/// traffic), best of `trials`; `iters` loop iterations per thread and trial (12 or 16 FMAs each).
double fma_peak_gflops(int threads, int trials = 5, int64_t iters = 10'000'000);
/// "avx2 (ymm)" or "avx512 (zmm)".
const char* fma_peak_kind();

}  // namespace kbench
