// A test-and-test-and-set lock for critical sections of a few dozen instructions that run
// millions of times per second (intern-table shards, the host pool's free lists). Uncontended it
// is one atomic exchange and one store, inlined, where std::mutex is two calls into libpthread.
// Waiters spin briefly, then yield, so a holder that was preempted (more threads than cores)
// is not starved. ThreadSanitizer understands the acquire/release pair.
#pragma once
#include <atomic>
#include <thread>

namespace kfuse::detail {

class SpinLock {
 public:
  void lock() {
    if (!flag_.exchange(true, std::memory_order_acquire)) return;
    lock_slow();
  }
  void unlock() { flag_.store(false, std::memory_order_release); }

 private:
  void lock_slow() {
    for (unsigned spins = 0;; ++spins) {
      while (flag_.load(std::memory_order_relaxed)) {
        if (++spins < 64) {
#if defined(__x86_64__) || defined(__i386__)
          __builtin_ia32_pause();
#endif
        } else {
          std::this_thread::yield();
        }
      }
      if (!flag_.exchange(true, std::memory_order_acquire)) return;
    }
  }
  std::atomic<bool> flag_{false};
};

}  // namespace kfuse::detail
