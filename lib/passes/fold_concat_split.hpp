/** \file fold_concat_split.hpp
 * Pass: slices of a concat read the parts directly.
 */
#pragma once
#include <vector>

#include "kfuse/node.hpp"

namespace kfuse::detail {

/// For slice(concat(p0, p1, ...)) along the concat axis:
///   - a slice that selects exactly one part (step 1, the part's whole range) -> that part;
///   - a slice whose range along the axis lies inside one part (any step) -> a slice of that
///     part (start shifted by the part's offset);
///   - a step-1 slice that spans several parts but drops at least one -> a concat of the
///     touched parts, each sliced to the range it contributes.
/// Slicing on the other axes is carried over to the parts unchanged (it is the same for every
/// part). A realized concat is a leaf and is not looked through.
std::vector<NodeRef> fold_concat_split(const std::vector<NodeRef>& roots);

}  // namespace kfuse::detail
