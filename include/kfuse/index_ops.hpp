/** \file index_ops.hpp
 * Index ops: reads at data-dependent positions (gather, index_select, embedding,
 * embedding_bag). Indices are integer tensors (i32 or i64). An index outside [0, size) is a
 * UserError naming the op, the index value, its position and the valid range: thrown when the
 * op is recorded if the indices are already computed, else by the eval that computes them
 * (before any kernel reads with them). Kernels clamp indices as well, so no read is ever out of
 * bounds. See README "Index ops".
 */
#pragma once
#include <cstdint>
#include <optional>

#include "kfuse/tensor.hpp"

namespace kfuse {

/// out[i][j][k] = x[index[i][j][k]][j][k] for axis 0 (and likewise for other axes): PyTorch
/// torch.gather / NumPy take_along_axis. `index` has x's rank; its size along every other axis
/// may not exceed x's; the result has index's shape and x's dtype.
Tensor gather(const Tensor& x, int64_t axis, const Tensor& index);
/// The slices of x at positions `index` (1-D) along `axis`: the result is x's shape with that
/// axis replaced by index.size (torch.index_select).
Tensor index_select(const Tensor& x, int64_t axis, const Tensor& index);
/// Rows of `table` [R, D] picked by `ids` (any shape): the result is ids.shape + [D].
Tensor embedding(const Tensor& table, const Tensor& ids);

/// How embedding_bag folds the rows of one bag.
enum class BagMode : uint8_t { Sum, Mean, Max };

/// Per-bag reduction of embedding rows (torch.nn.functional.embedding_bag, without
/// include_last_offset): `table` [R, D]; either 1-D `ids` [N] with `offsets` [B] (bag b is
/// ids[offsets[b] .. offsets[b+1]), the last bag ends at N; offsets[0] must be 0 and offsets
/// non-decreasing) or 2-D `ids` [B, L] (B bags of L ids) with `offsets` undefined. Result
/// [B, D]. An empty bag gives 0 in every mode. `per_sample_weights` (ids' shape) scales each
/// row, Sum mode only. Ids equal to `padding_idx` are skipped and do not count towards Mean's
/// divisor.
Tensor embedding_bag(const Tensor& table, const Tensor& ids, const Tensor& offsets, BagMode mode = BagMode::Sum,
                     const Tensor& per_sample_weights = {}, std::optional<int64_t> padding_idx = std::nullopt);

}  // namespace kfuse
