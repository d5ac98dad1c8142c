#include "random.hpp"

namespace kfuse::ir {

ExprRef random_value(DType dt, bool normal, const ExprRef& seed, const ExprRef& counter) {
  if (!normal && is_narrow(dt)) {
    // f16 / bf16 keep the top 11 / 8 bits (core/random.hpp): the f32 value (24 bits) truncated
    // to them, exactly, then stored; more bits would round up to 1.0 now and then.
    const double scale = dt == DType::F16 ? 2048.0 : 256.0;
    const DType f = DType::F32;
    ExprRef top = op(Op::Floor, f, {op(Op::Mul, f, {rand_uniform(f, seed, counter), constant(scale, f)})});
    return op(Op::Cast, dt, {op(Op::Mul, f, {top, constant(1.0 / scale, f)})});
  }
  if (!normal) return rand_uniform(dt, seed, counter);
  const DType d = DType::F64;  // the reference computes in f64 and rounds once at the end
  ExprRef twice = imul(counter, iconst(2));
  ExprRef u1 = rand_uniform(d, seed, twice), u2 = rand_uniform(d, seed, iadd(twice, iconst(1)));
  // sqrt(-2 * log1p(-u1)) * cos(2 pi * u2), operation for operation as counter_normal
  ExprRef radius = op(Op::Sqrt, d, {op(Op::Mul, d, {constant(-2.0, d), op(Op::Log1p, d, {op(Op::Neg, d, {u1})})})});
  ExprRef angle = op(Op::Mul, d, {constant(6.283185307179586, d), u2});
  ExprRef v = op(Op::Mul, d, {radius, op(Op::Cos, d, {angle})});
  return dt == d ? v : op(Op::Cast, dt, {v});
}

}  // namespace kfuse::ir
