// Collapsing adjacent reduce dimensions that every access walks as one contiguous run, e.g.
// sum over all of a [4096, 4096] tensor (reduce [4096, 4096] -> [16777216]) or over the last
// two axes of [B, 64, 64]. One flat reduce loop is what backends vectorise best (the xbyak
// backend supports exactly one reduce dimension), and the result is identical: the points are
// visited in the same order. Applied by the lowering to every fused kernel.
#pragma once
#include "ir/kernel.hpp"

namespace kfuse::ir {

/// Merges every mergeable pair of adjacent reduce dimensions of `k` in place; returns whether
/// anything changed.
bool collapse_reduce_dims(Kernel& k);

}  // namespace kfuse::ir
