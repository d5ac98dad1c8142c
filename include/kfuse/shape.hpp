/** \file shape.hpp
 * Shapes and the broadcasting rule (NumPy: align trailing dims; equal, or one of them is 1).
 */
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace kfuse {

using Shape = std::vector<int64_t>;

/// Number of elements (1 for a scalar of shape [], 0 if any dim is 0).
int64_t shape_numel(const Shape& s);
/// "[4, 3]"
std::string shape_str(const Shape& s);
/// Row-major (contiguous) strides, in elements.
std::vector<int64_t> contiguous_strides(const Shape& s);
/// Normalises a possibly negative axis; throws UserError naming `op` when out of range.
int64_t normalize_axis(const char* op, int64_t axis, int64_t ndim);

}  // namespace kfuse
