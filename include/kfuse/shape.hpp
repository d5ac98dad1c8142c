/** \file shape.hpp
 * Shapes and the broadcasting rule (NumPy: align trailing dims; equal, or one of them is 1).
 */
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace kfuse {

using Shape = std::vector<int64_t>;

/// The most elements a shape may describe (2^53), virtual (expanded) shapes included. Kernels
/// compute element indices in int64 and carry compile-time extents and strides as exact
/// integers in a double (ir::Expr::value), exact up to 2^53; every stride and index of a shape
/// is bounded by its element count, and 2^53 elements of 8 bytes still fit an int64 byte offset.
constexpr int64_t kMaxNumel = int64_t{1} << 53;

/// True when no dim is negative and the product of the non-zero dims is at most kMaxNumel (so
/// the element count, every stride and every byte size fit; zero-size shapes are bounded too).
bool shape_fits(std::span<const int64_t> s);
/// Throws UserError "<what>: shape S ..." saying which rule of shape_fits S breaks.
[[noreturn]] void throw_bad_shape(const std::string& what, std::span<const int64_t> s);
/// Checks a shape where it is made; errors name `what` (the op the user called).
inline void check_shape(const char* what, std::span<const int64_t> s) {
  if (!shape_fits(s)) throw_bad_shape(what, s);
}

/// Number of elements (1 for a scalar of shape [], 0 if any dim is 0); `s` must fit (shape_fits).
int64_t shape_numel(const Shape& s);
/// "[4, 3]"
std::string shape_str(const Shape& s);
/// Row-major (contiguous) strides, in elements.
std::vector<int64_t> contiguous_strides(const Shape& s);
/// Normalises a possibly negative axis; throws UserError naming `op` when out of range.
int64_t normalize_axis(const char* op, int64_t axis, int64_t ndim);

}  // namespace kfuse
