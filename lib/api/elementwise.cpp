// Recording of element-wise ops: dtype rules (from ops.def), broadcasting, scalar operands.
#include <cmath>

#include "graph/intern.hpp"
#include "record.hpp"

namespace kfuse {
using namespace detail;

namespace {

enum class Rule { Arith, ArithBool, FloatMath, Compare, Logical, Rounding, Bitwise, Shift };

// Case labels in a macro body: clang-format 14 would run them into the next line.
// clang-format off
Rule rule_of(Op op) {
  switch (op) {
#define KFUSE_UNARY_OP(name, str, rule, expr, tol) \
  case Op::name: return Rule::rule;
#define KFUSE_BINARY_OP(name, str, rule, expr, tol) \
  case Op::name: return Rule::rule;
#include "kfuse/ops.def"
    default: throw InternalError(std::string("rule_of: not an element-wise op: ") + op_name(op));
  }
}
// clang-format on

// The dtype the operands are converted to before the op, the result dtype, and the op recorded
// (a bitwise op of bools records its logical op: one form of bool logic for every backend).
struct Typing {
  DType operand;
  DType result;
  Op op;
};

Op logical_form(Op op) {
  switch (op) {
    case Op::BitAnd: return Op::And;
    case Op::BitOr: return Op::Or;
    case Op::BitXor: return Op::Ne;
    case Op::BitNot: return Op::Not;
    default: throw InternalError(std::string("logical_form: ") + op_name(op));
  }
}

// `describe` builds the "op(operands)" text of an error message; it runs only when one is thrown,
// so the successful path builds no vector of Tensors.
template <typename Describe>
Typing type_op(Op op, DType promoted, Describe&& describe) {
  const Rule rule = rule_of(op);
  switch (rule) {
    case Rule::Arith:
    case Rule::Rounding:
      if (promoted == DType::Bool)
        throw UserError(describe() +
                        ": arithmetic is not defined on bool tensors; cast to an integer or float dtype first");
      return {promoted, promoted, op};
    case Rule::ArithBool: return {promoted, promoted, op};
    case Rule::FloatMath: {
      DType f = is_float(promoted) ? promoted : kDefaultFloat;
      return {f, f, op};
    }
    case Rule::Compare: return {promoted, DType::Bool, op};
    case Rule::Logical: return {DType::Bool, DType::Bool, op};
    case Rule::Bitwise:
    case Rule::Shift:
      if (is_float(promoted))
        throw UserError(describe() + ": " + op_name(op) + " is defined on integer" +
                        (rule == Rule::Bitwise ? " and bool" : "") + " tensors only, not " + dtype_name(promoted) +
                        "; cast the operands to an integer dtype first (x.cast(DType::I32))");
      if (promoted != DType::Bool) return {promoted, promoted, op};
      if (rule == Rule::Shift)
        throw UserError(describe() + ": " + op_name(op) +
                        " is not defined on bool tensors; cast the operands to an integer dtype first");
      return {DType::Bool, DType::Bool, logical_form(op)};
  }
  throw InternalError("type_op: bad rule");
}

Tensor unary(Op op, const Tensor& x) {
  require_defined(op_name(op), x);
  Typing ty = type_op(op, x.dtype(), [&] { return describe_call(op_name(op), {x}); });
  if (rule_of(op) == Rule::Rounding && is_integer(ty.operand)) return x;  // floor/ceil/round of ints
  NodeRef in[1] = {x.dtype() == ty.operand ? x.node() : x.cast(ty.operand).node()};
  // Interned from borrowed parts: the node copies x's shape into a recycled vector and takes
  // over `in`, so recording allocates nothing beyond the node itself.
  return Tensor(intern_node(NodeKey{ty.op, ty.result, in[0]->device, x.shape(), in, {}, {}}, in));
}

// The operand as `dt` broadcast to `shape` (no node when it already is).
NodeRef operand_node(const Tensor& t, DType dt, const Shape& shape) {
  if (t.dtype() == dt && t.shape() == shape) return t.node();
  return broadcast_to_shape(cast_if_needed(t, dt), shape).node();
}

Tensor binary_typed(Op op, const Tensor& a, const Tensor& b, DType promoted) {
  if (a.device() != b.device()) common_device(op_name(op), {a, b});  // throws
  Typing ty = type_op(op, promoted, [&] { return describe_call(op_name(op), {a, b}); });
  const bool same = a.shape() == b.shape();
  Shape broadcast = same ? Shape() : broadcast_shapes(op_name(op), a, b);
  const Shape& out = same ? a.shape() : broadcast;
  NodeRef in[2] = {operand_node(a, ty.operand, out), operand_node(b, ty.operand, out)};
  return Tensor(intern_node(NodeKey{ty.op, ty.result, in[0]->device, out, in, {}, {}}, in));
}

Tensor binary(Op op, const Tensor& a, const Tensor& b) {
  require_defined(op_name(op), a);
  require_defined(op_name(op), b);
  return binary_typed(op, a, b, promote_types(a.dtype(), b.dtype()));
}

// Whether `v` (integral) is a value of the integer dtype `t`. The bounds are powers of two, exact
// in a double; 2^63 itself rounds from INT64_MAX and is out of range.
bool fits_integer(double v, DType t) {
  switch (t) {
    case DType::U8: return v >= 0 && v < 256;
    case DType::I8: return v >= -128 && v < 128;
    case DType::I32: return v >= -2147483648.0 && v < 2147483648.0;
    default: return v >= -9223372036854775808.0 && v < 9223372036854775808.0;
  }
}

// The dtype of `tensor op scalar`: the scalar is weak (promote_with_scalar). A double with an
// integral value counts as an integer, unless it is outside the integer dtype it would be
// converted to (i32 * 3e9, bool * 1e30): then it counts as a float, so the result is f32 and not
// a silently wrapped or saturated constant.
DType scalar_promotion(DType tensor, double v) {
  if (!std::isfinite(v) || v != std::nearbyint(v)) return promote_with_scalar(tensor, DTypeCategory::Float);
  DType as_int = promote_with_scalar(tensor, DTypeCategory::Integer);
  if (is_integer(as_int) && !fits_integer(v, as_int)) return promote_with_scalar(tensor, DTypeCategory::Float);
  return as_int;
}

// Tensor-scalar op: the scalar becomes a constant node of the promoted dtype.
Tensor binary_scalar(Op op, const Tensor& a, double s, bool scalar_first = false) {
  require_defined(op_name(op), a);
  DType promoted = scalar_promotion(a.dtype(), s);
  Tensor c = make_const(s, promoted, a.shape(), a.device());
  return scalar_first ? binary_typed(op, c, a, promoted) : binary_typed(op, a, c, promoted);
}

// Tensor-integer op of the bitwise rules: the scalar takes the tensor's integer dtype (a weak
// scalar, as for arithmetic; bool tensors take i64), so it must be a value of that dtype, and
// exact in the double a constant node holds.
Tensor bitwise_scalar(Op op, const Tensor& a, int64_t s, bool scalar_first = false) {
  require_defined(op_name(op), a);
  DType promoted = promote_with_scalar(a.dtype(), DTypeCategory::Integer);
  const auto v = static_cast<double>(s);
  if (!is_float(promoted) && (!fits_integer(v, promoted) || std::fabs(v) > 0x1p53))
    throw UserError(std::string(op_name(op)) + "(" + describe(a) + ", " + std::to_string(s) + "): the scalar " +
                    std::to_string(s) + " is not a value of " + dtype_name(promoted) +
                    (std::fabs(v) > 0x1p53 ? " that a scalar constant holds exactly (|s| <= 2^53)" : "") +
                    "; cast the tensor to a wider integer dtype or pass the scalar as a tensor");
  Tensor c = make_const(v, promoted, a.shape(), a.device());  // (a float tensor: type_op refuses it)
  return scalar_first ? binary_typed(op, c, a, promoted) : binary_typed(op, a, c, promoted);
}

}  // namespace

#define KFUSE_DEFINE_UNARY(fn, op) \
  Tensor fn(const Tensor& x) { return unary(Op::op, x); }
KFUSE_DEFINE_UNARY(neg, Neg)
KFUSE_DEFINE_UNARY(abs, Abs)
KFUSE_DEFINE_UNARY(exp, Exp)
KFUSE_DEFINE_UNARY(exp2, Exp2)
KFUSE_DEFINE_UNARY(log, Log)
KFUSE_DEFINE_UNARY(log2, Log2)
KFUSE_DEFINE_UNARY(log1p, Log1p)
KFUSE_DEFINE_UNARY(expm1, Expm1)
KFUSE_DEFINE_UNARY(sqrt, Sqrt)
KFUSE_DEFINE_UNARY(rsqrt, Rsqrt)
KFUSE_DEFINE_UNARY(reciprocal, Recip)
KFUSE_DEFINE_UNARY(square, Square)
KFUSE_DEFINE_UNARY(sin, Sin)
KFUSE_DEFINE_UNARY(cos, Cos)
KFUSE_DEFINE_UNARY(tanh, Tanh)
KFUSE_DEFINE_UNARY(sigmoid, Sigmoid)
KFUSE_DEFINE_UNARY(relu, Relu)
KFUSE_DEFINE_UNARY(silu, Silu)
KFUSE_DEFINE_UNARY(erf, Erf)
KFUSE_DEFINE_UNARY(floor, Floor)
KFUSE_DEFINE_UNARY(ceil, Ceil)
KFUSE_DEFINE_UNARY(round, Round)
KFUSE_DEFINE_UNARY(sign, Sign)
KFUSE_DEFINE_UNARY(logical_not, Not)
KFUSE_DEFINE_UNARY(bitwise_not, BitNot)
#undef KFUSE_DEFINE_UNARY

Tensor gelu(const Tensor& x, bool approximate_tanh) { return unary(approximate_tanh ? Op::GeluTanh : Op::GeluErf, x); }

#define KFUSE_DEFINE_BINARY(fn, op) \
  Tensor fn(const Tensor& a, const Tensor& b) { return binary(Op::op, a, b); }
KFUSE_DEFINE_BINARY(add, Add)
KFUSE_DEFINE_BINARY(sub, Sub)
KFUSE_DEFINE_BINARY(mul, Mul)
KFUSE_DEFINE_BINARY(div, Div)
KFUSE_DEFINE_BINARY(pow, Pow)
KFUSE_DEFINE_BINARY(maximum, Maximum)
KFUSE_DEFINE_BINARY(minimum, Minimum)
KFUSE_DEFINE_BINARY(eq, Eq)
KFUSE_DEFINE_BINARY(ne, Ne)
KFUSE_DEFINE_BINARY(lt, Lt)
KFUSE_DEFINE_BINARY(le, Le)
KFUSE_DEFINE_BINARY(gt, Gt)
KFUSE_DEFINE_BINARY(ge, Ge)
KFUSE_DEFINE_BINARY(logical_and, And)
KFUSE_DEFINE_BINARY(logical_or, Or)
KFUSE_DEFINE_BINARY(bitwise_and, BitAnd)
KFUSE_DEFINE_BINARY(bitwise_or, BitOr)
KFUSE_DEFINE_BINARY(bitwise_xor, BitXor)
KFUSE_DEFINE_BINARY(shift_left, Shl)
KFUSE_DEFINE_BINARY(shift_right, Shr)
#undef KFUSE_DEFINE_BINARY

Tensor add(const Tensor& a, double b) { return binary_scalar(Op::Add, a, b); }
Tensor sub(const Tensor& a, double b) { return binary_scalar(Op::Sub, a, b); }
Tensor mul(const Tensor& a, double b) { return binary_scalar(Op::Mul, a, b); }
Tensor div(const Tensor& a, double b) { return binary_scalar(Op::Div, a, b); }
Tensor maximum(const Tensor& a, double b) { return binary_scalar(Op::Maximum, a, b); }
Tensor minimum(const Tensor& a, double b) { return binary_scalar(Op::Minimum, a, b); }
Tensor bitwise_and(const Tensor& a, int64_t b) { return bitwise_scalar(Op::BitAnd, a, b); }
Tensor bitwise_or(const Tensor& a, int64_t b) { return bitwise_scalar(Op::BitOr, a, b); }
Tensor bitwise_xor(const Tensor& a, int64_t b) { return bitwise_scalar(Op::BitXor, a, b); }
Tensor shift_left(const Tensor& a, int64_t count) { return bitwise_scalar(Op::Shl, a, count); }
Tensor shift_right(const Tensor& a, int64_t count) { return bitwise_scalar(Op::Shr, a, count); }
Tensor pow(const Tensor& a, double e) {
  if (e == 2.0) {
    Tensor f = is_float(a.dtype()) ? a : cast_if_needed(a, kDefaultFloat);
    return square(f);
  }
  return binary_scalar(Op::Pow, a, e);
}

Tensor clamp(const Tensor& x, std::optional<double> lo, std::optional<double> hi) {
  require_defined("clamp", x);
  if (lo && hi && *lo > *hi)
    throw UserError("clamp(" + describe(x) + "): lower bound " + num_str(*lo) + " exceeds upper bound " + num_str(*hi) +
                    "; pass lo <= hi");
  Tensor r = x;
  if (lo) r = maximum(r, *lo);
  if (hi) r = minimum(r, *hi);
  return r;
}

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  require_defined("where", cond);
  require_defined("where", a);
  require_defined("where", b);
  common_device("where", {cond, a, b});
  if (cond.dtype() != DType::Bool)
    throw UserError(describe_call("where", {cond, a, b}) +
                    ": the condition must be bool; compare it (x != 0) or cast it to bool first");
  DType dt = promote_types(a.dtype(), b.dtype());
  Shape s = broadcast_shapes("where", a, b);
  Shape out = broadcast_shapes("where", cond, Tensor(make_node(Op::Const, dt, s, {}, Attrs{{}, {0.0}})));
  return record(Op::Where, dt, out,
                {broadcast_to_shape(cond, out), broadcast_to_shape(cast_if_needed(a, dt), out),
                 broadcast_to_shape(cast_if_needed(b, dt), out)});
}

Tensor fma(const Tensor& a, const Tensor& b, const Tensor& c) {
  require_defined("fma", a);
  require_defined("fma", b);
  require_defined("fma", c);
  common_device("fma", {a, b, c});
  const DType dt = promote_types(promote_types(a.dtype(), b.dtype()), c.dtype());
  if (dt == DType::Bool)
    throw UserError(describe_call("fma", {a, b, c}) +
                    ": arithmetic is not defined on bool tensors; cast to an integer or float dtype first");
  const Shape out = broadcast_shapes("fma", c, make_const(0.0, dt, broadcast_shapes("fma", a, b)));
  return record_nodes(Op::Fma, dt, out, {operand_node(a, dt, out), operand_node(b, dt, out), operand_node(c, dt, out)});
}

Tensor cast(const Tensor& x, DType t) {
  require_defined("cast", x);
  if (x.dtype() == t) return x;
  return record(Op::Cast, t, x.shape(), {x});
}

Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator-(const Tensor& a) { return neg(a); }
Tensor operator+(const Tensor& a, double b) { return add(a, b); }
Tensor operator-(const Tensor& a, double b) { return sub(a, b); }
Tensor operator*(const Tensor& a, double b) { return mul(a, b); }
Tensor operator/(const Tensor& a, double b) { return div(a, b); }
Tensor operator+(double a, const Tensor& b) { return binary_scalar(Op::Add, b, a, true); }
Tensor operator-(double a, const Tensor& b) { return binary_scalar(Op::Sub, b, a, true); }
Tensor operator*(double a, const Tensor& b) { return binary_scalar(Op::Mul, b, a, true); }
Tensor operator/(double a, const Tensor& b) { return binary_scalar(Op::Div, b, a, true); }
Tensor operator==(const Tensor& a, const Tensor& b) { return eq(a, b); }
Tensor operator!=(const Tensor& a, const Tensor& b) { return ne(a, b); }
Tensor operator<(const Tensor& a, const Tensor& b) { return lt(a, b); }
Tensor operator<=(const Tensor& a, const Tensor& b) { return le(a, b); }
Tensor operator>(const Tensor& a, const Tensor& b) { return gt(a, b); }
Tensor operator>=(const Tensor& a, const Tensor& b) { return ge(a, b); }
Tensor operator==(const Tensor& a, double b) { return binary_scalar(Op::Eq, a, b); }
Tensor operator!=(const Tensor& a, double b) { return binary_scalar(Op::Ne, a, b); }
Tensor operator<(const Tensor& a, double b) { return binary_scalar(Op::Lt, a, b); }
Tensor operator<=(const Tensor& a, double b) { return binary_scalar(Op::Le, a, b); }
Tensor operator>(const Tensor& a, double b) { return binary_scalar(Op::Gt, a, b); }
Tensor operator>=(const Tensor& a, double b) { return binary_scalar(Op::Ge, a, b); }
Tensor operator&(const Tensor& a, const Tensor& b) { return bitwise_and(a, b); }
Tensor operator|(const Tensor& a, const Tensor& b) { return bitwise_or(a, b); }
Tensor operator^(const Tensor& a, const Tensor& b) { return bitwise_xor(a, b); }
Tensor operator<<(const Tensor& a, const Tensor& b) { return shift_left(a, b); }
Tensor operator>>(const Tensor& a, const Tensor& b) { return shift_right(a, b); }
Tensor operator~(const Tensor& a) { return bitwise_not(a); }
Tensor operator&(const Tensor& a, int64_t b) { return bitwise_and(a, b); }
Tensor operator|(const Tensor& a, int64_t b) { return bitwise_or(a, b); }
Tensor operator^(const Tensor& a, int64_t b) { return bitwise_xor(a, b); }
Tensor operator<<(const Tensor& a, int64_t count) { return shift_left(a, count); }
Tensor operator>>(const Tensor& a, int64_t count) { return shift_right(a, count); }
Tensor operator&(int64_t a, const Tensor& b) { return bitwise_scalar(Op::BitAnd, b, a, true); }
Tensor operator|(int64_t a, const Tensor& b) { return bitwise_scalar(Op::BitOr, b, a, true); }
Tensor operator^(int64_t a, const Tensor& b) { return bitwise_scalar(Op::BitXor, b, a, true); }

}  // namespace kfuse
