// The persistent CPU thread pool shared by the CPU backends.
//
// parallel_for splits [0, n) into contiguous chunks of at least `grain` items over
// KFUSE_NUM_THREADS threads (the caller is one of them). Work below one grain runs on the
// calling thread (no thread start-up for tiny tensors). Only one parallel region runs at a time:
// if the pool is busy (another user thread is evaluating), or the caller is a pool worker, the
// region runs inline on the caller, so user threads calling eval() never oversubscribe cores.
// Chunking never affects results: kernels keep a fixed reduction order per outer point.
#pragma once
#include <cstdint>
#include <functional>

namespace kfuse::detail {

void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t begin, int64_t end)>& fn);
/// Threads parallel_for uses now: Options::num_threads (KFUSE_NUM_THREADS, set_options) or, when
/// 0, every hardware thread.
int num_threads();

}  // namespace kfuse::detail
