/** \file remove_noop_views.hpp
 * Pass: removes views that do nothing and merges chains of views where the merge is exact.
 */
#pragma once
#include <vector>

#include "kfuse/node.hpp"

namespace kfuse::detail {

/// Removes no-op views and merges consecutive views of the same kind:
///   - reshape / expand to the input's own shape, identity permute, full slice, zero pad and
///     single-input concat are removed;
///   - reshape(reshape(x)) -> reshape(x); permute(permute(x)) -> one composed permute (removed
///     when the composition is the identity); expand(expand(x)) -> expand(x);
///     slice(slice(x)) -> one slice (starts and steps composed);
///   - a permute that only moves size-1 axes (the other axes keep their order) becomes a
///     reshape, so it merges with reshapes around it.
/// Chains of different kinds (reshape(permute(x)), slice(expand(x)), ...) are kept: in general
/// no single view of the same kind computes them. Realized nodes are never looked through.
std::vector<NodeRef> remove_noop_views(const std::vector<NodeRef>& roots);

}  // namespace kfuse::detail
