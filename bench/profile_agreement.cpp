#include "profile_agreement.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <vector>

#include "kfuse_impl.hpp"

namespace kbench {

namespace {

double median_of(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

bool same(double a, double b) { return std::fabs(a - b) <= 1e-9 * std::max(std::fabs(a), std::fabs(b)); }

}  // namespace

std::string ProfileAgreement::text() const {
  char b[320];
  std::snprintf(b, sizeof b,
                "profiler: %.0f%% of roof per call, %.0f%% in kernels (bench %.0f%%, %.0f%% interleaved; host %.0f%% "
                "of the call; %.0f "
                "launch%s, bound %.1f us%s%s)%s%s",
                100 * prof_call_frac, 100 * prof_kernel_frac, 100 * bench_frac, 100 * bench_frac_interleaved,
                100 * host_share, launches, launches == 1 ? "" : "es", prof_bound * 1e6,
                timed ? "" : "; too short to compare fractions",
                retries ? ("; timed " + std::to_string(retries + 1) + " times").c_str() : "",
                problem.empty() ? "" : "; DISAGREE: ", problem.c_str());
  return b;
}

ProfileAgreement profile_agreement(Impl& im, const Workload& w, const kfuse::CpuRoofs& roofs, const Row& r,
                                   double bench_bound, double tolerance) {
  ProfileAgreement a;
  a.bench_bound = bench_bound;
  a.bench_frac = r.st.median > 0 ? bench_bound / r.st.median : 0;
  const kfuse::Explanation ex = kfuse::explain(kfuse_build(w, kfuse_inputs(w)));
  for (const auto& k : ex.kernels) {
    a.bench_bytes += static_cast<double>(k.read_bytes + k.write_bytes);
    a.bench_flops += k.flops;
  }

  // The profiler's model is the row's roofs (the threads field set to 1 so that they serve
  // whatever thread count the profile runs with).
  kfuse::MachineModel m;
  m.cpu = "kfuse_compare roofs";
  m.cpu_roofs = {roofs};
  m.cpu_roofs[0].threads = 1;
  kfuse::set_machine(m);
  // Samples of calls as the bench takes them (record + eval, the row's batch of calls per sample),
  // for a median per call: the times have a long tail (a call in five or so can take twice the
  // median on this shared host), which a mean over many calls would fold in and a median not.
  // Batches alternate between the bench's way (no profiler) and the profiler's, so that the load
  // of a shared host, which drifts over seconds, weighs on both medians alike: the comparison is
  // then of the two ways of measuring, not of two moments of the host.
  const int calls = std::max(1, r.st.batch);
  const int batches = std::clamp(static_cast<int>(0.1 / std::max(r.st.median * calls, 1e-7)), 11, 201);
  std::vector<double> per_call, plain_call;
  std::vector<double> kt;  // kernel time per evaluation
  double bound = 0, bytes = 0, flops = 0, launches = 0, evals = 0;
  for (int b = 0; b < batches; ++b) {
    double t0 = now_s();
    for (int i = 0; i < calls; ++i) im.run();
    plain_call.push_back((now_s() - t0) / calls);
    kfuse::Profile p = kfuse::profile([&] {
      t0 = now_s();
      for (int i = 0; i < calls; ++i) im.run();
      per_call.push_back((now_s() - t0) / calls);
    });
    if (p.evaluations == 0) {
      a.problem = "the profiler recorded no evaluation";
      return a;
    }
    std::map<int64_t, double> kernel_time;
    for (const auto& l : p.launches) {
      kernel_time[l.eval] += l.seconds;
      bound += l.bound_seconds;
      bytes += l.read_bytes + l.write_bytes;
      flops += l.flops;
    }
    for (const auto& [e, s] : kernel_time) kt.push_back(s);
    launches += static_cast<double>(p.launches.size());
    evals += static_cast<double>(p.evaluations);
  }
  a.prof_bound = bound / evals;
  a.prof_bytes = bytes / evals;
  a.prof_flops = flops / evals;
  a.launches = launches / evals;
  const double call = median_of(per_call), kernels = median_of(kt), plain = median_of(plain_call);
  a.prof_call_frac = call > 0 ? a.prof_bound / call : 0;
  a.prof_kernel_frac = kernels > 0 ? a.prof_bound / kernels : 0;
  a.host_share = call > 0 ? std::max(0.0, 1 - kernels / call) : 0;
  a.bench_frac_interleaved = plain > 0 ? bench_bound / plain : 0;

  std::vector<std::string> why;
  if (!same(a.bench_bytes, a.prof_bytes))
    why.push_back("bytes " + std::to_string(a.bench_bytes) + " vs " + std::to_string(a.prof_bytes));
  if (!same(a.bench_flops, a.prof_flops))
    why.push_back("FLOPs " + std::to_string(a.bench_flops) + " vs " + std::to_string(a.prof_flops));
  if (!same(a.bench_bound, a.prof_bound))
    why.push_back("bound " + std::to_string(a.bench_bound * 1e6) + " vs " + std::to_string(a.prof_bound * 1e6) + " us");
  a.accounting = why.empty();
  a.timed = r.st.median >= kMinComparedCall;
  if (a.timed &&
      (a.bench_frac_interleaved <= 0 || std::fabs(a.prof_call_frac / a.bench_frac_interleaved - 1) > tolerance)) {
    char b[96];
    std::snprintf(b, sizeof b, "fractions %.4g vs %.4g (apart more than %.0f%%)", a.prof_call_frac,
                  a.bench_frac_interleaved, 100 * tolerance);
    why.push_back(b);
  }
  for (size_t i = 0; i < why.size(); ++i) a.problem += (i ? ", " : "") + why[i];
  return a;
}

}  // namespace kbench
