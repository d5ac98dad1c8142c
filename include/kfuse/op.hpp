/** \file op.hpp
 * The Op enum (generated from ops.def plus the structural ops) and the op-kind lattice.
 */
#pragma once
#include <cstdint>

namespace kfuse {

/// Every op a graph node can hold.
enum class Op : uint8_t {
  // sources
  Buffer,  ///< a host buffer (leaf); attrs.ints = {buffer id}
  Const,   ///< a scalar constant of shape []; attrs.reals = {value}
  Iota,    ///< start + step * i over a 1-D shape (arange, linspace); attrs.reals = {start, step}
  Rand,    ///< counter-based random numbers; attrs.ints = {seed, kind (0 uniform, 1 normal)}
// element-wise, from the op table
#define KFUSE_UNARY_OP(name, str, rule, expr, tol) name,
#define KFUSE_BINARY_OP(name, str, rule, expr, tol) name,
#include "kfuse/ops.def"
  Cast,   ///< dtype conversion (the node's dtype is the target)
  Where,  ///< where(cond, a, b)
  Fma,    ///< fma(a, b, c) = a * b + c: floats rounded once (f16/bf16: in f32, then to the dtype), integers wrap
  // reductions over attrs.ints = axes (sorted); the node keeps reduced dims with size 1
  ReduceSum,
  ReduceProd,
  ReduceMax,
  ReduceMin,
  ArgMax,  ///< index of the first maximum within the reduced sub-space (row-major), i64
  ArgMin,
  /// Segment (bag) reductions, the reduction of embedding_bag: inputs (values [N, D], starts [B],
  /// i64); result [B, 1, D] with out[b, 0, d] = the fold of values[r, d] over r in
  /// [starts[b], starts[b + 1]), the last bag ending at N (PyTorch's offsets; both bounds are
  /// clamped into [0, N], and an empty segment gives the fold's identity). The last bag's end is
  /// the values' extent, not a recorded constant, so one graph and one kernel serve every id count.
  /// They iterate the virtual full shape [B, N, D] with axis 1 reduced (attrs.ints = {1}), whose
  /// per-row extent is data (a dynamic reduce domain in the kernel IR).
  SegmentSum,
  SegmentMax,
  // views and data movement
  Reshape,  ///< attrs: none (the node's shape is the new shape)
  Permute,  ///< attrs.ints = permutation
  Expand,   ///< broadcast size-1 dims to the node's shape
  Slice,    ///< attrs.ints = (start, step) per axis; the node's shape gives the count
  Pad,      ///< attrs.ints = (before, after) per axis; attrs.reals = {value}
  Concat,   ///< attrs.ints = {axis}
  /// out[i] = x[i with axis replaced by index[i]] (take_along_axis); inputs (x, index); the node
  /// has index's shape; attrs.ints = {axis}. Indices are clamped into range in kernels (the
  /// index ops check them before: CheckIndex).
  Gather,
  // contractions
  Matmul,  ///< batched matmul with broadcasting over batch dims (inputs already broadcast to [batch.., M, K], [batch..,
           ///< K, N])
  // opaque
  /// The identity on class labels that first checks each is in [0, classes) or ignore_index
  /// (cross_entropy's labels when they are computed lazily); attrs.ints = {classes, ignore_index}.
  CheckLabels,
  /// The identity on indices that first checks each is in [0, size) (index ops whose indices are
  /// computed lazily); attrs.ints = {size, IndexUse} (lib/eval/check_index.hpp).
  CheckIndex,
  Count_
};

/// The fusion lattice (TVM's OpPatternKind): joining two kinds takes the max; a group's kind is
/// the worst op in it. Sources are kernel inputs or inlined (const, iota); rand is a generator
/// that fuses like an element-wise op (lib/ir/random.hpp); Opaque ops run alone.
/// A Contraction (matmul; TVM's OutEWiseFusable) takes cheap operand views/casts and an
/// element-wise epilogue into its kernel, never a reduction or another contraction.
enum class OpKind : uint8_t {
  ElemWise = 0,
  Broadcast = 1,
  Injective = 2,
  Reduce = 3,
  Contraction = 4,
  Source = 7,
  Opaque = 8
};

const char* op_name(Op op);
OpKind op_kind(Op op);
const char* op_kind_name(OpKind k);
/// Number of inputs; -1 for variadic (Concat).
int op_arity(Op op);
bool is_unary_elementwise(Op op);
bool is_binary_elementwise(Op op);
bool is_elementwise(Op op);
bool is_reduction(Op op);
/// SegmentSum / SegmentMax (reductions whose per-row extent is data).
bool is_segment_reduction(Op op);
bool is_view(Op op);
/// The bitwise ops and shifts (ops.def rules Bitwise and Shift): integer operands only in the
/// graph and the kernel IR (recording gives bool operands the logical ops instead).
bool is_bitwise(Op op);
/// f32 relative tolerance of one application of an element-wise op (see ops.def).
double op_tolerance_f32(Op op);

}  // namespace kfuse
