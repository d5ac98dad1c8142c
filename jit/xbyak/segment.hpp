// xbyak backend: the plan of a segment kernel (embedding bags: a dynamic reduce domain per bag),
// filled by segment_plan.cpp and emitted by segment.cpp (Gen::segment_loop).
//
// Shape taken: outer dims [bags..., columns]; the bag's id range [reduce_begin, reduce_end) and
// every row index are *uniform* integer expressions (the same in every vector lane: of the bag
// indices, r0, params, constants and loads from i32/i64 index buffers) evaluated in general
// registers; phase 0 folds f32 Sum/Max/Min/Prod accumulators (and i64 Sums of uniform values,
// the id counts of Mean/Max bags) over the bag's ids; the phases after it store an element-wise
// epilogue of the accumulators per column. Vector leaves of phase 0 are rows (a load at
// uniform + column, read as a vector, f32 or cast from u8/i8/f16/bf16), nibble rows and
// broadcasts (a load at a uniform index, or a uniform bool/int value computed in a general
// register).
//
// A nibble row is a 4-bit table's row (lib/api/quantize.cpp: byte j = q[2j] | q[2j + 1] << 4):
//   cast.f32(bitwise_and(shift_right(cast.iN(load u8[uniform + idiv(o, 2)]), s), 15))
// with o the column and s proven to be 4 * (o & 1) from its structure (segment_plan.cpp,
// nibble_shift: shift_left(o' & 1, 2) and the like, o' the column through the exact steps an
// arange lowers to: casts, + an even constant, * 1). Anything near it (another mask, shift or
// byte index) is declined with a reason. A vector of W columns reads W / 2 bytes. In a bag of
// one column lowering folds o to 0: s is then a constant shift and the nibble a broadcast.
#pragma once
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "xbyak_backend.hpp"

namespace kfuse::detail::xb {

struct SegmentPlan {
  /// A pointer computed per id: buffer + base * element size (base: uniform, element index).
  struct Ptr {
    int buffer = 0;
    ir::ExprRef base;
    DType dtype = DType::F32;
    bool row = false;  ///< some load reads a vector of columns through it
    /// Its lines are prefetched ahead: a row, or a gathered element (its base reads an index
    /// buffer: the 8-bit table's scale and bias) whose address does not move with the bag.
    bool prefetch = false;
    int64_t lo = 0, hi = 0;  ///< the smallest and largest leaf offset through it (elements)
    /// A nibble row's bytes (u8): column c is in byte c / 2; the emitter adds the block's first
    /// column / 2 to the pointer (every leaf through it is a nibble row).
    bool nibble = false;
  };
  /// A vector leaf of phase 0 read through a Ptr: a load, or cast.f32 of a narrow load.
  struct Leaf {
    int ptr = 0;
    bool row = false;    ///< a vector of columns (else one element, broadcast)
    int64_t offset = 0;  ///< elements past the pointer: loads at base + c share base's pointer
    int shift = -1;      ///< a nibble broadcast (a 4-bit bag of one column): (byte >> shift) & 15
  };
  std::vector<Ptr> ptrs;
  /// Some pointer is a 4-bit table's nibble row (the kernel needs the nibble tables, the block's
  /// first byte and, on AVX-512, k4 and unmasked whole-vector rests).
  bool has_nibbles() const {
    for (const auto& p : ptrs)
      if (p.nibble) return true;
    return false;
  }
  std::unordered_map<const ir::Expr*, Leaf> leaves;
  /// Phase-0 broadcast leaves (uniform loads and scalar values), in a fixed order: each gets a
  /// pinned vector register per id.
  std::vector<const ir::Expr*> uniform;
  /// Scalar leaves (uniform bool or cast.f32 of an integer value, computed in a general
  /// register) per phase: phase 0's are also in `uniform`.
  std::vector<std::vector<const ir::Expr*>> scalar;
  /// i64 accumulators (Sums of uniform integer values), summed in a stack slot per bag.
  std::vector<int> int_accs;
  std::vector<int> vec_accs;  ///< the f32 accumulators (vector registers per column)
  /// Uniform integer subexpressions used more than once per id: evaluated once per id.
  std::vector<const ir::Expr*> shared;
  /// The column extent up to which the nibble rows' shift is 4 * (o & 1) (the arange's float
  /// steps and i32 cast are exact below 2^31 columns): a launch with more columns throws.
  int64_t max_columns = INT64_MAX;
  /// Prefetched bases do not read the bag index: the prefetch runs ahead past this bag's end, up to
  /// the last bag's (ir/kernel.hpp: every position below it is in range; the bags follow one another).
  bool ahead_past_bag = false;
};

/// Fills plan (mode Segment, plan.segment) for a dynamic-reduce kernel, or returns why not.
std::string analyze_segment(const ir::Kernel& k, Plan& plan);

}  // namespace kfuse::detail::xb
