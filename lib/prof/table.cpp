// Profile::summary() and the text table: launches of one kernel summed, longest total first.
#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include "kfuse/profile.hpp"

namespace kfuse {

double Profile::host_overhead_seconds() const {
  double k = 0, c = 0;
  for (const KernelLaunch& l : launches) k += l.seconds;
  for (const CompileEvent& e : compiles) c += e.seconds;
  return std::max(0.0, eval_seconds - k - c);
}

std::vector<int> Profile::cpu_thread_counts() const {
  std::set<int> counts;
  for (const KernelLaunch& l : launches)
    if (l.device == Device::cpu().str()) counts.insert(l.threads);
  if (counts.empty()) return {threads};
  return {counts.begin(), counts.end()};
}

std::vector<KernelSummary> Profile::summary() const {
  std::map<std::tuple<std::string, std::string, std::string, std::string, int>, KernelSummary> by;
  for (const KernelLaunch& l : launches) {
    KernelSummary& s = by[{l.kernel, l.backend, l.device, l.shape, l.threads}];
    if (s.launches == 0) {
      s.kernel = l.kernel;
      s.kind = l.kind;
      s.backend = l.backend;
      s.device = l.device;
      s.shape = l.shape;
      s.threads = l.threads;
      s.bound_by = l.bound_by;
    }
    ++s.launches;
    s.seconds += l.seconds;
    s.read_bytes += l.read_bytes;
    s.write_bytes += l.write_bytes;
    s.flops += l.flops;
    s.bound_seconds += l.bound_seconds;
  }
  std::vector<KernelSummary> out;
  for (auto& kv : by) out.push_back(kv.second);
  std::stable_sort(out.begin(), out.end(),
                   [](const KernelSummary& a, const KernelSummary& b) { return a.seconds > b.seconds; });
  return out;
}

namespace {

std::string fmt_time(double s) {
  char b[32];
  if (s >= 1) std::snprintf(b, sizeof b, "%.2f s", s);
  else if (s >= 1e-3) std::snprintf(b, sizeof b, "%.2f ms", s * 1e3);
  else std::snprintf(b, sizeof b, "%.1f us", s * 1e6);
  return b;
}

std::string fmt_bytes(double v) {
  char b[32];
  if (v >= 1e9) std::snprintf(b, sizeof b, "%.2f GB", v / 1e9);
  else if (v >= 1e6) std::snprintf(b, sizeof b, "%.1f MB", v / 1e6);
  else if (v >= 1e3) std::snprintf(b, sizeof b, "%.1f kB", v / 1e3);
  else std::snprintf(b, sizeof b, "%.0f B", v);
  return b;
}

}  // namespace

std::string Profile::table() const {
  std::ostringstream os;
  char b[512];
  // A thread column only when the region ran at several thread counts (each row's roof% is over
  // the roofs of its own count).
  const std::vector<int> counts = cpu_thread_counts();
  const bool by_threads = counts.size() > 1;
  std::snprintf(b, sizeof b, "%-26s %-9s ", "kernel", "backend");
  os << b << (by_threads ? "thr " : "");
  std::snprintf(b, sizeof b, "%-22s %6s %10s %9s %9s %9s %8s %8s %6s %6s\n", "shape", "calls", "time", "read", "write",
                "GFLOP", "GB/s", "GFLOP/s", "roof%", "bound");
  os << b;
  double total = 0;
  for (const KernelSummary& s : summary()) {
    total += s.seconds;
    std::string roof = s.bound_seconds > 0 ? std::to_string(static_cast<int>(s.roof_fraction() * 100 + 0.5)) : "-";
    std::string shape = s.shape.size() > 22 ? s.shape.substr(0, 21) + "~" : s.shape;
    std::snprintf(b, sizeof b, "%-26s %-9s ", s.kernel.c_str(), s.backend.c_str());
    os << b;
    if (by_threads) {
      std::snprintf(b, sizeof b, "%3d ", s.threads);
      os << b;
    }
    std::snprintf(b, sizeof b, "%-22s %6lld %10s %9s %9s %9.3f %8.1f %8.1f %6s %6s\n", shape.c_str(),
                  static_cast<long long>(s.launches), fmt_time(s.seconds).c_str(), fmt_bytes(s.read_bytes).c_str(),
                  fmt_bytes(s.write_bytes).c_str(), s.flops / 1e9, s.gbps(), s.gflops(), roof.c_str(),
                  s.bound_seconds > 0 ? s.bound_by.c_str() : "-");
    os << b;
  }
  double compile = 0, load = 0;
  int n_compile = 0, n_load = 0;
  for (const CompileEvent& e : compiles)
    (e.disk_load ? load : compile) += e.seconds, ++(e.disk_load ? n_load : n_compile);
  std::snprintf(b, sizeof b,
                "%lld launches in %lld evaluations: kernels %s, compile %s (%d), disk-cache loads %s (%d), host "
                "overhead %s per evaluation; region %s\n",
                static_cast<long long>(launches.size()), static_cast<long long>(evaluations), fmt_time(total).c_str(),
                fmt_time(compile).c_str(), n_compile, fmt_time(load).c_str(), n_load,
                fmt_time(evaluations ? host_overhead_seconds() / static_cast<double>(evaluations) : 0).c_str(),
                fmt_time(region_seconds).c_str());
  os << b;
  for (int t : counts) {
    const CpuRoofs& c = machine.cpu_at(t);
    std::snprintf(b, sizeof b, "roofs (%d thread%s): read %.1f GB/s, write %.1f GB/s, FMA f32 %.1f GFLOP/s; %s\n", t,
                  t == 1 ? "" : "s", c.read_gbps, std::max(c.write_gbps, c.write_nt_gbps), c.fma_f32_gflops,
                  machine.cpu.c_str());
    os << b;
  }
  return os.str();
}

}  // namespace kfuse
