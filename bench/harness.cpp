#include "harness.hpp"

#include "workload.hpp"

#include <sys/utsname.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

namespace kbench {

double now_s() {
  using clk = std::chrono::steady_clock;
  return std::chrono::duration<double>(clk::now().time_since_epoch()).count();
}

static double quantile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  double pos = q * static_cast<double>(sorted.size() - 1);
  size_t lo = static_cast<size_t>(std::floor(pos));
  size_t hi = std::min(lo + 1, sorted.size() - 1);
  double f = pos - static_cast<double>(lo);
  return sorted[lo] * (1 - f) + sorted[hi] * f;
}

Stats summarize(std::vector<double> s) {
  Stats st;
  if (s.empty()) return st;
  std::sort(s.begin(), s.end());
  st.samples = static_cast<int>(s.size());
  st.median = quantile(s, 0.5);
  st.min = s.front();
  st.p10 = quantile(s, 0.1);
  st.p90 = quantile(s, 0.9);
  double sum = 0;
  for (double v : s) sum += v;
  st.mean = sum / static_cast<double>(s.size());
  std::vector<double> dev;
  dev.reserve(s.size());
  for (double v : s) dev.push_back(std::fabs(v - st.median));
  std::sort(dev.begin(), dev.end());
  st.mad = quantile(dev, 0.5);
  return st;
}

Stats measure(const std::function<void()>& fn, const TimingConfig& cfg) {
  // Warm-up: cfg.warmup calls and at least a fifth of min_time (at most 0.1 s); stop early when
  // the calls are slow (an interpreter) so a multi-second call is not repeated needlessly. A
  // time, not only a count: a 5 us call reaches max_reps in ~5 ms, and the first
  // implementation of a workload, timed right after the fp64 reference, measured 10-15% slower
  // than the same kernel timed second (relu [256,256], xbyak and LLVM in either order).
  double t_one = 0;
  {
    const double warm_time = std::min(0.1, cfg.min_time_s / 5);
    double spent = 0;
    for (int i = 0; i < std::max(1, cfg.warmup) || spent < warm_time; ++i) {
      double t0 = now_s();
      fn();
      t_one = now_s() - t0;
      spent += t_one;
      if (spent > cfg.min_time_s / 2) break;
    }
  }
  int batch = 1;
  if (t_one < cfg.sample_floor_s) {
    // Re-estimate over several calls: a single tiny call is dominated by timer overhead.
    const int probe = 64;
    double t0 = now_s();
    for (int i = 0; i < probe; ++i) fn();
    double per = (now_s() - t0) / probe;
    batch = static_cast<int>(std::clamp(std::ceil(cfg.sample_floor_s / std::max(per, 1e-9)), 1.0, 1e6));
  }
  const double max_time = std::max(cfg.min_time_s * 10, 1.0);
  std::vector<double> samples;
  double start = now_s();
  for (;;) {
    double t0 = now_s();
    for (int i = 0; i < batch; ++i) fn();
    samples.push_back((now_s() - t0) / batch);
    double el = now_s() - start;
    int n = static_cast<int>(samples.size());
    if (n >= cfg.max_reps) break;
    if (n >= cfg.min_reps && el >= cfg.min_time_s) break;
    if (n >= 3 && el >= max_time) break;  // very slow implementation: 3 samples are enough
  }
  Stats st = summarize(std::move(samples));
  st.batch = batch;
  return st;
}

Verdict verify(const float* got, const std::vector<double>& ref, double atol, double rtol) {
  Verdict v;
  v.ok = true;
  for (size_t i = 0; i < ref.size(); ++i) {
    double g = got[i], r = ref[i];
    double e = std::fabs(g - r);
    bool bad = !(e <= atol + rtol * std::fabs(r));  // NaN counts as bad
    if (std::isnan(r) && std::isnan(g)) bad = false, e = 0;
    if (e > v.max_abs_err || std::isnan(e)) v.max_abs_err = std::isnan(e) ? INFINITY : e;
    if (std::fabs(r) > 0) v.max_rel_err = std::max(v.max_rel_err, e / std::fabs(r));
    if (bad && v.ok) {
      v.ok = false;
      v.first_bad = static_cast<int64_t>(i);
      std::ostringstream os;
      os.precision(8);
      os << "element " << i << ": got " << g << ", reference " << r;
      v.message = os.str();
    }
  }
  return v;
}

Verdict verify(const float* got, const Reference& ref) {
  if (ref.rows.empty() && ref.bound.empty()) return verify(got, ref.values, ref.atol, ref.rtol);
  Verdict v;
  v.ok = true;
  const int64_t len = ref.rows.empty() ? static_cast<int64_t>(ref.values.size()) : ref.row_len;
  for (size_t i = 0; i < ref.values.size(); ++i) {
    const int64_t r = static_cast<int64_t>(i) / len, c = static_cast<int64_t>(i) % len;
    const int64_t at = ref.rows.empty() ? static_cast<int64_t>(i) : ref.rows[static_cast<size_t>(r)] * len + c;
    const double g = got[at], want = ref.values[i];
    const double e = std::fabs(g - want);
    const double tol = ref.atol + (ref.bound.empty() ? 0.0 : ref.bound[i]) + ref.rtol * std::fabs(want);
    if (e > v.max_abs_err || std::isnan(e)) v.max_abs_err = std::isnan(e) ? INFINITY : e;
    if (!(e <= tol) && v.ok) {  // NaN counts as bad
      v.ok = false;
      v.first_bad = at;
      std::ostringstream os;
      os.precision(8);
      os << "element " << at << ": got " << g << ", reference " << want << " (tolerance " << tol << ")";
      v.message = os.str();
    }
  }
  return v;
}

std::string fmt_time(double s) {
  char b[32];
  if (s <= 0) return "-";
  if (s < 1e-6) std::snprintf(b, sizeof b, "%.1f ns", s * 1e9);
  else if (s < 1e-3) std::snprintf(b, sizeof b, "%.2f us", s * 1e6);
  else if (s < 1) std::snprintf(b, sizeof b, "%.2f ms", s * 1e3);
  else std::snprintf(b, sizeof b, "%.2f s", s);
  return b;
}

std::string fmt_bytes(double v) {
  char b[32];
  if (v < 1e3) std::snprintf(b, sizeof b, "%.0f B", v);
  else if (v < 1e6) std::snprintf(b, sizeof b, "%.1f KB", v / 1e3);
  else if (v < 1e9) std::snprintf(b, sizeof b, "%.1f MB", v / 1e6);
  else std::snprintf(b, sizeof b, "%.2f GB", v / 1e9);
  return b;
}

void print_header() {
  std::printf("  %-30s %3s %10s %10s %7s %8s %7s %5s  %s\n", "implementation", "thr", "median", "min", "p90/p10",
              "GB/s", "%ceil", "kern", "target / notes");
}

void print_row(const Row& r) {
  if (r.status != "ok") {
    std::printf("  %-30s %3d %10s  %s%s%s\n", r.impl.c_str(), r.threads, r.status.c_str(), r.note.c_str(),
                r.target.empty() ? "" : "  ", r.target.c_str());
    std::fflush(stdout);
    return;
  }
  char gb[16] = "-", fr[16] = "-", kern[16] = "-", spread[16] = "-";
  if (r.gflops > 0)  // GEMM rows: GFLOP/s and % of the FMA peak in these two columns
    std::snprintf(gb, sizeof gb, "%.1fGF", r.gflops);
  else if (r.bytes > 0 && r.gbps > 0) std::snprintf(gb, sizeof gb, "%.2f", r.gbps);
  if (r.frac > 0) std::snprintf(fr, sizeof fr, "%.1f%%", r.frac * 100);
  if (r.kernels >= 0) std::snprintf(kern, sizeof kern, "%.3g", r.kernels);
  if (r.st.spread() > 0) std::snprintf(spread, sizeof spread, "%.2f", r.st.spread());
  std::string tail = r.target;
  if (!r.note.empty()) tail += (tail.empty() ? "" : "; ") + r.note;
  std::printf("  %-30s %3d %10s %10s %7s %8s %7s %5s  %s\n", r.impl.c_str(), r.threads, fmt_time(r.st.median).c_str(),
              fmt_time(r.st.min).c_str(), spread, gb, fr, kern, tail.c_str());
  std::fflush(stdout);
}

std::string machine_description() {
  std::string cpu;
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("model name", 0) == 0) {
      auto p = line.find(':');
      if (p != std::string::npos) cpu = line.substr(p + 2);
      break;
    }
  }
  struct utsname u {};
  uname(&u);
  std::ostringstream os;
  os << (cpu.empty() ? "unknown CPU" : cpu) << ", " << std::thread::hardware_concurrency() << " hw threads, "
     << u.sysname << " " << u.release;
  return os.str();
}

void write_json(const std::string& path, const std::vector<Row>& rows, const std::string& machine,
                const std::vector<std::pair<int, double>>& ceilings, bool quick) {
  using nlohmann::json;
  json j;
  std::time_t t = std::time(nullptr);
  char date[64];
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  j["date"] = date;
  j["machine"] = machine;
  j["quick"] = quick;
  json c = json::array();
  for (auto& [th, g] : ceilings) c.push_back({{"threads", th}, {"triad_gbps", g}});
  j["triad_ceilings"] = c;
  json arr = json::array();
  for (const Row& r : rows) {
    json o;
    o["workload"] = r.workload;
    o["impl"] = r.impl;
    o["threads"] = r.threads;
    o["status"] = r.status;
    if (r.status == "ok") {
      o["median_s"] = r.st.median;
      o["min_s"] = r.st.min;
      o["p10_s"] = r.st.p10;
      o["p90_s"] = r.st.p90;
      o["mad_s"] = r.st.mad;
      o["mean_s"] = r.st.mean;
      o["samples"] = r.st.samples;
      o["calls_per_sample"] = r.st.batch;
      o["compulsory_bytes"] = r.bytes;
      o["gbps"] = r.gbps;
      o["ceiling_gbps"] = r.ceiling_gbps;
      o["fraction_of_ceiling"] = r.frac;
      if (r.gflops > 0) {
        o["gflops"] = r.gflops;
        o["fma_peak_gflops"] = r.peak_gflops;  // the ceiling of fraction_of_ceiling for this row
      }
      o["max_abs_err"] = r.max_abs_err;
    }
    if (r.kernels >= 0) o["kernels_launched_per_call"] = r.kernels;
    if (r.planned >= 0) o["planned_kernels"] = r.planned;
    if (!r.backend.empty()) o["backend_reported"] = r.backend;
    if (r.extra_value >= 0) o["emit_median_s"] = r.extra_value;
    if (r.vs_bare >= 0) o["time_over_bare_gemm"] = r.vs_bare;
    o["target"] = r.target;
    o["note"] = r.note;
    arr.push_back(std::move(o));
  }
  j["rows"] = arr;
  std::ofstream out(path);
  out << j.dump(2) << "\n";
}

}  // namespace kbench
