// A Program: a Plan reduced to what running it needs, with graph nodes replaced by positions
// (leaf k of the graph signature, or temporary value m). Programs are cached by graph signature,
// so evaluating an expression whose structure was seen before skips passes, partitioning,
// lowering and kernel-cache lookups: it hashes the graph, finds the program and runs it.
#pragma once
#include <memory>
#include <vector>

#include "backend/backend.hpp"
#include "fusion/partition.hpp"
#include "prof/recorder.hpp"
#include "runtime/graph_signature.hpp"
#include "runtime/plan.hpp"

namespace kfuse::detail {

struct ValueRef {
  bool leaf = false;
  uint32_t index = 0;  ///< into GraphSignature::leaves, or the program's temporaries
};

struct Step {
  GroupKind kind = GroupKind::Fused;
  std::shared_ptr<CompiledKernel> kernel;  ///< fused groups
  std::string backend;                     ///< the backend that compiled it ("host" for host steps)
  std::vector<int64_t> params;             ///< launch parameters (extents and rand seeds: fixed by the signature)
  const Node* host_node = nullptr;         ///< opaque groups (their programs keep the plan)
  std::vector<ValueRef> inputs;            ///< fused: kernel input buffers; host: node inputs
  std::vector<uint32_t> outputs;           ///< temporaries written
  std::vector<uint32_t> release;           ///< temporaries whose last reader is this step
  /// The temporary (one of `release`) whose memory output 0 takes, or -1: the kernel may write
  /// over it (ir::may_write_in_place, CompiledKernel::in_order_writes).
  int64_t in_place = -1;
  std::shared_ptr<const prof::StepInfo> info;  ///< what the profiler records for it (name, bytes, FLOPs)
};

struct Program {
  struct Temp {
    DType dtype;
    int64_t numel;
    Device device;
  };
  std::vector<Step> steps;
  std::vector<Temp> temps;
  std::vector<ValueRef> roots;       ///< the value of each requested root
  uint64_t fused_steps = 0;          ///< steps that launch a compiled kernel (cache hits per run)
  std::shared_ptr<const Plan> plan;  ///< uncached programs keep their plan (host steps point into it)
  /// Realized nodes the passes introduced that the signature does not list (leaf indices from
  /// GraphSignature::leaves.size() on); a program with any is not cached. Kept alive by `plan`.
  std::vector<const Node*> extra_leaves;
};

/// Builds the program of `plan` for a graph whose leaves are `sig.leaves`.
std::shared_ptr<const Program> make_program(const Plan& plan, const GraphSignature& sig);

/// The program for roots[0, n): from the plan cache, or planned, compiled and (when the graph is
/// cacheable) cached. `sig` must be graph_signature(roots). Null when a node of the graph was
/// realized by another thread while it was planned: the caller takes a new signature.
std::shared_ptr<const Program> get_program(const NodeRef* roots, size_t n, const GraphSignature& sig,
                                           const Options& opts);

/// A copy of `s` on `to` (through the host when neither side is the CPU).
std::shared_ptr<Storage> copy_storage(const Storage& s, Device to);

/// The cached program for `sig`, or null (never plans or compiles; explain() uses it to report
/// which backend runs each kernel of an expression evaluated before).
std::shared_ptr<const Program> find_program(const GraphSignature& sig);

/// Runs a program over the leaf values of `sig`; out[i] receives root i's value (p.roots.size()
/// entries).
void run_program(const Program& p, const GraphSignature& sig, std::shared_ptr<Storage>* out);

}  // namespace kfuse::detail
