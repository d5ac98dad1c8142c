// The graph evaluator behind reference.hpp, also the executor's path for opaque and source
// ops until a backend takes them.
#pragma once
#include <functional>
#include <unordered_map>
#include <vector>

#include "exact_value.hpp"
#include "kfuse/node.hpp"

namespace kfuse::detail {

/// A node's elements, interpreted by the node's dtype (exact_value.hpp): integers stay exact.
using Values = std::vector<Num>;
using ValueMap = std::unordered_map<const Node*, Values>;

/// Evaluates `roots` (floats in double, integers exactly). When `use_realized`, nodes with a
/// realized value act as leaves.
ValueMap evaluate_reference(const std::vector<const Node*>& roots, bool use_realized);

/// Evaluates one node whose inputs' values are given (in input order).
Values evaluate_node(const Node& n, const std::vector<const Values*>& inputs);

/// The fp64 reference of an element-wise op of the op table (ops.def), before dtype rounding.
double unary_ref(Op op, double x);
double binary_ref(Op op, double a, double b);
/// A storage's elements (copied from device memory first when the storage lives on a GPU; the
/// evaluator reads device tensors' values this way).
Values storage_values(const Storage& s);
/// A new host storage of `dt` holding `v` (elements of `dt`).
std::shared_ptr<Storage> values_storage(const Values& v, DType dt);
/// Converts doubles to a new storage of `dt` (with the dtype's rounding/wrapping).
std::shared_ptr<Storage> double_to_storage(const std::vector<double>& v, DType dt);
/// The value `v` takes when stored in `dt` (wraps integers, rounds f32).
double round_to_dtype(double v, DType dt);

}  // namespace kfuse::detail
