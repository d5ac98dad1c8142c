#include "thread_pool.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "kfuse/options.hpp"

namespace kfuse::detail {

namespace {

thread_local bool t_in_pool = false;
thread_local bool t_serial = false;         // SerialScope
std::atomic<int64_t> g_worker_delay_us{0};  // set_pool_worker_delay

// A region's work: `fn` over chunks of [0, n), claimed one at a time from `next`. The first
// exception any thread's chunk throws is kept for the caller; the other chunks still run.
struct Region {
  int64_t n, chunk, chunks;
  const std::function<void(int64_t, int64_t)>* fn;
  std::atomic<int64_t> next{0};
  std::mutex err_mu;
  std::exception_ptr err;

  void drain() {
    for (int64_t c; (c = next.fetch_add(1, std::memory_order_relaxed)) < chunks;) {
      const int64_t b = c * chunk;
      try {
        (*fn)(b, std::min(n, b + chunk));
      } catch (...) {
        std::lock_guard<std::mutex> lk(err_mu);
        if (!err) err = std::current_exception();
      }
    }
  }
};

class Pool {
 public:
  explicit Pool(int threads) {
    for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { loop(); });
  }
  ~Pool() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_.store(true);
      generation_.fetch_add(1);
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
  }
  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // Runs `r` on the caller and on up to `helpers` workers that join while work is left; returns
  // when every chunk is done. False (nothing run) if another region is running.
  bool try_run(Region& r, int helpers) {
    std::unique_lock<std::mutex> busy(region_mu_, std::try_to_lock);
    if (!busy.owns_lock()) return false;
    seats_.store(helpers, std::memory_order_relaxed);
    region_.store(&r);
    generation_.fetch_add(1);
    // A worker past its spin sleeps on cv_; one still spinning sees the generation by itself.
    if (sleepers_.load() > 0) {
      { std::lock_guard<std::mutex> lk(mu_); }
      cv_.notify_all();
    }
    t_in_pool = true;
    r.drain();
    t_in_pool = false;
    close_and_wait();
    if (r.err) std::rethrow_exception(r.err);
    return true;
  }

 private:
  // Waking a sleeping thread costs tens of microseconds on a busy VM, more than a small kernel
  // takes: workers spin briefly before blocking, as OpenMP runtimes do. The spin is bounded, so
  // idle pools do not burn a core. The caller never waits for a worker that has not joined:
  // closing the region (region_ = null) turns late workers away.
  //
  // The hand-off takes no lock while both sides spin: a worker joins with one increment of
  // active_ and one read of region_, the caller closes with a store to region_ and reads of
  // active_ (all sequentially consistent: either the caller sees the worker's increment and
  // waits for it, or the worker sees the region closed). The mutex and the condition variables
  // serve only threads that went to sleep. Intel Xeon (2 vCPUs, model 207), parallel_for of two
  // chunks of 2000 TSC cycles, medians of 100k regions: 4320-4480 TSC cycles a region when both
  // sides took mu_, 3850-3920 now; matmul [64,64]x[64,64] on 2 threads (record + eval, medians
  // of 30k) 3.57-3.83 -> 3.39-3.51 us. (The worker still starts its chunk about 1100 cycles into
  // the region: the lines it must fetch from the caller's core, not the protocol.)
  static constexpr int kSpin = 1 << 15;

  // The caller spins too before it sleeps: a worker still in its last chunk usually finishes
  // within microseconds, and a wake-up through done_cv_ would cost as much as a small kernel
  // (every GEMM on several threads closes two regions per block of columns).
  void close_and_wait() {
    region_.store(nullptr);
    for (int i = 0; i < kSpin && active_.load() != 0; ++i) __builtin_ia32_pause();
    if (active_.load() == 0) return;
    std::unique_lock<std::mutex> lk(mu_);
    caller_sleeps_.store(true);
    done_cv_.wait(lk, [this] { return active_.load() == 0; });
    caller_sleeps_.store(false);
  }

  void loop() {
    t_in_pool = true;
    uint64_t seen = 0;
    for (;;) {
      for (int i = 0; i < kSpin && generation_.load(std::memory_order_acquire) == seen; ++i) __builtin_ia32_pause();
      if (generation_.load() == seen) {
        std::unique_lock<std::mutex> lk(mu_);
        sleepers_.fetch_add(1);
        cv_.wait(lk, [&] { return stop_.load() || generation_.load() != seen; });
        sleepers_.fetch_sub(1);
      }
      seen = generation_.load();
      if (stop_.load()) return;
      if (int64_t us = g_worker_delay_us.load(std::memory_order_relaxed))
        std::this_thread::sleep_for(std::chrono::microseconds(us));
      active_.fetch_add(1);
      Region* r = region_.load();  // closed already (null), or the region open now
      if (r && seats_.fetch_sub(1, std::memory_order_relaxed) > 0) r->drain();  // (catches what a chunk throws)
      if (active_.fetch_sub(1) == 1 && caller_sleeps_.load()) {
        std::lock_guard<std::mutex> lk(mu_);
        done_cv_.notify_one();
      }
    }
  }

  std::vector<std::thread> workers_;
  std::mutex mu_, region_mu_;  // mu_: sleeping and waking only
  std::condition_variable cv_, done_cv_;
  std::atomic<bool> stop_{false};
  // Each on its own line: the caller writes region_ and generation_ once per region, the workers
  // only read them while they spin; active_ and seats_ change as workers join.
  alignas(64) std::atomic<Region*> region_{nullptr};  // the open region, null once its caller closed it
  std::atomic<uint64_t> generation_{0};
  alignas(64) std::atomic<int> active_{0};  // workers that may touch the open region
  alignas(64) std::atomic<int> seats_{0};   // workers that may still join it (num_threads - 1 at most)
  alignas(64) std::atomic<int> sleepers_{0};
  std::atomic<bool> caller_sleeps_{false};
};

int hardware_threads() {
  unsigned h = std::thread::hardware_concurrency();
  return h ? static_cast<int>(h) : 1;
}

Pool& pool() {
  // Sized once for the larger of the hardware and the first requested count; parallel_for uses
  // as many of its threads as options() asks for at each call (set_options can change it).
  // Leaked: worker threads must not be joined during static destruction.
  static Pool* p = new Pool(std::max(hardware_threads(), options().num_threads));
  return *p;
}

// Chunks per thread: enough that a late or slow thread leaves little for the others to wait on,
// few enough that claiming (one atomic add) stays negligible next to a chunk of >= grain items.
constexpr int64_t kChunksPerThread = 4;

}  // namespace

SerialScope::SerialScope() : prev_(t_serial) { t_serial = true; }
SerialScope::~SerialScope() { t_serial = prev_; }

int num_threads() {
  if (t_serial) return 1;
  int o = options().num_threads;
  // One thread asked for: no pool, so a process that starts no thread of its own stays single
  // threaded, and its reference counts (every node's shared_ptr) stay plain increments.
  if (o == 1) return 1;
  return o > 0 ? std::min(o, pool().size()) : pool().size();
}

void set_pool_worker_delay(std::chrono::microseconds delay) {
  g_worker_delay_us.store(delay.count(), std::memory_order_relaxed);
}

void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  const int threads = num_threads();
  if (threads <= 1 || n <= grain || t_in_pool) {
    fn(0, n);
    return;
  }
  Region r;
  r.n = n;
  r.chunk = std::max(grain, (n + threads * kChunksPerThread - 1) / (threads * kChunksPerThread));
  r.chunks = (n + r.chunk - 1) / r.chunk;
  r.fn = &fn;
  if (!pool().try_run(r, static_cast<int>(std::min<int64_t>(threads, r.chunks)) - 1)) fn(0, n);
}

}  // namespace kfuse::detail
