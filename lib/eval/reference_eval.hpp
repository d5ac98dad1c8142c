// The graph evaluator behind reference.hpp, also the executor's path for opaque and source
// ops until a backend takes them.
#pragma once
#include <functional>
#include <unordered_map>
#include <vector>

#include "kfuse/node.hpp"

namespace kfuse::detail {

using ValueMap = std::unordered_map<const Node*, std::vector<double>>;

/// Evaluates `roots` in double. When `use_realized`, nodes with a realized value act as leaves.
ValueMap evaluate_reference(const std::vector<const Node*>& roots, bool use_realized);

/// Evaluates one node whose inputs' values are given (in input order).
std::vector<double> evaluate_node(const Node& n, const std::vector<const std::vector<double>*>& inputs);

/// The fp64 reference of an element-wise op of the op table (ops.def), before dtype rounding.
double unary_ref(Op op, double x);
double binary_ref(Op op, double a, double b);
/// Cast semantics: float -> integer truncates (NaN and out-of-range give the dtype's minimum),
/// integer -> integer wraps, -> bool tests != 0; float targets keep the double value.
double cast_value(double v, DType from, DType to);

/// Converts a storage's elements to double (copied from device memory first when the storage
/// lives on a GPU; the evaluator reads device tensors' values this way).
std::vector<double> storage_to_double(const Storage& s);
/// Converts doubles to a new storage of `dt` (with the dtype's rounding/wrapping).
std::shared_ptr<Storage> double_to_storage(const std::vector<double>& v, DType dt);
/// The value `v` takes when stored in `dt` (wraps integers, rounds f32).
double round_to_dtype(double v, DType dt);

}  // namespace kfuse::detail
