#include "exact_value.hpp"

#include <cmath>

#include "../graph/ref_math.hpp"
#include "kfuse/error.hpp"
#include "kfuse/tensor.hpp"
#include "reference_eval.hpp"

namespace kfuse::detail {

int64_t wrap_to(uint64_t v, DType dt) {
  switch (dt) {
    case DType::Bool: return v != 0;
    case DType::I32: return static_cast<int32_t>(static_cast<uint32_t>(v));
    case DType::U8: return static_cast<uint8_t>(v);
    case DType::I8: return static_cast<int8_t>(static_cast<uint8_t>(v));
    default: return static_cast<int64_t>(v);
  }
}

double num_to_double(Num v, DType dt) { return is_float(dt) ? v.f : static_cast<double>(v.i); }

Num num_from_double(double v, DType dt) {
  if (!is_float(dt) && dt != DType::Bool && std::isfinite(v) && v == std::trunc(v) && std::fabs(v) < 0x1p63)
    return int_num(wrap_to(static_cast<uint64_t>(static_cast<int64_t>(v)), dt));
  return num_cast(float_num(v), DType::F64, dt);
}

Num num_cast(Num v, DType from, DType to) {
  if (to == DType::Bool) return int_num(num_truth(v, from));
  if (is_float(from)) {
    if (to == DType::F16 || to == DType::BF16) return float_num(round_to_dtype(v.f, to));
    if (is_float(to)) return v;
    if (to != DType::I64) {  // i32, u8, i8: the i32 rule, then wrap
      int32_t t;
      convert_to(&v.f, DType::F64, &t, DType::I32, 1);
      return int_num(wrap_to(static_cast<uint64_t>(static_cast<int64_t>(t)), to));
    }
    int64_t t;
    convert_to(&v.f, DType::F64, &t, DType::I64, 1);
    return int_num(t);
  }
  if (to == DType::F32) return float_num(static_cast<float>(v.i));
  if (to == DType::F64) return float_num(static_cast<double>(v.i));
  if (is_float(to)) return float_num(round_to_dtype(static_cast<float>(v.i), to));  // f16/bf16 via f32
  return int_num(wrap_to(static_cast<uint64_t>(v.i), to));
}

bool num_truth(Num v, DType dt) { return is_float(dt) ? v.f != 0.0 : v.i != 0; }  // NaN is true

namespace {

// Bits of an integer dtype (the shift width; bool, refused for shifts at recording, counts 1).
int int_bits(DType dt) {
  switch (dt) {
    case DType::U8:
    case DType::I8: return 8;
    case DType::I32: return 32;
    case DType::Bool: return 1;
    default: return 64;
  }
}

// A double reference value as an element of `result` (the float path of every op).
Num from_ref(double r, DType result) { return is_float(result) ? float_num(r) : num_from_double(r, result); }

// Integer and bool operands: exact int64 arithmetic, wrapped to the result dtype. Ops without
// an integer meaning (FloatMath: recording makes their operands float) fall back to double.
Num int_unary(Op op, DType result, int64_t x) {
  uint64_t u = static_cast<uint64_t>(x);
  switch (op) {
    case Op::Neg: return int_num(wrap_to(0 - u, result));
    case Op::Abs: return int_num(wrap_to(x < 0 ? 0 - u : u, result));  // abs(INT_MIN) is INT_MIN
    case Op::Square: return int_num(wrap_to(u * u, result));
    case Op::Relu: return int_num(x > 0 ? x : 0);
    case Op::Sign: return int_num((x > 0) - (x < 0));
    case Op::Floor:
    case Op::Ceil:
    case Op::Round: return int_num(x);
    case Op::Not: return int_num(x == 0);
    case Op::BitNot: return int_num(result == DType::Bool ? x == 0 : wrap_to(~u, result));
    default: return from_ref(unary_ref(op, static_cast<double>(x)), result);
  }
}

Num int_binary(Op op, DType result, int64_t a, int64_t b) {
  uint64_t ua = static_cast<uint64_t>(a), ub = static_cast<uint64_t>(b);
  switch (op) {
    case Op::Add: return int_num(wrap_to(ua + ub, result));
    case Op::Sub: return int_num(wrap_to(ua - ub, result));
    case Op::Mul: return int_num(wrap_to(ua * ub, result));
    case Op::Maximum: return int_num(a > b ? a : b);
    case Op::Minimum: return int_num(a < b ? a : b);
    case Op::Eq: return int_num(a == b);
    case Op::Ne: return int_num(a != b);
    case Op::Lt: return int_num(a < b);
    case Op::Le: return int_num(a <= b);
    case Op::Gt: return int_num(a > b);
    case Op::Ge: return int_num(a >= b);
    case Op::And: return int_num(a != 0 && b != 0);
    case Op::Or: return int_num(a != 0 || b != 0);
    // Operands are within `result` (recording casts them to it), so and/or/xor stay in range.
    case Op::BitAnd: return int_num(a & b);
    case Op::BitOr: return int_num(a | b);
    case Op::BitXor: return int_num(a ^ b);
    case Op::Shl: return int_num(wrap_to(static_cast<uint64_t>(int_shift_left(a, b, int_bits(result))), result));
    case Op::Shr: return int_num(int_shift_right(a, b, int_bits(result)));
    default: return from_ref(binary_ref(op, static_cast<double>(a), static_cast<double>(b)), result);
  }
}

}  // namespace

Num apply_elementwise(Op op, DType result, DType first, const Num* args) {
  if (op == Op::Cast) return num_cast(args[0], first, result);
  if (op == Op::Where) return num_truth(args[0], first) ? args[1] : args[2];
  if (op == Op::Fma) {  // (the reference is fp64 throughout: one rounding, to double)
    if (is_float(first)) return from_ref(std::fma(args[0].f, args[1].f, args[2].f), result);
    const auto u = [&](int i) { return static_cast<uint64_t>(args[i].i); };
    return int_num(wrap_to(u(0) * u(1) + u(2), result));
  }
  if (op_arity(op) == 1)
    return is_float(first) ? from_ref(unary_ref(op, args[0].f), result) : int_unary(op, result, args[0].i);
  return is_float(first) ? from_ref(binary_ref(op, args[0].f, args[1].f), result)
                         : int_binary(op, result, args[0].i, args[1].i);
}

Num load_num(const void* p, DType dt, int64_t i) {
  switch (dt) {
    case DType::Bool: return int_num(static_cast<const uint8_t*>(p)[i] != 0);
    case DType::I32: return int_num(static_cast<const int32_t*>(p)[i]);
    case DType::I64: return int_num(static_cast<const int64_t*>(p)[i]);
    case DType::F32: return float_num(static_cast<const float*>(p)[i]);
    case DType::F64: return float_num(static_cast<const double*>(p)[i]);
    case DType::U8: return int_num(static_cast<const uint8_t*>(p)[i]);
    case DType::I8: return int_num(static_cast<const int8_t*>(p)[i]);
    case DType::F16: return float_num(static_cast<double>(static_cast<const half*>(p)[i]));
    case DType::BF16: return float_num(static_cast<double>(static_cast<const bfloat16*>(p)[i]));
  }
  throw InternalError("load_num: bad dtype");
}

void store_num(void* p, DType dt, int64_t i, Num v) {
  switch (dt) {
    case DType::Bool: static_cast<uint8_t*>(p)[i] = v.i != 0; break;
    case DType::I32: static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v.i); break;
    case DType::I64: static_cast<int64_t*>(p)[i] = v.i; break;
    case DType::F32: static_cast<float*>(p)[i] = static_cast<float>(v.f); break;
    case DType::F64: static_cast<double*>(p)[i] = v.f; break;
    case DType::U8: static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(v.i); break;
    case DType::I8: static_cast<int8_t*>(p)[i] = static_cast<int8_t>(static_cast<uint8_t>(v.i)); break;
    case DType::F16: static_cast<half*>(p)[i] = half(v.f); break;  // through f32, as num_cast
    case DType::BF16: static_cast<bfloat16*>(p)[i] = bfloat16(v.f); break;
  }
}

Fold::Fold(ir::AccKind kind, DType value_dtype, DType result_dtype)
    : kind_(kind), vdt_(value_dtype), rdt_(result_dtype) {
  if (kind_ == ir::AccKind::Prod) facc_ = 1, iacc_ = 1;
}

bool Fold::better(Num v) const {
  bool max = kind_ == ir::AccKind::Max || kind_ == ir::AccKind::ArgMax;
  if (!is_float(vdt_)) return max ? v.i > best_.i : v.i < best_.i;
  // NaN: the first NaN becomes the extreme and stays it.
  if (std::isnan(best_.f)) return false;
  return std::isnan(v.f) || (max ? v.f > best_.f : v.f < best_.f);
}

void Fold::add(Num v, int64_t pos) {
  switch (kind_) {
    case ir::AccKind::Sum:
    case ir::AccKind::Prod: {
      bool sum = kind_ == ir::AccKind::Sum;
      if (is_float(rdt_)) {
        long double x = num_to_double(v, vdt_);
        facc_ = sum ? facc_ + x : facc_ * x;
      } else {
        uint64_t x = static_cast<uint64_t>(num_cast(v, vdt_, DType::I64).i);
        iacc_ = sum ? iacc_ + x : iacc_ * x;
      }
      return;
    }
    default:
      if (!started_ || better(v)) {
        best_ = v;
        arg_ = pos;
      }
      started_ = true;
  }
}

Num Fold::result() const {
  switch (kind_) {
    case ir::AccKind::Sum:
    case ir::AccKind::Prod:
      return is_float(rdt_) ? float_num(static_cast<double>(facc_)) : int_num(wrap_to(iacc_, rdt_));
    case ir::AccKind::ArgMax:
    case ir::AccKind::ArgMin: return int_num(arg_);
    default: return num_cast(best_, vdt_, rdt_);
  }
}

}  // namespace kfuse::detail
