// The index check of the index ops (gather, index_select, embedding, embedding_bag), the
// generalisation of cross_entropy's label check (check_labels.hpp) to any index user. Indices are
// data: the check runs at record time when they are already computed (lib/api/index_ops.cpp),
// else when the graph is evaluated, as the host step of a CheckIndex node placed before the
// kernel that reads them. Kernels clamp indices as well, so even an unchecked index never reads
// out of bounds; the check is what turns a bad index into an error instead of wrong data.
#pragma once
#include <cstdint>
#include <vector>

#include "exact_value.hpp"
#include "kfuse/shape.hpp"

namespace kfuse::detail {

/// Which op reads with the indices (CheckIndex's attrs.ints[1]): it names the op in the error.
enum class IndexUse : int64_t { Gather, IndexSelect, Embedding, EmbeddingBag, BagOffsets };

/// Throws UserError naming the op, the first index outside [0, size), its position in `shape`
/// and the valid range. For BagOffsets (size = number of ids + 1) the offsets must also start at
/// 0 and never decrease. `values` are integers (exact_value.hpp).
void check_indices(const std::vector<Num>& values, const Shape& shape, int64_t size, IndexUse use);

}  // namespace kfuse::detail
