/** \file reference.hpp
 * The double-precision reference evaluator: the oracle of every differential test.
 *
 * It evaluates the graph op by op in double (sums and products accumulate in long double),
 * independent of fusion and code generation. Integer results are wrapped to their dtype; float
 * results are not rounded to f32. Integers are exact up to 2^53.
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
