// STREAM-style triad a[i] = b[i] + s * c[i] with non-temporal stores: the memory ceiling every
// row of kfuse_compare is compared against (measured in the same run; see PERFORMANCE.md).
#pragma once
#include <cstdint>

namespace kbench {

/// Best-of-`passes` triad bandwidth in GB/s (12 bytes per element: 2 reads + 1 write, no
/// write-allocate) on `threads` threads over arrays of `n` floats. Arrays are allocated once per
/// size and reused.
double triad_gbps(int threads, int64_t n, int passes);

/// Which store instructions the triad used ("avx512 stream", "avx stream", "sse stream").
const char* triad_kind();

}  // namespace kbench
