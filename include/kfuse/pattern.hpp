/** \file pattern.hpp
 * Fusion patterns: named recipes that seed the partitioner's groups before the op-kind lattice
 * runs (DESIGN.md section 2, "Partition"). Built-in patterns (softmax, log_softmax, layer_norm,
 * rms_norm) and out-of-tree plugins use this same interface.
 *
 * How a pattern takes part in planning (see README "Writing a fusion pattern"):
 *  1. For every fusible node whose op is one of the pattern's root_ops(), kfuse calls
 *     match(node, graph). The GraphView is read-only and independent of any grouping: a pattern
 *     sees nodes, their inputs (Node::inputs) and their consumers, never groups. Patterns never
 *     mutate the graph.
 *  2. match() returns either a Match (the nodes to fuse, optionally a custom kernel) or a
 *     failure reason (`MatchResult::fail("why")`), which KFUSE_LOG=patterns and
 *     pattern_traces() report per node.
 *  3. All matches are committed highest benefit() first; ties go to the pattern registered
 *     first, then to the earlier root in topological order. A match is refused (with its reason)
 *     when it overlaps a committed match or its nodes break a fusion rule (convexity, one
 *     reduction domain, ...: the same check the lattice uses).
 *  4. The lattice then merges the remaining nodes. A grouping-only match stays open (an
 *     element-wise epilogue may still join it; the group keeps the pattern's name, so its kernel
 *     is called k_<pattern>_<dtype>). A match with a custom kernel is closed: its group is
 *     exactly the matched nodes and runs the supplied kernel instead of the generated one.
 *
 * Robustness: an exception thrown by match() is caught; the pattern is disabled for the rest of
 * the process and the failure is reported (stderr and pattern_status()). A custom kernel that
 * fails verification or does not bind the group's values is refused and the group is formed
 * by the lattice instead. eval() is never broken by a plugin. (Kernel IR is trusted once it
 * verifies: a kernel that indexes out of bounds is a bug of its pattern.)
 *
 * Thread safety: match() may be called from several threads at once (concurrent evals); it
 * must be const and keep no mutable state. Registration is thread-safe.
 */
#pragma once
#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "kfuse/explain.hpp"
#include "kfuse/node.hpp"
#include "kfuse/tensor.hpp"

namespace kfuse {

namespace ir {
struct Expr;
struct Kernel;
}  // namespace ir

// ---------------------------------------------------------------------------------------------
// Read-only view of the graph being planned
// ---------------------------------------------------------------------------------------------

/// What a pattern sees of the graph: each node's consumers and whether it is a requested result
/// or an input. Inputs of a node are `node.inputs`. Valid only during match().
class GraphView {
 public:
  using ConsumerMap = std::unordered_map<const Node*, std::vector<const Node*>>;
  /// Built by kfuse (and by match_pattern()); patterns only receive it.
  GraphView(const ConsumerMap& consumers, const std::unordered_set<const Node*>& roots)
      : consumers_(&consumers), roots_(&roots) {}

  /// Users of `n` in this graph, in topological order (empty when none).
  const std::vector<const Node*>& consumers(const Node& n) const;
  /// `n` is a requested result of this evaluation (it must be written to memory).
  bool is_output(const Node& n) const { return roots_->count(&n) > 0; }
  /// `n` is read from memory: a Buffer leaf or a value computed by an earlier eval().
  static bool is_input(const Node& n);
  /// `n` is a constant or iota, emitted inline wherever it is read (never a kernel buffer).
  static bool is_inline_constant(const Node& n);
  /// The members of `nodes` that are needed outside them (requested, or read by a non-member):
  /// the values a kernel for exactly `nodes` must write. In topological order.
  std::vector<const Node*> outputs_of(const std::vector<const Node*>& nodes) const;
  /// The values `nodes` read from outside them, excluding inline constants: the buffers a
  /// kernel for exactly `nodes` may read. In first-use order.
  std::vector<const Node*> inputs_of(const std::vector<const Node*>& nodes) const;
  /// `n` has exactly one consumer and is not a requested result (safe to fold away).
  bool single_use(const Node& n) const { return consumers(n).size() == 1 && !is_output(n); }

 private:
  const ConsumerMap* consumers_;
  const std::unordered_set<const Node*>* roots_;
};

// ---------------------------------------------------------------------------------------------
// Custom kernels: a minimal public builder over the kernel IR (lib/ir/kernel.hpp)
// ---------------------------------------------------------------------------------------------

/// An expression of a custom kernel (scalar value or i64 index). Immutable, cheap to copy.
class KExpr {
 public:
  KExpr() = default;
  bool defined() const { return e_ != nullptr; }
  DType dtype() const;

 private:
  friend class KernelBuilder;
  explicit KExpr(std::shared_ptr<const ir::Expr> e) : e_(std::move(e)) {}
  std::shared_ptr<const ir::Expr> e_;
};

/// A verified kernel plus the graph values bound to its buffers. Built by KernelBuilder.
class CustomKernel {
 public:
  const ir::Kernel& kernel() const { return *kernel_; }
  const std::vector<const Node*>& inputs() const { return inputs_; }    ///< in0, in1, ...
  const std::vector<const Node*>& outputs() const { return outputs_; }  ///< out0, out1, ...
  /// The canonical kernel text (as in KFUSE_DUMP and golden tests).
  std::string text() const;

 private:
  friend class KernelBuilder;
  std::shared_ptr<const ir::Kernel> kernel_;
  std::vector<const Node*> inputs_, outputs_;
};

/// Builds a kernel in kfuse's loop model (DESIGN.md section 3): an OUTER domain of independent
/// points (run-time extents, run in parallel) and an optional REDUCE domain per outer point
/// (compile-time extents). The body is a list of phases run in order for every outer point;
/// a phase `over_reduce` loops over the reduce domain (folding accumulators, and may store at
/// every point), a `once` phase runs once. An accumulator's final value can be read in every
/// later phase. Buffers are contiguous row-major; indices are element offsets (i64).
///
///   KernelBuilder b;                                   // row softmax of x [R, C], axis -1
///   int in = b.input(x), out = b.output(y);
///   KExpr row = b.outer(R), c = b.reduce(C);
///   KExpr at = b.add(b.mul(row, b.index(C)), c);
///   KExpr v = b.load(in, at);
///   b.begin_phase(true);  KExpr m = b.accumulate(KernelBuilder::Reduce::Max, v);
///   b.begin_phase(true);  KExpr e = b.apply(Op::Exp, DType::F32, {b.apply(Op::Sub, DType::F32, {v, m})});
///                         KExpr s = b.accumulate(KernelBuilder::Reduce::Sum, e);
///   b.begin_phase(true);  b.store(out, at, b.apply(Op::Div, DType::F32, {e, s}));
///   CustomKernel k = b.build();                        // throws kfuse::Error when malformed
///
/// Every call checks its operands (dtype, buffer kind) and throws kfuse::UserError naming the
/// mistake; build() runs the IR verifier.
class KernelBuilder {
 public:
  enum class Reduce : uint8_t { Sum, Prod, Max, Min };

  KernelBuilder();
  ~KernelBuilder();
  KernelBuilder(const KernelBuilder&) = delete;
  KernelBuilder& operator=(const KernelBuilder&) = delete;

  /// Binds a new input buffer to graph value `n` (declare all inputs before outputs). Returns
  /// its buffer id. `n` must be a value the matched nodes read from outside (GraphView::inputs_of).
  int input(const Node& n);
  /// Binds a new output buffer to matched node `n`. Every value GraphView::outputs_of() lists
  /// must be bound.
  int output(const Node& n);

  /// Adds an outer dimension with run-time extent `extent`; returns its index variable.
  KExpr outer(int64_t extent);
  /// The run-time extent of outer dimension `k` (for index arithmetic).
  KExpr outer_extent(int k) const;
  /// Adds a reduce dimension with compile-time extent `extent`; returns its index variable
  /// (valid only inside over-reduce phases).
  KExpr reduce(int64_t extent);

  KExpr index(int64_t v) const;              ///< i64 constant
  KExpr constant(double v, DType dt) const;  ///< scalar constant
  /// Element `index` of input buffer `buffer`; when `mask` (bool) is false, 0 and no access.
  KExpr load(int buffer, const KExpr& index, const KExpr& mask = {}) const;
  /// An element-wise kfuse op (any unary/binary op of ops.def, Where, Fma, Cast) with result `dt`.
  KExpr apply(Op op, DType dt, std::vector<KExpr> args) const;
  // i64 index arithmetic (constant-folded); div/mod are floor division/modulo of values >= 0.
  KExpr add(const KExpr& a, const KExpr& b) const;
  KExpr sub(const KExpr& a, const KExpr& b) const;
  KExpr mul(const KExpr& a, const KExpr& b) const;
  KExpr div(const KExpr& a, const KExpr& b) const;
  KExpr mod(const KExpr& a, const KExpr& b) const;

  /// Starts the next phase.
  void begin_phase(bool over_reduce);
  /// Folds `value` into a new accumulator in the current (over-reduce) phase; returns its final
  /// value, readable in later phases.
  KExpr accumulate(Reduce kind, const KExpr& value);
  /// Stores `value` (of the buffer's dtype) at element `index` of output buffer `buffer`.
  void store(int buffer, const KExpr& index, const KExpr& value);

  /// Verifies and returns the kernel. `name` is its readable stem; empty: k_<pattern>_<dtype>.
  CustomKernel build(const std::string& name = {}) const;

 private:
  struct State;
  std::unique_ptr<State> s_;
};

// ---------------------------------------------------------------------------------------------
// Patterns
// ---------------------------------------------------------------------------------------------

/// What a successful match fuses.
struct Match {
  /// The nodes of the group, including the root. Constants may be listed or not (they are
  /// inlined); inputs (buffers, realized values) may not. Order does not matter.
  std::vector<const Node*> nodes;
  /// A kernel to run instead of the generated one (closes the group). Empty: grouping only.
  std::shared_ptr<const CustomKernel> kernel;
};

/// Either a Match or the reason the pattern does not apply.
struct MatchResult {
  bool matched = false;
  Match match;
  std::string reason;  ///< why not (when !matched)

  static MatchResult ok(Match m) { return {true, std::move(m), {}}; }
  static MatchResult ok(std::vector<const Node*> nodes, std::shared_ptr<const CustomKernel> k = nullptr) {
    return {true, Match{std::move(nodes), std::move(k)}, {}};
  }
  static MatchResult fail(std::string why) { return {false, {}, std::move(why)}; }
};

class Pattern {
 public:
  virtual ~Pattern() = default;
  /// Unique name; also the kernel's name: k_<name>_<dtype>. Use [a-z0-9_].
  virtual std::string name() const = 0;
  /// Ops of the nodes match() is tried at (fast dispatch). Empty: every fusible node.
  virtual std::vector<Op> root_ops() const = 0;
  /// Higher benefit is committed first. Built-in patterns use 10.
  virtual int benefit() const { return 1; }
  /// Examines `root` (never modifies anything). Must be thread-safe.
  virtual MatchResult match(const Node& root, const GraphView& graph) const = 0;
};

/// A pattern from a lambda (for small patterns and tests).
std::shared_ptr<Pattern> make_pattern(std::string name, std::vector<Op> root_ops, int benefit,
                                      std::function<MatchResult(const Node&, const GraphView&)> match);

/// Registers a pattern for every later evaluation. Throws UserError when the name is taken.
void register_pattern(std::shared_ptr<Pattern> p);
/// Removes a pattern by name; false when there is none. (Built-ins can be removed too.)
bool unregister_pattern(const std::string& name);

struct PatternStatus {
  std::string name;
  std::string source;  ///< "builtin", "code" or the plugin file it came from
  int benefit = 0;
  bool enabled = true;
  std::string disabled_reason;  ///< e.g. "match() threw: ..."
};
/// Every registered pattern in registration order.
std::vector<PatternStatus> pattern_status();

/// Tries one pattern at one node (no registration, no legality check): for tests. `outputs`
/// are the requested results (default: {root}); the view covers the graph under them.
MatchResult match_pattern(const Pattern& p, const Tensor& root, const std::vector<Tensor>& outputs = {});

/// Per node, which patterns were tried on the graph under `ts` and what became of them:
/// matched = true for a committed match; otherwise `reason` is why the pattern did not match,
/// or "refused: ..." when it matched but could not be committed. Nodes are named "%k op" as in
/// explain(). Plans the recorded graph (graph passes are not applied).
std::vector<PatternTrace> pattern_traces(const std::vector<Tensor>& ts);

// ---------------------------------------------------------------------------------------------
// Plugins: shared libraries loaded at run time through a C entry point
// ---------------------------------------------------------------------------------------------

struct PluginLoadResult {
  bool ok = false;
  std::string message;                ///< why not, or "loaded <name>: 2 patterns"
  std::vector<std::string> patterns;  ///< names registered
};
/// Loads a plugin (.so built with KFUSE_PLUGIN) and registers its patterns. Never throws:
/// a missing file, a missing entry point, an ABI mismatch or a failing init is returned as
/// !ok with the reason. A plugin is never unloaded once it registered patterns. Plugins listed
/// in KFUSE_PLUGINS (colon separated) are loaded at the first evaluation; failures are logged.
PluginLoadResult load_plugin(const std::string& path);

}  // namespace kfuse

// ---- the C ABI of plugins ----

/// Bumped whenever Pattern, Match, GraphView, KernelBuilder or kfuse_plugin_api change layout.
/// (Plugins are C++: build them with the same compiler family and standard library as kfuse.)
#define KFUSE_PLUGIN_ABI_VERSION 1
#define KFUSE_PLUGIN_OK 0
#define KFUSE_PLUGIN_ABI_MISMATCH 2
#define KFUSE_PLUGIN_INIT_FAILED 3

extern "C" {
/// Passed by kfuse to `kfuse_plugin_init`. kfuse fills abi_version, context and
/// register_pattern; the plugin fills plugin_abi_version and name (and error on failure).
struct kfuse_plugin_api {
  uint32_t abi_version;         ///< the ABI this kfuse speaks
  uint32_t plugin_abi_version;  ///< the ABI the plugin was built for
  const char* name;             ///< the plugin's name (static storage)
  void* context;                ///< kfuse's; pass back to register_pattern
  /// Registers `*pattern` (a const std::shared_ptr<kfuse::Pattern>*); 0 on success.
  int (*register_pattern)(void* context, const void* pattern);
  char error[256];  ///< a message when init fails
};
/// The entry point every plugin exports (KFUSE_PLUGIN defines it). Returns KFUSE_PLUGIN_OK.
typedef int (*kfuse_plugin_init_fn)(struct kfuse_plugin_api* api);
}

namespace kfuse {

/// Handed to a plugin's registration function.
class PluginRegistrar {
 public:
  explicit PluginRegistrar(kfuse_plugin_api* api) : api_(api) {}
  /// Registers a pattern; false when kfuse refused it (e.g. its name is taken).
  bool add(std::shared_ptr<Pattern> p) { return api_->register_pattern(api_->context, &p) == 0; }

 private:
  kfuse_plugin_api* api_;
};

namespace plugin_detail {
inline int init(kfuse_plugin_api* api, const char* name, void (*fn)(PluginRegistrar&)) {
  api->plugin_abi_version = KFUSE_PLUGIN_ABI_VERSION;
  api->name = name;
  if (api->abi_version != KFUSE_PLUGIN_ABI_VERSION) return KFUSE_PLUGIN_ABI_MISMATCH;
  try {
    PluginRegistrar r(api);
    fn(r);
  } catch (const std::exception& e) {
    std::string m = e.what();
    m.resize(std::min(m.size(), sizeof(api->error) - 1));
    for (size_t i = 0; i <= m.size(); ++i) api->error[i] = i < m.size() ? m[i] : '\0';
    return KFUSE_PLUGIN_INIT_FAILED;
  } catch (...) { return KFUSE_PLUGIN_INIT_FAILED; }
  return KFUSE_PLUGIN_OK;
}
}  // namespace plugin_detail

}  // namespace kfuse

/// Defines the plugin entry point. NAME: a string literal; FN: void(kfuse::PluginRegistrar&).
///   static void register_all(kfuse::PluginRegistrar& r) { r.add(std::make_shared<MyPattern>()); }
///   KFUSE_PLUGIN("my_plugin", register_all)
#define KFUSE_PLUGIN(NAME, FN)                                                                     \
  extern "C" __attribute__((visibility("default"))) int kfuse_plugin_init(kfuse_plugin_api* api) { \
    return ::kfuse::plugin_detail::init(api, NAME, FN);                                            \
  }
