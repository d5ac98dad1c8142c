/** \file reshape_runs.hpp
 * How a reshape maps dims: THE one reading of it for the graph passes, the partitioner and the
 * lowering (lib/passes/slice_before_split.cpp, lib/fusion/partition.cpp, lower_group.cpp).
 */
#pragma once
#include <cstddef>
#include <utility>
#include <vector>

#include "kfuse/shape.hpp"

namespace kfuse::detail {

/// A reshape from `in` to `out` splits and merges runs of adjacent dims whose products match:
/// [B*S, H*D] -> [B, S, H, D] is the runs [B, S] <- [B*S] and [H, D] <- [H*D]. Each run is
/// (end of the run in `out`, end in `in`); runs start where the previous one ended, trailing
/// size-1 dims join the last run. Empty when an extent is 0 or the shapes' products differ.
std::vector<std::pair<size_t, size_t>> reshape_runs(const Shape& out, const Shape& in);

/// Whether the reshape from `in` to `out` only splits dims (and adds or drops size-1 dims):
/// every run holds at most one dim of `in` other than 1. Such a reshape keeps an index affine:
/// each dim of `in` is read at its run's linear index, no division (a merge needs one).
bool reshape_only_splits(const Shape& out, const Shape& in);

}  // namespace kfuse::detail
