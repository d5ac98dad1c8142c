/** \file half.hpp
 * The 16-bit float element types `kfuse::half` (IEEE binary16, dtype f16) and
 * `kfuse::bfloat16` (the top half of an f32, dtype bf16): bit storage plus exact conversions.
 *
 * These functions are the one software conversion of the project: the C++ API, the reference
 * evaluator and the tests use them, and the compiled backends must agree with them bit for bit.
 * Rules:
 *  - float -> f16/bf16 rounds to nearest, ties to even; values beyond the largest finite value
 *    (after rounding) give +-inf; f16 results below its normal range become f16 subnormals
 *    (never flushed to zero); the sign of zero is kept.
 *  - A NaN stays a NaN with its sign and the top bits of its payload, and the result is always
 *    a quiet NaN (the quiet bit is set), as x86 F16C and AVX-512 BF16 do.
 *  - f16/bf16 -> float is exact (every f16 and bf16 value is an f32 value). f16 NaNs come back
 *    quiet with their payload; bf16 -> f32 is a plain 16-bit shift, so the bits come back unchanged.
 *  - double -> f16/bf16 rounds to f32 first (like PyTorch), so a double within half an f32 ulp
 *    of an f16 tie can round twice.
 */
#pragma once
#include <cstdint>

namespace kfuse {

uint16_t float_to_f16_bits(float f);
float f16_bits_to_float(uint16_t h);
uint16_t float_to_bf16_bits(float f);
float bf16_bits_to_float(uint16_t h);

/// A 16-bit float element: bit storage and the conversions `To`/`From` (no arithmetic: convert
/// to float). Two instantiations, so `half` and `bfloat16` are distinct types.
template <uint16_t (*To)(float), float (*From)(uint16_t)>
struct float16_storage {
  uint16_t bits = 0;
  float16_storage() = default;
  explicit float16_storage(float f) : bits(To(f)) {}
  explicit float16_storage(double d) : float16_storage(static_cast<float>(d)) {}
  static float16_storage from_bits(uint16_t b) {
    float16_storage h;
    h.bits = b;
    return h;
  }
  explicit operator float() const { return From(bits); }
  explicit operator double() const { return static_cast<double>(From(bits)); }
};
using half = float16_storage<float_to_f16_bits, f16_bits_to_float>;        ///< dtype f16
using bfloat16 = float16_storage<float_to_bf16_bits, bf16_bits_to_float>;  ///< dtype bf16

}  // namespace kfuse
