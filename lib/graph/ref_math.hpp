// Double-precision reference definitions of the ops that are not a single libm call.
// Shared by the graph evaluator, constant folding and the kernel-IR interpreter.
#pragma once
#include <cmath>

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

}  // namespace kfuse::detail
