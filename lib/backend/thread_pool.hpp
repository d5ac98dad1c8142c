// The persistent CPU thread pool shared by the CPU backends: part of the backend contract (a
// backend sees only the kernel IR and lib/backend/), so backends get their threads here.
//
// parallel_for splits [0, n) into contiguous chunks of at least `grain` items (a few per thread)
// and runs them on up to KFUSE_NUM_THREADS threads. The calling thread takes part: every thread,
// the caller included, claims the next unclaimed chunk from a shared counter until none is left,
// and a worker that wakes after the last chunk was claimed does not join at all. So a worker that
// is slow to start (a descheduled vCPU) costs at most the chunk it holds, never the whole region:
// more threads are never much slower than one. Work below one grain runs on the calling thread
// (no thread start-up for tiny tensors). Only one parallel region runs at a time: if the pool is
// busy (another user thread is evaluating), or the caller is a pool worker, the region runs inline
// on the caller, so user threads calling eval() never oversubscribe cores.
// Chunking never affects results: kernels keep a fixed reduction order per outer point, so which
// thread ran which chunk does not matter.
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>

namespace kfuse::detail {

void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t begin, int64_t end)>& fn);
/// Threads parallel_for uses now: Options::num_threads (KFUSE_NUM_THREADS, set_options) or, when
/// 0, every hardware thread.
int num_threads();

/// While alive, parallel_for on this thread runs inline and num_threads() is 1: a kernel that
/// measured selection (KFUSE_TUNE, lib/runtime/tune.cpp) found faster on one thread runs so.
class SerialScope {
 public:
  SerialScope();
  ~SerialScope();
  SerialScope(const SerialScope&) = delete;
  SerialScope& operator=(const SerialScope&) = delete;

 private:
  bool prev_;
};

/// Test hook: every pool worker sleeps this long after it wakes for a region and before it tries
/// to join it (zero, the default, turns it off). Simulates a worker whose CPU is descheduled.
void set_pool_worker_delay(std::chrono::microseconds delay);

}  // namespace kfuse::detail
