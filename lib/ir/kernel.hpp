// The kernel IR: a backend-neutral description of one fused kernel.
//
// Model (DESIGN.md section 3): an OUTER domain of independent points (run-time extents, the
// parallel axis) and an optional REDUCE domain per outer point (compile-time extents). The body
// is an ordered list of PHASES executed for every outer point:
//   - a phase with over_reduce = true loops over the whole reduce domain (row-major order) and
//     folds values into its accumulators, and may store element outputs at each point;
//   - a phase with over_reduce = false runs once per outer point (stores per-row values, or the
//     whole body of a pointwise kernel).
// Accumulator k's final value is available as Acc(k) to every later phase.
// A DYNAMIC reduce domain (segment reductions: embedding_bag's bags) replaces the compile-time
// extents by one dimension whose range depends on the outer point: Var(reduce 0) runs over
// [reduce_begin, reduce_end), two i64 expressions of the outer point (they may Load, e.g. a
// bag's offsets) evaluated once per outer point; an empty range folds nothing. Lowering clamps
// that range into the buffers it indexes, so a kernel never reads out of bounds. Lowering also
// makes every position below the end of the LAST bag (the last index of the bag dim: the ids'
// extent) in range for the reduce phase's loads, and the bags follow one another there (a bag
// ends where the next begins: the offsets' check), so a backend may read ahead across bags up to
// that end (the bag kernels' prefetch of later ids' rows).
//
// Scalar and index arithmetic share one expression type (Expr, an immutable DAG). Index
// expressions have dtype i64 and reach shapes only through Param (a run-time int64 parameter:
// outer extents, and strides derived from them) or Const (compile-time, e.g. reduce extents).
// The canonical print (print_kernel) names params but never their values, so two kernels that
// differ only in outer extents print alike: that print is the cache key's main input.
//
// Semantics every backend must implement:
//   Load(buffer, index[, mask]): element `index` of input buffer `buffer` (contiguous, row-major
//     in its dtype); when `mask` (bool) is false the load must not touch memory and yields 0.
//     The index may itself contain Loads (a gather: data-dependent, clamped into range by
//     lowering), so it is not always affine in the loop vars.
//   Op: an element-wise kfuse::Op (unary/binary from ops.def, Where, Fma, Cast) with the fp64
//     reference semantics rounded to the expression's dtype; integer ops wrap; float -> int casts
//     truncate and give the dtype minimum for NaN/out-of-range (x86 cvtt behaviour).
//     Bitwise ops and shifts take integer operands (i32/i64 after widen_narrow); a shift count
//     outside [0, bits) gives 0 (shift_left) or the sign fill (shift_right, arithmetic).
//     Fma(a, b, c) is a * b + c rounded once in its compute dtype (f32 for f32/f16/bf16, f64),
//     never a separate multiply and add: every backend emits its FMA instruction or fma().
//   IDiv/IMod: floor division and modulo of non-negative i64 values.
//   Var(outer k) / Var(reduce k): the current index along that domain dimension.
//   Acc(k): the final value of accumulator k (phase order guarantees it is complete).
//   Rand(seed, counter): counter_uniform(seed, counter, dtype) of lib/core/random.hpp, f32 or
//     f64, bit-exact: b = mix64(mix64(seed + 0x9e3779b97f4a7c15) ^ counter) in wrapping u64
//     arithmetic (both i64 operands reinterpreted as u64), then (b >> 40) * 2^-24 (f32) or
//     (b >> 11) * 2^-53 (f64); both conversions are exact. The seed is normally a Param, so a
//     new seed reuses the compiled code (lib/ir/random.hpp builds randn from two of these).
// Accumulators: Sum/Prod fold with + and *; Max/Min propagate NaN; ArgMax/ArgMin give the
// row-major index (over the reduce domain) of the first extreme value, a NaN counting as the
// extreme; their dtype is i64 and `value` is the compared value.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kfuse/dtype.hpp"
#include "kfuse/op.hpp"

namespace kfuse::ir {

struct Expr;
using ExprRef = std::shared_ptr<const Expr>;

enum class ExprKind : uint8_t { Const, Var, Param, Load, Acc, Op, IDiv, IMod, Rand };
enum class Space : uint8_t { Outer, Reduce };

struct Expr {
  ExprKind kind;
  DType dtype;
  Op op = Op::Count_;          ///< ExprKind::Op: the element-wise op
  double value = 0;            ///< ExprKind::Const (integers are exact up to 2^53)
  int index = 0;               ///< Var: dimension; Param: param id; Load: buffer id; Acc: accumulator id
  Space space = Space::Outer;  ///< Var only
  std::vector<ExprRef> args;   ///< Op: operands; Load: {index} or {index, mask}; IDiv/IMod: {a, b};
                               ///< Rand: {seed, counter}
};

// ---- builders (fold constants and trivial identities in index arithmetic) ----
ExprRef constant(double v, DType dt);
ExprRef iconst(int64_t v);  ///< i64 constant
ExprRef var(Space s, int dim);
ExprRef param(int id);
ExprRef load(int buffer, DType dt, ExprRef index, ExprRef mask = nullptr);
ExprRef acc(int id, DType dt);
ExprRef op(Op o, DType dt, std::vector<ExprRef> args);
ExprRef iadd(ExprRef a, ExprRef b);
ExprRef imul(ExprRef a, ExprRef b);
ExprRef isub(ExprRef a, ExprRef b);
ExprRef idiv(ExprRef a, ExprRef b);
ExprRef imod(ExprRef a, ExprRef b);
/// Uniform in [0, 1) of element `counter` of stream `seed` (both i64); dt is f32 or f64.
ExprRef rand_uniform(DType dt, ExprRef seed, ExprRef counter);
bool is_const(const ExprRef& e, double v);

enum class AccKind : uint8_t { Sum, Prod, Max, Min, ArgMax, ArgMin };
const char* acc_kind_name(AccKind k);
/// The accumulator of a reduction op (ReduceSum ... ArgMin).
AccKind acc_kind(Op reduce_op);

struct Accumulator {
  AccKind kind;
  DType dtype;    ///< result dtype (i64 for ArgMax/ArgMin)
  ExprRef value;  ///< evaluated at every reduce point of its phase
};

struct Store {
  int buffer;     ///< an output buffer id
  ExprRef index;  ///< i64 element index into that buffer
  ExprRef value;  ///< of the buffer's dtype
};

struct Phase {
  bool over_reduce = false;
  std::vector<int> accs;      ///< accumulators folded in this phase (over_reduce only)
  std::vector<Store> stores;  ///< executed at every reduce point (over_reduce) or once
};

struct BufferParam {
  std::string name;  ///< in0, in1, ..., out0, ...
  DType dtype;
  bool output = false;
};

struct ParamInfo {
  std::string name;   ///< what it is, e.g. "outer0" (part of the print)
  int64_t value = 0;  ///< this instance's value (NOT part of the print or the key)
};

/// The shape of a kernel's loops, which backends specialise on: Pointwise (no reduce domain), Row
/// (reductions over the innermost axes), Column (reductions over outer axes, the innermost kept),
/// Global (everything reduced: no outer domain), Contraction (a matmul, README "Matmul").
enum class KernelKind : uint8_t { Pointwise, Row, Column, Global, Contraction, Segment };
/// "pointwise", "row", ...: the canonical print's spelling (part of the cache key).
const char* kernel_kind_name(KernelKind k);

struct Kernel {
  std::string name;  ///< readable stem, e.g. k_log_softmax_f32
  KernelKind kind = KernelKind::Pointwise;
  std::vector<BufferParam> buffers;  ///< inputs first, then outputs
  std::vector<ParamInfo> params;
  std::vector<ExprRef> outer;   ///< extents (Param or Const)
  std::vector<int64_t> reduce;  ///< extents, specialised at compile time (empty when dynamic)
  /// The dynamic reduce domain [reduce_begin, reduce_end) of Var(reduce 0), or null (see top).
  ExprRef reduce_begin, reduce_end;
  std::vector<Accumulator> accs;
  std::vector<Phase> phases;

  int num_inputs() const;
  int num_outputs() const;
  int64_t reduce_numel() const;
  bool dynamic_reduce() const { return reduce_begin != nullptr; }
  /// Whether any Load's index reads memory (a gather). Backends that need affine indices
  /// decline such kernels.
  bool has_gather() const;
  /// Run-time parameter values in id order (what a launch passes).
  std::vector<int64_t> param_values() const;
};

/// Evaluates an integer expression of Consts, Params and + - * idiv imod on the host (outer
/// extents, launch sizes). Throws InternalError for anything else.
int64_t eval_index(const ExprRef& e, const std::vector<int64_t>& params);
/// The number of outer points of a launch: the product of the outer extents.
int64_t outer_points(const Kernel& k, const std::vector<int64_t>& params);

/// Canonical text; stable across runs; excludes param values. Golden tests and cache keys use it.
std::string print_kernel(const Kernel& k);
/// One expression in print_kernel's notation on one line, shared subexpressions written out
/// (diagnostics; a load outside any kernel prints its buffer as b<id>).
std::string print_expr(const ExprRef& e);
/// Checks the invariants (ids in range, dtypes consistent, Acc only after its phase, Var spaces
/// valid, stores target outputs). Throws InternalError with the printed kernel on violation.
void verify_kernel(const Kernel& k);

/// Arguments of one launch.
struct LaunchArgs {
  std::vector<void*> buffers;   ///< one per Kernel::buffers entry
  std::vector<int64_t> params;  ///< one per Kernel::params entry
};

}  // namespace kfuse::ir
