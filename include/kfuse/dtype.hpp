/** \file dtype.hpp
 * Element types, their traits and the type-promotion rules (NumPy/PyTorch style).
 *
 * The dtype layer is table driven: adding f16/bf16 *storage* later means one row in
 * KFUSE_DTYPES plus a load/store conversion in each backend; arithmetic on such types
 * happens in f32, exactly as PyTorch does on CPU.
 */
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace kfuse {

/// X-macro: enumerator, printed name, byte size, category (0 bool, 1 integer, 2 float).
#define KFUSE_DTYPES(X)   \
  X(Bool, "bool", 1, 0)   \
  X(I32, "i32", 4, 1)     \
  X(I64, "i64", 8, 1)     \
  X(F32, "f32", 4, 2)     \
  X(F64, "f64", 8, 2)

enum class DType : uint8_t {
#define KFUSE_X(e, n, s, c) e,
  KFUSE_DTYPES(KFUSE_X)
#undef KFUSE_X
};

/// Category of a dtype: the first key of promotion (bool < integer < float).
enum class DTypeCategory : uint8_t { Bool = 0, Integer = 1, Float = 2 };

const char* dtype_name(DType t);
size_t dtype_size(DType t);
DTypeCategory dtype_category(DType t);
inline bool is_float(DType t) { return dtype_category(t) == DTypeCategory::Float; }
inline bool is_integer(DType t) { return dtype_category(t) == DTypeCategory::Integer; }
inline bool is_bool(DType t) { return t == DType::Bool; }

/// The float type used when an integer or bool operand must become float (torch's default dtype).
constexpr DType kDefaultFloat = DType::F32;

/// Promotion of two tensor operands: higher category wins, then the larger size.
DType promote_types(DType a, DType b);

/// Promotion of a tensor with a C++ scalar of category `scalar_cat` ("weak" scalar, as in
/// PyTorch): the scalar only changes the result when its category is higher than the tensor's,
/// and then it gives the default type of that category (f32 for float, i64 for integer).
DType promote_with_scalar(DType tensor, DTypeCategory scalar_cat);

/// The smallest float type that holds `t` exactly enough for float-only math (f32 for
/// bool/int/f32, f64 for f64).
DType to_float_type(DType t);

/// C++ type -> DType mapping, for to_vector<T>(), from_data<T>() and friends.
template <typename T> struct dtype_of;
template <> struct dtype_of<bool> { static constexpr DType value = DType::Bool; };
template <> struct dtype_of<int32_t> { static constexpr DType value = DType::I32; };
template <> struct dtype_of<int64_t> { static constexpr DType value = DType::I64; };
template <> struct dtype_of<float> { static constexpr DType value = DType::F32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::F64; };
template <typename T> inline constexpr DType dtype_v = dtype_of<T>::value;

}  // namespace kfuse
