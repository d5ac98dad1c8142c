// Double-precision reference definitions of the ops that are not a single libm call.
// Shared by the graph evaluator, constant folding and the kernel-IR interpreter.
#pragma once
#include <cmath>
#include <cstdint>

namespace kfuse::detail {

inline double ref_sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
// NaN propagates (torch.relu(nan) is nan); relu(-0) is +0.
inline double ref_relu(double x) { return x > 0.0 ? x : (std::isnan(x) ? x : 0.0); }
inline double ref_gelu_tanh(double x) {
  constexpr double k = 0.7978845608028654;  // sqrt(2/pi)
  return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
}
inline double ref_gelu_erf(double x) { return 0.5 * x * (1.0 + std::erf(x * 0.7071067811865476)); }
inline double ref_sign(double x) { return x > 0.0 ? 1.0 : (x < 0.0 ? -1.0 : x); }
// IEEE-propagating max/min (torch.maximum semantics: NaN wins).
inline double ref_maximum(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return NAN;
  return a > b ? a : b;
}
inline double ref_minimum(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return NAN;
  return a < b ? a : b;
}

// Shifts of an integer `v` of a dtype `bits` wide (8, 32 or 64), `v` within the dtype's range
// (so its int64 sign is the dtype's: u8 values are >= 0 and their arithmetic right shift is the
// logical one). A count outside [0, bits) gives 0 (left) or the sign fill (right), PyTorch's
// CPU rule; C++ never shifts by the width or more. The left result still wraps to the dtype.
inline int64_t int_shift_left(int64_t v, int64_t count, int bits) {
  return count < 0 || count >= bits ? 0 : static_cast<int64_t>(static_cast<uint64_t>(v) << count);
}
inline int64_t int_shift_right(int64_t v, int64_t count, int bits) {
  return count < 0 || count >= bits ? (v < 0 ? -1 : 0) : v >> count;
}

// The double forms of the bitwise rows of ops.def: the i64 rule on the (truncated) values; a
// non-finite or out-of-range double counts as INT64_MIN (the float -> i64 cast rule). Recording
// gives these ops integer operands only, which the evaluator computes exactly instead.
inline int64_t ref_to_i64(double x) {
  return std::isfinite(x) && std::fabs(x) < 0x1p63 ? static_cast<int64_t>(x) : INT64_MIN;
}
inline double ref_bitwise_not(double x) { return static_cast<double>(~ref_to_i64(x)); }
inline double ref_bitwise_and(double a, double b) { return static_cast<double>(ref_to_i64(a) & ref_to_i64(b)); }
inline double ref_bitwise_or(double a, double b) { return static_cast<double>(ref_to_i64(a) | ref_to_i64(b)); }
inline double ref_bitwise_xor(double a, double b) { return static_cast<double>(ref_to_i64(a) ^ ref_to_i64(b)); }
inline double ref_shift_left(double a, double b) {
  return static_cast<double>(int_shift_left(ref_to_i64(a), ref_to_i64(b), 64));
}
inline double ref_shift_right(double a, double b) {
  return static_cast<double>(int_shift_right(ref_to_i64(a), ref_to_i64(b), 64));
}

}  // namespace kfuse::detail
