// kfuse_compare --profile / --check-profile: the profiler's roofline fraction of a kfuse row beside
// the bench's own, from one definition (kfuse::Explanation::bound_seconds: the plan's bytes per
// kernel, FLOPs from the kernel IR, kfuse::Roof with the roofs the bench measured for the row).
#pragma once
#include <string>

#include "harness.hpp"
#include "kfuse/profile.hpp"
#include "workload.hpp"

namespace kbench {

struct ProfileAgreement {
  // Accounting per call: the bench's (explain()) and the profiler's (its launches), which must be
  // equal, not just close.
  double bench_bound = 0, prof_bound = 0;  // seconds
  double bench_bytes = 0, prof_bytes = 0;
  double bench_flops = 0, prof_flops = 0;
  double launches = 0;  // per call
  // Timing: the same bound over a median time per call.
  double bench_frac = 0;              // over the bench's median (record + eval)
  double bench_frac_interleaved = 0;  // the same, timed the bench's way in batches alternating with
                                      // the profiled ones (what the timing check compares with)
  double prof_call_frac = 0;          // over the median time per call of batches run under the profiler
  double prof_kernel_frac = 0;        // over the median kernel time per evaluation (the profiler's roof%)
  double host_share = 0;              // 1 - kernel time / call time (both medians, under the profiler)
  bool timed = false;                 // the call was long enough to compare the fractions
  std::string problem;                // empty when they agree
  bool accounting = true;             // bytes, FLOPs and bound equal
  int retries = 0;                    // timed again this often (kfuse_compare: a disagreement may be load)
  std::string text() const;
};

/// Calls shorter than this have only their accounting compared: the profiler's own cost (about
/// 1 us per launch) and the shared host's noise are then a large part of the call.
constexpr double kMinComparedCall = 50e-6;

/// Runs the row's calls again under kfuse::profile with `roofs` as the profiler's machine model,
/// and compares. `bench_bound`: the bound per call the row's fraction used. Agreement: accounting
/// equal (1e-9 relative) and, for calls of kMinComparedCall or longer, the per-call fraction under
/// the profiler within `tolerance` (relative; medians) of the bench's, both timed in alternating
/// batches.
ProfileAgreement profile_agreement(Impl& im, const Workload& w, const kfuse::CpuRoofs& roofs, const Row& r,
                                   double bench_bound, double tolerance);

}  // namespace kbench
