/** \file simplify_algebra.hpp
 * Pass: local algebraic identities that hold exactly in IEEE arithmetic (and in the fp64
 * reference), written as a table of rules.
 */
#pragma once
#include <vector>

#include "kfuse/node.hpp"

namespace kfuse::detail {

/// Applies the identities of the rule table in simplify_algebra.cpp:
///   x*1, 1*x, x/1, x-0, x+0, 0+x, pow(x, 1) -> x (only when x already has the result's dtype
///   and shape; x+0 turns a -0 into +0, which compares equal, as XLA and TVM also accept);
///   neg(neg x), logical_not(logical_not b) -> x;  abs, relu, floor, ceil, round applied twice
///   -> once;  cast to the same dtype -> x;  cast(cast(x, m), t) -> cast(x, t) when every value
///   of x's dtype is exact in m (bool -> any, i32 -> i64/f64, f32 -> f64);
///   where(c, x, x), maximum(x, x), minimum(x, x), and/or(b, b) -> x.
/// Deliberately absent: x*0 -> 0 and x-x -> 0 (wrong for NaN and inf), reassociation.
/// Constants are recognised through views (a const scalar expanded to the operand's shape).
std::vector<NodeRef> simplify_algebra(const std::vector<NodeRef>& roots);

}  // namespace kfuse::detail
