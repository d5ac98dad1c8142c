/** \file slice_before_split.hpp
 * Pass: a slice of a reshape that splits dims becomes a reshape of a slice.
 */
#pragma once
#include <vector>

#include "kfuse/node.hpp"

namespace kfuse::detail {

/// slice(reshape(x)) -> reshape(slice(x)) when the reshape only splits dims of x (and adds or
/// drops size-1 dims; core/reshape_runs.hpp) and, within each dim of x that it splits, the slice
/// keeps every inner dim whole and takes a step-1 range of the outermost one (a dim of x that is
/// not split takes the slice as it is, any step). The slice then reads one range of x's dim:
/// [B, S, 3, H, D] = reshape([B, S, 3*H*D]) sliced to [:, :, 1:2] is x's [:, :, H*D:2*H*D].
///
/// Why: attention splits one projection into q, k and v by slicing a reshape of it. The three
/// slices shared that reshape, so no kernel that reads one of them could take the reshape in
/// (it was needed by the others) and it became a kernel of its own: a copy of the whole
/// projection. Rewritten, each consumer reads the projection through its own slice and reshape,
/// folded into its loads. A realized reshape is a leaf and is not looked through.
std::vector<NodeRef> slice_before_split(const std::vector<NodeRef>& roots);

}  // namespace kfuse::detail
