#include "kernel_cache.hpp"

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <unordered_map>

#include "kfuse/error.hpp"
#include "kfuse/options.hpp"
#include "stats_impl.hpp"

namespace kfuse::detail {

namespace {

struct Slot {
  std::mutex mu;
  std::condition_variable cv;
  bool busy = false;
  std::shared_ptr<CompiledKernel> kernel;
};

std::mutex g_mu;
std::unordered_map<std::string, std::shared_ptr<Slot>>& table() {
  static auto* t = new std::unordered_map<std::string, std::shared_ptr<Slot>>();
  return *t;
}

std::shared_ptr<CompiledKernel> compile_cached(Backend& be, const ir::Kernel& k, const std::string& text,
                                               std::string* declined) {
  std::string key = be.name() + "|" + be.target() + "|" + text;
  std::shared_ptr<Slot> slot;
  {
    std::lock_guard<std::mutex> lk(g_mu);
    auto& s = table()[key];
    if (!s) s = std::make_shared<Slot>();
    slot = s;
  }
  std::unique_lock<std::mutex> lk(slot->mu);
  slot->cv.wait(lk, [&] { return !slot->busy; });
  if (slot->kernel) {
    bump(global_counters().cache_hits);
    return slot->kernel;
  }
  slot->busy = true;
  lk.unlock();
  bump(global_counters().cache_misses);
  CompileResult r;
  auto t0 = std::chrono::steady_clock::now();
  try {
    r = be.compile(k);
  } catch (...) {
    lk.lock();
    slot->busy = false;
    slot->cv.notify_all();
    throw;
  }
  auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
  lk.lock();
  slot->busy = false;
  if (r.kernel) {
    slot->kernel = r.kernel;
    bump(global_counters().kernels_compiled);
    bump(global_counters().compile_ns, static_cast<uint64_t>(ns));
  } else {
    *declined = r.declined;
  }
  slot->cv.notify_all();
  return r.kernel;
}

}  // namespace

CompiledRef compile_kernel(const ir::Kernel& k, Device device) {
  std::string text = ir::print_kernel(k);
  auto chain = backends_for(device);
  std::string why_all;
  for (size_t i = 0; i < chain.size(); ++i) {
    Backend& be = *chain[i];
    std::string declined;
    try {
      if (auto ck = compile_cached(be, k, text, &declined)) {
        if (i > 0) bump(global_counters().fallbacks);
        return {ck, be.name()};
      }
      log("backend", be.name() + " declined " + k.name + ": " + declined);
      why_all += be.name() + ": " + declined + "; ";
    } catch (const BackendError& e) {
      log("backend", be.name() + " failed on " + k.name + ": " + e.what() + "\n" + e.log());
      why_all += be.name() + ": " + e.what() + "; ";
    }
  }
  throw BackendError("no backend for " + device.str() + " could compile kernel " + k.name + ": " + why_all);
}

}  // namespace kfuse::detail
