// The active profile: launches, compiles and evaluations recorded between Profiler() and stop().
#include "prof/recorder.hpp"

#include <algorithm>
#include <mutex>
#include <thread>

#include "kfuse/error.hpp"
#include "kfuse/options.hpp"

namespace kfuse::detail::prof {

std::atomic<bool> g_on{false};

namespace {

struct Active {
  std::mutex mu;
  bool running = false;
  double t0 = 0;
  Profile p;
};

Active& active() {
  static auto* a = new Active();  // never destroyed: KFUSE_PROFILE's exit handler may run late
  return *a;
}

double us_since(double t0, double t) { return (t - t0) * 1e6; }

}  // namespace

void record_launch(const StepInfo& info, const std::string& backend, double t0, double seconds, int threads) {
  Active& a = active();
  std::lock_guard<std::mutex> lk(a.mu);
  if (!a.running) return;
  KernelLaunch l;
  l.kernel = info.kernel;
  l.kind = info.kind;
  l.backend = backend;
  l.device = info.dev.str();
  l.shape = info.shape;
  l.dtype = dtype_name(info.dt);
  l.eval = a.p.evaluations;  // the evaluation in progress is counted when it ends
  l.start_us = us_since(a.t0, t0);
  l.seconds = seconds;
  l.read_bytes = info.read_bytes;
  l.write_bytes = info.write_bytes;
  l.flops = info.flops;
  l.threads = std::max(1, threads);
  const Roof r = roof_for(a.p.machine, info.dev, info.dt, l.threads);
  l.bound_seconds = r.seconds(l.read_bytes, l.write_bytes, l.flops);  // Explanation::bound_seconds adds the same
  l.bound_by = r.compute_seconds(l.flops) > r.memory_seconds(l.read_bytes, l.write_bytes) ? "compute" : "memory";
  a.p.launches.push_back(std::move(l));
}

void record_compile(const std::string& kernel, const std::string& backend, bool disk_load, double t0, double seconds) {
  Active& a = active();
  std::lock_guard<std::mutex> lk(a.mu);
  if (!a.running) return;
  a.p.compiles.push_back({kernel, backend, disk_load, us_since(a.t0, t0), seconds});
}

void record_eval(double t0, double t1) {
  Active& a = active();
  std::lock_guard<std::mutex> lk(a.mu);
  if (!a.running) return;
  ++a.p.evaluations;
  a.p.eval_seconds += t1 - t0;
}

void start_recording(const MachineModel& m) {
  Active& a = active();
  std::lock_guard<std::mutex> lk(a.mu);
  if (a.running)
    throw UserError(
        "kfuse::Profiler: a profiler is already running in this process (KFUSE_PROFILE or "
        "another Profiler); stop it first: profiles do not nest");
  a.p = Profile{};
  a.p.machine = m;
  int th = options().num_threads;
  a.p.threads = th > 0 ? th : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  a.t0 = now_s();
  a.running = true;
  g_on.store(true, std::memory_order_relaxed);
}

Profile finish_recording() {
  Active& a = active();
  std::lock_guard<std::mutex> lk(a.mu);
  g_on.store(false, std::memory_order_relaxed);
  a.running = false;
  Profile p = std::move(a.p);
  a.p = Profile{};
  p.region_seconds = now_s() - a.t0;
  return p;
}

}  // namespace kfuse::detail::prof

namespace kfuse {

// The model is read (or measured) before the region starts: not inside its time.
Profiler::Profiler() {
  detail::prof::start_recording(machine());
  active_ = true;
}

Profiler::~Profiler() {
  if (active_) detail::prof::finish_recording();
}

Profile Profiler::stop() {
  if (!active_) throw UserError("kfuse::Profiler::stop: this profiler was already stopped");
  active_ = false;
  return detail::prof::finish_recording();
}

Profile profile(const std::function<void()>& fn) {
  Profiler p;
  fn();
  return p.stop();
}

}  // namespace kfuse
