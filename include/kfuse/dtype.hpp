/** \file dtype.hpp
 * Element types, their traits and the type-promotion rules (NumPy/PyTorch style).
 *
 * The dtype layer is table driven: a dtype is one row in KFUSE_DTYPES. The 8- and 16-bit
 * dtypes (u8, i8, f16, bf16) are *storage* types: kernels compute on them in their compute
 * type (compute_type: i32 or f32) and round every result back to the storage type
 * (lib/ir/widen_narrow.cpp), so a backend only needs their loads, stores and casts.
 */
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "kfuse/half.hpp"

namespace kfuse {

/// X-macro: enumerator, printed name, byte size, category (0 bool, 1 integer, 2 float).
#define KFUSE_DTYPES(X) \
  X(Bool, "bool", 1, 0) \
  X(I32, "i32", 4, 1)   \
  X(I64, "i64", 8, 1)   \
  X(F32, "f32", 4, 2)   \
  X(F64, "f64", 8, 2)   \
  X(U8, "u8", 1, 1)     \
  X(I8, "i8", 1, 1)     \
  X(F16, "f16", 2, 2)   \
  X(BF16, "bf16", 2, 2)

enum class DType : uint8_t {
#define KFUSE_X(e, n, s, c) e,
  KFUSE_DTYPES(KFUSE_X)
#undef KFUSE_X
};

/// Category of a dtype: the first key of promotion (bool < integer < float).
enum class DTypeCategory : uint8_t { Bool = 0, Integer = 1, Float = 2 };

const char* dtype_name(DType t);
constexpr size_t dtype_size(DType t) {
  switch (t) {
#define KFUSE_X(e, n, s, c) \
  case DType::e: return s;
    KFUSE_DTYPES(KFUSE_X)
#undef KFUSE_X
  }
  return 0;
}
constexpr DTypeCategory dtype_category(DType t) {
  switch (t) {
#define KFUSE_X(e, n, s, c) \
  case DType::e: return static_cast<DTypeCategory>(c);
    KFUSE_DTYPES(KFUSE_X)
#undef KFUSE_X
  }
  return DTypeCategory::Bool;
}
constexpr bool is_float(DType t) { return dtype_category(t) == DTypeCategory::Float; }
constexpr bool is_integer(DType t) { return dtype_category(t) == DTypeCategory::Integer; }
constexpr bool is_bool(DType t) { return t == DType::Bool; }

/// The float type used when an integer or bool operand must become float (torch's default dtype).
constexpr DType kDefaultFloat = DType::F32;

/// The 8- and 16-bit storage dtypes (u8, i8, f16, bf16): kernels compute on them in
/// compute_type and round each result back.
constexpr bool is_narrow(DType t) { return t == DType::U8 || t == DType::I8 || t == DType::F16 || t == DType::BF16; }
/// The type kernels compute a dtype's values in: i32 for u8/i8, f32 for f16/bf16, else itself.
DType compute_type(DType t);

/// Promotion of two tensor operands: higher category wins, then the larger size. Two different
/// types of one size have no common smaller type: u8 with i8 gives i32 (PyTorch: i16, which
/// kfuse lacks) and f16 with bf16 gives f32 (as PyTorch).
DType promote_types(DType a, DType b);

/// Promotion of a tensor with a C++ scalar of category `scalar_cat` ("weak" scalar, as in
/// PyTorch): the scalar only changes the result when its category is higher than the tensor's,
/// and then it gives the default type of that category (f32 for float, i64 for integer).
DType promote_with_scalar(DType tensor, DTypeCategory scalar_cat);

/// The float type of float-only math on `t` (exp, division, ...): f32 for bool and integers,
/// the type itself for floats (f16 stays f16, as in PyTorch).
DType to_float_type(DType t);

/// C++ type -> DType mapping, for to_vector<T>(), from_data<T>() and friends.
template <typename T>
struct dtype_of;
template <>
struct dtype_of<bool> {
  static constexpr DType value = DType::Bool;
};
template <>
struct dtype_of<int32_t> {
  static constexpr DType value = DType::I32;
};
template <>
struct dtype_of<int64_t> {
  static constexpr DType value = DType::I64;
};
template <>
struct dtype_of<float> {
  static constexpr DType value = DType::F32;
};
template <>
struct dtype_of<double> {
  static constexpr DType value = DType::F64;
};
template <>
struct dtype_of<uint8_t> {
  static constexpr DType value = DType::U8;
};
template <>
struct dtype_of<int8_t> {
  static constexpr DType value = DType::I8;
};
template <>
struct dtype_of<half> {
  static constexpr DType value = DType::F16;
};
template <>
struct dtype_of<bfloat16> {
  static constexpr DType value = DType::BF16;
};
template <typename T>
inline constexpr DType dtype_v = dtype_of<T>::value;

}  // namespace kfuse
