// Timing, statistics, verification and reporting for kfuse_compare.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace kbench {

struct TimingConfig {
  double min_time_s = 0.5;        // keep sampling until this much time was spent (after min_reps)
  int min_reps = 5;               // at least this many samples
  int max_reps = 200;             // at most this many samples
  int warmup = 2;                 // warm-up calls (not timed)
  double sample_floor_s = 20e-6;  // batch calls so one sample lasts at least this long
};

struct Stats {
  double median = 0, min = 0, p10 = 0, p90 = 0, mad = 0, mean = 0;  // seconds per call
  int samples = 0;
  int batch = 1;  // calls per sample
  double spread() const { return p10 > 0 ? p90 / p10 : 0; }
};

/// Times `fn`: warm-up, then samples (each of `batch` calls) until the config is satisfied.
Stats measure(const std::function<void()>& fn, const TimingConfig& cfg);
/// Statistics of raw per-call samples (seconds).
Stats summarize(std::vector<double> samples);
double now_s();

/// Compares `got` against the fp64 reference: |got - ref| <= atol + rtol * |ref| everywhere.
struct Verdict {
  bool ok = false;
  double max_abs_err = 0;
  double max_rel_err = 0;
  int64_t first_bad = -1;
  std::string message;
};
Verdict verify(const float* got, const std::vector<double>& ref, double atol, double rtol);
struct Reference;
/// The same against a Reference (workload.hpp): its tolerances, per-element bounds, sampled rows.
Verdict verify(const float* got, const Reference& ref);

/// One line of the report (also one JSON object).
struct Row {
  std::string workload;
  std::string impl;
  int threads = 1;
  std::string status;  // "ok" | "FAIL" | "ERROR" | "skipped"
  Stats st;
  double bytes = 0;
  double gbps = 0;
  double ceiling_gbps = 0;
  double frac = 0;         // gbps / ceiling, or for GEMM rows gflops / peak_gflops
  double gflops = 0;       // GEMM rows: 2 M N K / median
  double peak_gflops = 0;  // GEMM rows: the FMA peak with the same thread count, same run
  double kernels = -1;     // kernels launched per call (kfuse), -1 = n/a
  int64_t planned = -1;    // explain(t).kernel_count(), -1 = n/a
  std::string backend;     // what kfuse reported
  std::string target;      // "PASS ..." | "MISS ..." | ""
  std::string note;
  double max_abs_err = 0;
  double extra_value = -1;  // workload specific (compile: the backend emit time per kernel, median, s)
  double vs_bare = -1;      // MLP block: median / the same implementation's bare GEMM median
};

std::string fmt_time(double s);
std::string fmt_bytes(double b);
void print_header();
void print_row(const Row& r);
void write_json(const std::string& path, const std::vector<Row>& rows, const std::string& machine,
                const std::vector<std::pair<int, double>>& ceilings, bool quick);
std::string machine_description();

}  // namespace kbench
