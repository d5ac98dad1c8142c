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

class Pool {
 public:
  explicit Pool(int threads) {
    for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { loop(i); });
  }
  ~Pool() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
  }
  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // Runs fn(worker) on every thread (the caller is worker 0); returns when all are done.
  bool try_run(const std::function<void(int)>& fn) {
    std::unique_lock<std::mutex> busy(region_mu_, std::try_to_lock);
    if (!busy.owns_lock()) return false;
    {
      std::lock_guard<std::mutex> lk(mu_);
      job_ = &fn;
      pending_.store(static_cast<int>(workers_.size()), std::memory_order_relaxed);
      generation_.fetch_add(1, std::memory_order_release);
    }
    cv_.notify_all();
    t_in_pool = true;
    try {
      fn(0);
    } catch (...) {
      t_in_pool = false;
      wait_done();
      throw;
    }
    t_in_pool = false;
    wait_done();
    return true;
  }

 private:
  // Waking a sleeping thread costs tens of microseconds on a busy VM, more than a small kernel
  // takes: workers (and the caller, for the join) spin briefly before blocking, as OpenMP
  // runtimes do. The spin is bounded, so idle pools do not burn a core.
  static constexpr int kSpin = 1 << 15;

  void wait_done() {
    for (int i = 0; i < kSpin && pending_.load(std::memory_order_acquire) != 0; ++i) __builtin_ia32_pause();
    std::unique_lock<std::mutex> lk(mu_);
    done_cv_.wait(lk, [this] { return pending_.load(std::memory_order_acquire) == 0; });
    job_ = nullptr;
  }
  void loop(int id) {
    t_in_pool = true;
    uint64_t seen = 0;
    for (;;) {
      for (int i = 0; i < kSpin && generation_.load(std::memory_order_acquire) == seen; ++i) __builtin_ia32_pause();
      const std::function<void(int)>* job;
      {
        std::unique_lock<std::mutex> lk(mu_);
        cv_.wait(lk, [&] { return stop_ || generation_.load(std::memory_order_acquire) != seen; });
        if (stop_) return;
        seen = generation_.load(std::memory_order_acquire);
        job = job_;
      }
      try {
        (*job)(id);
      } catch (...) {
        // Kernels do not throw; a failure here would be a kfuse bug. Never let it escape a
        // worker (that would terminate the process).
      }
      if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        std::lock_guard<std::mutex> lk(mu_);
        done_cv_.notify_one();
      }
    }
  }

  std::vector<std::thread> workers_;
  std::mutex mu_, region_mu_;
  std::condition_variable cv_, done_cv_;
  const std::function<void(int)>* job_ = nullptr;
  std::atomic<int> pending_{0};
  std::atomic<uint64_t> generation_{0};
  bool stop_ = false;
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

}  // namespace

int num_threads() {
  int o = options().num_threads;
  return o > 0 ? std::min(o, pool().size()) : pool().size();
}

void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  int threads = num_threads();
  if (threads <= 1 || n <= grain || t_in_pool) {
    fn(0, n);
    return;
  }
  int64_t chunks = std::min<int64_t>(threads, (n + grain - 1) / grain);
  auto body = [&](int id) {
    if (id >= chunks) return;
    int64_t per = n / chunks, extra = n % chunks;
    int64_t b = id * per + std::min<int64_t>(id, extra);
    int64_t e = b + per + (id < extra ? 1 : 0);
    if (b < e) fn(b, e);
  };
  if (!pool().try_run(body)) fn(0, n);
}

}  // namespace kfuse::detail
