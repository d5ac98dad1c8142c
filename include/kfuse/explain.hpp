/** \file explain.hpp
 * Why the plan is what it is: the graph after passes, each kernel with the ops it fused, its
 * inputs and outputs and the minimum bytes it must move, and for every boundary between
 * kernels the rule that stopped fusion there. KFUSE_LOG=fusion prints the same report at eval.
 */
#pragma once
#include <string>
#include <vector>

#include "kfuse/profile.hpp"
#include "kfuse/tensor.hpp"

namespace kfuse {

struct KernelReport {
  std::string name;                 ///< readable stem, e.g. k_log_softmax_f32
  std::string kind;                 ///< pointwise | row | column | global | contraction | opaque
  std::string pattern;              ///< the pattern that formed the group ("lattice" by default)
  std::vector<std::string> ops;     ///< fused ops in topological order
  std::vector<std::string> inputs;  ///< "%3 f32[4096, 10]"
  std::vector<std::string> outputs;
  /// Compulsory traffic: outputs written once + inputs read once, as far as the kernel reaches
  /// them (an input read through a gather: the elements its index can reach, at most its size).
  int64_t min_bytes = 0;
  int64_t read_bytes = 0;   ///< the inputs' part of min_bytes
  int64_t write_bytes = 0;  ///< the outputs' part
  double flops = 0;         ///< counted from the kernel IR (lib/ir/flops.cpp; 0 for opaque ops)
  std::string backend;      ///< backend that ran it, when this structure was evaluated before (else empty)
  /// The input (as in `inputs`) whose memory its output takes, an intermediate this kernel reads
  /// last (README "Executor"), when this structure was evaluated before; else empty.
  std::string writes_over;
};

struct BoundaryReport {
  std::string producer;  ///< node printed as "%id op"
  std::string consumer;
  std::string reason;  ///< the rule that kept them apart
};

/// Per node: which patterns were tried and why each failed (for pattern authors).
struct PatternTrace {
  std::string node;
  std::string pattern;
  bool matched = false;
  std::string reason;
};

struct Explanation {
  std::string graph;  ///< the graph after passes, one node per line
  std::vector<KernelReport> kernels;
  std::vector<BoundaryReport> boundaries;
  std::vector<PatternTrace> patterns;
  int64_t unfused_kernels = 0;  ///< kernels an op-by-op library would launch
  size_t kernel_count() const { return kernels.size(); }
  /// The roofline bound of one evaluation of this plan: the sum over its kernels of
  /// roof.seconds(reads, writes, FLOPs). The profiler adds up the same per launch, and the bench
  /// divides it by its time per call: one definition of bytes, FLOPs and ceiling for both.
  double bound_seconds(const Roof& roof) const;
  std::string text() const;  ///< the human-readable report
};

/// Plans (does not run) the evaluation of `ts`.
Explanation explain(const std::vector<Tensor>& ts);
inline Explanation explain(const Tensor& t) { return explain(std::vector<Tensor>{t}); }

/// Graphviz text with one cluster per kernel.
std::string to_dot(const std::vector<Tensor>& ts);

}  // namespace kfuse
