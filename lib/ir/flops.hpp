// FLOPs of a kernel launch, counted from its IR: the one place the profiler (and anything that
// reports GFLOP/s of kfuse kernels) gets them from.
#pragma once
#include <cstdint>
#include <vector>

#include "ir/kernel.hpp"

namespace kfuse::ir {

/// Floating-point operations of one launch with run-time parameters `params`. Counting rule:
/// every distinct floating-point Op node of a phase's store values and folded accumulator
/// values counts 1 (a transcendental such as exp counts 1, a Cast counts 0), and every
/// accumulator fold counts 1; over-reduce phases count once per reduce point, the others once
/// per outer point. Index arithmetic, loads and masks count 0. A contraction is 2*M*N*K (an
/// integer one too: its products and sums are its work, as a quantised GEMM's ops are counted).
double kernel_flops(const Kernel& k, const std::vector<int64_t>& params);

}  // namespace kfuse::ir
