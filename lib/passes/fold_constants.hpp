/** \file fold_constants.hpp
 * Pass: evaluates at compile time what depends only on constants.
 */
#pragma once
#include <vector>

#include "kfuse/node.hpp"

namespace kfuse::detail {

/// Replaces by a Const node (value stored in the node's dtype, as make_const does):
///   - element-wise ops (and cast, where) whose inputs are all Const, computed with the fp64
///     reference functions of the evaluator (evaluate_node) so folding and the oracle agree;
///   - views of a Const (reshape, permute, expand, slice), pads whose value equals the constant,
///     concats of equal constants;
///   - reductions of a Const when the result is exact: sum of c over n elements when c*n is
///     exact (every partial sum representable), prod when c is 0, 1 or -1, max/min (c) and
///     argmax/argmin (0) over a non-empty range, and any reduction's empty-range value.
/// Iota and Rand are never folded (their elements differ), nor are matmuls.
std::vector<NodeRef> fold_constants(const std::vector<NodeRef>& roots);

}  // namespace kfuse::detail
