// The profiler's recording side, called from the runtime. Off, each hook costs one relaxed load
// of a flag (prof::on()); on, launches are timed and appended under a mutex.
#pragma once
#include <atomic>
#include <chrono>
#include <memory>
#include <string>

#include "kfuse/profile.hpp"

namespace kfuse::detail::prof {

extern std::atomic<bool> g_on;
inline bool on() { return g_on.load(std::memory_order_relaxed); }

inline double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

/// What a program step launches, fixed when the program is built (its shapes are in the key).
struct StepInfo {
  std::string kernel, kind, shape;
  Device dev;
  DType dt = DType::F32;  ///< the dtype of its roof (the first output's)
  double read_bytes = 0, write_bytes = 0, flops = 0;
};

/// Starts recording with roofs from `m` (throws UserError when a recording is running).
void start_recording(const MachineModel& m);
/// Stops it and returns what it recorded.
Profile finish_recording();

/// One launch that took `seconds` from host time `t0` (now_s()), with `threads` CPU threads
/// available to it (its roofs: the count can change between launches of one region).
void record_launch(const StepInfo& info, const std::string& backend, double t0, double seconds, int threads);
/// A compile (or disk load when `disk_load`) of `kernel` by `backend`.
void record_compile(const std::string& kernel, const std::string& backend, bool disk_load, double t0, double seconds);
/// An evaluation (top-level execute()) from t0 to t1.
void record_eval(double t0, double t1);

}  // namespace kfuse::detail::prof
