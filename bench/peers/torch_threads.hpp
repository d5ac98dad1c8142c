// LibTorch's thread count for a peer row. Debian's LibTorch runs its GEMMs in the system BLAS,
// OpenBLAS built with its own pthread pool, which at::set_num_threads does not size: without the
// second call a "1 thread" torch mm ran on as many threads as the last OpenBLAS row had set (the
// torch rows of a --threads 1,2 run came out swapped).
#pragma once

#include <ATen/Parallel.h>

extern "C" void openblas_set_num_threads(int) __attribute__((weak));

namespace kbench {

inline void set_torch_threads(int threads) {
  at::set_num_threads(threads);
  if (openblas_set_num_threads) openblas_set_num_threads(threads);
}

}  // namespace kbench
