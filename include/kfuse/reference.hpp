/** \file reference.hpp
 * The double-precision reference evaluator: the oracle of every differential test.
 *
 * It evaluates the graph op by op, floats in double (sums and products accumulate in long
 * double), integers exactly in int64 wrapped to their dtype, independent of fusion and code
 * generation. Float results are not rounded to f32. The values returned here are doubles, so an
 * i64 result beyond 2^53 is rounded on the way out (comparisons and argmax inside are exact).
 */
#pragma once
#include <vector>

#include "kfuse/tensor.hpp"

namespace kfuse {

/// The values of `t` (row-major), recomputed from its sources.
std::vector<double> reference_values(const Tensor& t);
/// Several tensors at once, sharing common subexpressions.
std::vector<std::vector<double>> reference_values(const std::vector<Tensor>& ts);

}  // namespace kfuse
