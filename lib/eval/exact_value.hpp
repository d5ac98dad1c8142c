// Element semantics shared by the graph evaluator (the test oracle), constant folding and the
// kernel-IR interpreter (the reference backend). Integers and bools never pass through double:
// an i64 above 2^53 stays exact, integer arithmetic wraps in its op's dtype (two's complement)
// and comparisons, max/min and argmax/argmin ties are exact. Floats compute in double.
#pragma once
#include <cstdint>

#include "ir/kernel.hpp"
#include "kfuse/dtype.hpp"
#include "kfuse/op.hpp"

namespace kfuse::detail {

/// One element. Its dtype comes from context (the node's or the expression's): integer and bool
/// dtypes use `i` (within the dtype's range; bools 0/1), float dtypes use `f`.
union Num {
  int64_t i;
  double f;
};
inline Num int_num(int64_t v) {
  Num n;
  n.i = v;
  return n;
}
inline Num float_num(double v) {
  Num n;
  n.f = v;
  return n;
}

/// The two's-complement value of v's low bits in `dt` (i32: the low 32 bits; bool: v != 0).
int64_t wrap_to(uint64_t v, DType dt);
double num_to_double(Num v, DType dt);
/// A double as an element of `dt`: integral doubles wrap to integer dtypes (a constant 2^32 + 1
/// is 1 in i32), other values follow the float -> integer cast rule (num_cast).
Num num_from_double(double v, DType dt);
/// Casts as the compiled backends do: int -> float rounds once (C++ conversion, so i64 -> f32
/// never double-rounds through f64); float -> int truncates toward zero, NaN and out-of-range
/// values give the dtype's minimum (x86 cvtt); int -> int wraps; -> bool tests != 0.
/// Float -> float keeps the double (the interpreter rounds f32 results itself).
Num num_cast(Num v, DType from, DType to);
bool num_truth(Num v, DType dt);
/// An element-wise op (ops.def rows, Cast, Where, Fma) of `args`, whose first argument has dtype
/// `first` (the operands of unary/binary ops share it: recording casts them). Float results are
/// the double reference values (not rounded to f32).
Num apply_elementwise(Op op, DType result, DType first, const Num* args);
/// Element `i` of a contiguous host array of `dt`, and the reverse.
Num load_num(const void* p, DType dt, int64_t i);
void store_num(void* p, DType dt, int64_t i, Num v);

/// One accumulator of a reduction: values of `value_dtype` fold into a result of `result_dtype`
/// (sum/prod of integers in wrapping int64, of floats in long double; max/min propagate NaN;
/// argmax/argmin give the position of the first extreme, a NaN counting as the extreme).
class Fold {
 public:
  Fold(ir::AccKind kind, DType value_dtype, DType result_dtype);
  void add(Num v, int64_t pos);
  /// The folded value in result_dtype (a float result is not rounded to f32).
  Num result() const;

 private:
  bool better(Num v) const;  // v replaces the current extreme
  ir::AccKind kind_;
  DType vdt_, rdt_;
  long double facc_ = 0;
  uint64_t iacc_ = 0;  // wraps: unsigned overflow is defined
  Num best_ = int_num(0);
  int64_t arg_ = 0;
  bool started_ = false;
};

}  // namespace kfuse::detail
