// kfuse side of the benchmark: the lazy expressions of each workload, and the kfuse-only
// measurements (compile time, cache-hit overhead).
#pragma once
#include <kfuse/kfuse.hpp>
#include <string>
#include <vector>

#include "harness.hpp"
#include "workload.hpp"

namespace kbench {

/// Borrowed (zero-copy) kfuse tensors over the workload's inputs.
std::vector<kfuse::Tensor> kfuse_inputs(const Workload& w);
/// The workload's expression recorded on `in` (not evaluated).
kfuse::Tensor kfuse_build(const Workload& w, const std::vector<kfuse::Tensor>& in);

/// The fp64 reference of an embedding-bag workload: bags of the values its table format holds.
Reference kfuse_bag_reference(const Workload& w);
/// A quantised bag workload: points w.fused_rows at kfuse's table in PyTorch's fused rows, which
/// the PyTorch peer reads (the same codes, scales and biases, so one reference checks both).
void kfuse_bag_share_table(Workload& w);

/// Options with `backend` preferred and `threads` threads, on top of `base`.
kfuse::Options kfuse_options(const kfuse::Options& base, const std::string& backend, int threads);

/// kfuse natural form: record the expression on borrowed inputs and evaluate, every call.
Impl kfuse_impl(const Workload& w, const std::string& backend, int threads, const kfuse::Options& base);

/// What kfuse reports for the workload under the current options: the backends named by
/// explain() (comma list, may be empty) and the planned kernel count.
struct KfusePlan {
  std::string backends;
  int64_t planned = -1;
  std::string error;
};
KfusePlan kfuse_plan(const Workload& w);
/// The roofline bound of one call of the workload (seconds): kfuse's plan for it, each kernel's
/// reads, writes and FLOPs against `roof` (kfuse::Explanation::bound_seconds, the profiler's
/// definition). Every row of the workload, peers included, is measured against it.
double kfuse_bound_seconds(const Workload& w, const kfuse::Roof& roof);
/// Whether libkfuse provides kfuse::explain (it comes with the fusion engine).
bool kfuse_has_explain();

/// Compile time of fresh kernels on `backend`: `count` distinct expressions, each timed as
/// (first eval) - (eval of the same expression re-recorded, a cache hit).
Row kfuse_compile_row(const std::string& backend, int count, const kfuse::Options& base);
/// Record-only and record+cached-eval costs on 8 floats.
std::vector<Row> kfuse_cache_rows(const std::string& backend, const TimingConfig& cfg, const kfuse::Options& base);

}  // namespace kbench
